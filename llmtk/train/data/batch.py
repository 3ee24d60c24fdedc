"""`llmtk train batch RUN --step N`: the documents behind one optimizer step's batch.

Computed, not recorded: the run's config.json names its data, batch shape, world size and
seed, so the data position of step N is (N - 1) x windows per step, plus the windows a
`--on-spike rollback` skipped before it (its `rollback` events in metrics.jsonl say how
many). Micro-batch m of the step starts at that position + m x (batch-size x dp), and
rank r takes its batch-size windows after r x batch-size. Each window's tokens map back to
the documents they came from through the token datasets' index (the in-process cache's
too, from version 3: file, record, id and the span of the document's tokens used), and
the documents' text is read back from their files. `--skipped` lists the windows each rollback
skipped instead ([position, position + skipped_windows) of its event).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

from llmtk.errors import DataError, UsageError

SKIPPED_DOCS = 256  # documents a rollback's event names at most (train batch --skipped: all)


def rollback_documents(source, sampler, seq_len: int, start: int, stop: int) -> list[dict]:
    """The documents (id, file, record) of windows [start, stop) of a pre-training run on
    `source` (llmtk.train.data.inputs.DataSource), for a rollback's event; `llmtk train batch RUN
    --skipped` lists them all, with their text."""
    return DocumentFinder(source, sampler, seq_len).span(start, stop, SKIPPED_DOCS)


def document_ids(x, eos: int):
    """(B, T) token ids -> (B, T) document ids: a document's tokens end with its EOS (the
    token datasets' layout), so a token's id is the number of EOS tokens before it."""
    ends = (x == eos).long()
    return ends.cumsum(dim=1) - ends


class DocMasked:
    """A sampler whose batches carry the documents' ids, (x, y, doc), for --doc-mask: the
    model then keeps attention inside each document and restarts positions at each one
    (GPT.forward's `doc`, as SFT's packed examples)."""

    def __init__(self, sampler, eos: int):
        self.sampler, self.eos = sampler, eos

    def __getattr__(self, name: str):  # everything else is the sampler's
        return getattr(self.sampler, name)

    def split(self, t):
        x, y = self.sampler.split(t)
        return x, y, document_ids(x, self.eos)

    def batch(self, position: int):
        return self.split(self.sampler.rows(position))


def doc_masked(data, on: bool, eos: int) -> tuple:
    """(train, val, val_sets) of `data` (inputs.TrainingData), their batches with document
    ids when `on` (--doc-mask)."""
    if not on:
        return data.train, data.val, data.val_sets
    return (DocMasked(data.train, eos), data.val and DocMasked(data.val, eos),
            {name: DocMasked(s, eos) for name, s in data.val_sets.items()})


def _run_config(run: str) -> dict:
    path = os.path.join(run, "config.json")
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise UsageError(f"{run}: not a run directory ({path}: {e.strerror})") from None
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: corrupt ({e})") from None


def _data_parallel(config: dict) -> int:
    """How many ranks of the run read different windows: its layout's dp (the ranks of a
    tp group, pipeline stages and a cp group share each window); a run written before
    config.json recorded the layout had every rank read its own."""
    from llmtk.train.layout.mesh import Layout

    lay = config.get("layout")
    return Layout(**lay).dp if lay else int(config["world_size"])


def _skipped_before(run: str, step: int) -> int:
    """Windows skipped by rollbacks that happened before step `step` was trained."""
    from llmtk.io.metrics import read_metrics

    path = os.path.join(run, "metrics.jsonl")
    if not os.path.exists(path):
        return 0
    return sum(int(r.get("skipped_windows", 0)) for r in read_metrics(path)
               if r.get("event") == "rollback" and step > r.get("to_step", step))


class DocumentFinder:
    """The documents of any training window of a run: `at(position)` for the window the job
    reads at data position `position`, through the run's own sampler (so a 1-process and an
    N-process view agree)."""

    def __init__(self, source, sampler, seq_len: int):
        self.sampler = sampler
        self.names = [source.label(s) for s in source.train]
        self.fields = [s.dataset.meta["text_field"] for s in source.train]
        # window w is tokens [w * T, w * T + T + 1) of its source's stream
        self._find = [lambda w, d=s.dataset: d.documents(w * seq_len, w * seq_len + seq_len + 1)
                      for s in source.train]

    def at(self, position: int) -> list[dict]:
        """source, id, file, file_ordinal, record, tokens (the [first, last) span of each
        document's tokens in the window) and text_field, per document of the window."""
        s, w = self.sampler.locate(position)
        return [{"source": self.names[s], **doc, "text_field": self.fields[s]}
                for doc in self._find[s](w)]

    def span(self, start: int, stop: int, limit: int) -> list[dict]:
        """The distinct documents of windows [start, stop), up to `limit`, without text:
        id, file, record (for a rollback's event row)."""
        seen: dict[tuple, dict] = {}
        for position in range(start, stop):
            for doc in self.at(position):
                key = (doc["source"], doc["file"], doc["record"])
                if key not in seen:
                    seen[key] = {"id": doc["id"], "file": doc["file"], "record": doc["record"]}
                if len(seen) >= limit:
                    return list(seen.values())
        return list(seen.values())


def _open(run: str):
    """(config, TrainConfig, DocumentFinder) of a run directory."""
    from llmtk.train.config import TRAIN_FIELDS, TrainConfig, section
    from llmtk.train.data.inputs import DataSpec, open_training_data, recorded_source

    config = _run_config(run)
    key = config.get("cache")
    cfg = TrainConfig(**{k: v for k, v in config["train"].items() if k in TRAIN_FIELDS})
    if not key or cfg.sft:
        raise UsageError(f"{run}: an --sft run (its examples are not token windows)")
    world, T = _data_parallel(config), int(config["model"]["seq_len"])
    spec = section(DataSpec, cfg)
    try:
        source = recorded_source(spec, key)
    except FileNotFoundError as e:
        raise DataError(f"{run}: its data is gone ({e.filename}); train batch reads the "
                        "run's token cache or datasets") from None
    data = open_training_data(spec, source, T, world, 0)
    return config, cfg, DocumentFinder(source, data.train, T)


def batch_documents(run: str, step: int, rank: int | None = None,
                    with_text: bool = True) -> Iterator[dict]:
    """One dict per (window, document) of step `step` (1-based), rank `rank` or all ranks:
    step, rank, micro, window (its data position), source, id, file, record, tokens (the
    [first, last) span of the document's tokens in the window) and text."""
    config, cfg, finder = _open(run)
    world = _data_parallel(config)  # the ranks reading different windows
    B, ga = cfg.batch_size, cfg.grad_accum
    if step < 1 or step > cfg.steps:
        raise UsageError(f"--step {step}: the run has steps 1 to {cfg.steps}")
    if rank is not None and not 0 <= rank < world:
        raise UsageError(f"--rank {rank}: the run had ranks 0 to {world - 1}")
    start = (step - 1) * B * world * ga + _skipped_before(run, step)
    ranks = range(world) if rank is None else [rank]
    out = []
    for m in range(ga):
        for r in ranks:
            for j in range(B):
                position = start + m * B * world + r * B + j
                out += [{"step": step, "rank": r, "micro": m, "window": position, **doc}
                        for doc in finder.at(position)]
    yield from _finish(out, with_text)


def skipped_documents(run: str, with_text: bool = True) -> Iterator[dict]:
    """One dict per (window, document) that a `--on-spike rollback` skipped: the spike's
    step, rollback (its ordinal), window, source, id, file, record, tokens and text."""
    from llmtk.io.metrics import read_metrics

    _config, _cfg, finder = _open(run)
    path = os.path.join(run, "metrics.jsonl")
    events = [r for r in read_metrics(path) if r.get("event") == "rollback"] \
        if os.path.exists(path) else []
    if not events:
        raise UsageError(f"{run}: no rollback events in its metrics.jsonl (nothing skipped)")
    out = []
    for n, e in enumerate(events):
        if "position" not in e:
            raise DataError(f"{path}: a rollback event without its data position (written by "
                            "an older llmtk); list its steps with --step instead")
        for position in range(e["position"], e["position"] + e["skipped_windows"]):
            out += [{"step": e["from_step"], "rollback": n, "window": position, **doc}
                    for doc in finder.at(position)]
    yield from _finish(out, with_text)


def _finish(out: list[dict], with_text: bool) -> Iterator[dict]:
    if with_text:
        _add_text(out)
    for doc in out:
        doc.pop("text_field")
        yield doc


def _add_text(docs: list[dict]) -> None:
    """Each doc's text, read back from its file (each file read once, up to the last
    record wanted)."""
    from llmtk.io import read_docs

    wanted: dict[tuple[str, str], set[int]] = {}
    for d in docs:
        wanted.setdefault((d["file"], d["text_field"]), set()).add(d["record"])
    texts: dict[tuple[str, int], str] = {}
    for (path, field), records in wanted.items():
        if not os.path.exists(path):
            raise DataError(f"{path}: the tokenized input is gone (needed for its text)")
        last = max(records)
        for rec in read_docs([path], text_field=field, on_bad=lambda bad: None):
            if rec.index in records:
                texts[(path, rec.index)] = rec.text
            if rec.index >= last:
                break
    for d in docs:
        d["text"] = texts.get((d["file"], d["record"]))
