"""`llmtk train batch RUN --step N`: the documents behind one optimizer step's batch.

Computed, not recorded: the run's config.json names its data, batch shape, world size and
seed, so the data position of step N is (N - 1) x windows per step, plus the windows a
`--on-spike rollback` skipped before it (its `rollback` events in metrics.jsonl say how
many). Micro-batch m of the step starts at that position + m x (batch-size x world), and
rank r takes its batch-size windows after r x batch-size. Each window's tokens map back to
the documents they came from through the token dataset's index (file, record, id and the
span of the document's tokens used), and the documents' text is read back from their files.
Runs on the in-process token cache keep no document boundaries: tokenize with `llmtk train
tokenize` and train on the dataset to trace batches.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

from llmtk.errors import DataError, UsageError


def _run_config(run: str) -> dict:
    path = os.path.join(run, "config.json")
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise UsageError(f"{run}: not a run directory ({path}: {e.strerror})") from None
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: corrupt ({e})") from None


def _skipped_before(run: str, step: int) -> int:
    """Windows skipped by rollbacks that happened before step `step` was trained."""
    from llmtk.io.metrics import read_metrics

    path = os.path.join(run, "metrics.jsonl")
    if not os.path.exists(path):
        return 0
    return sum(int(r.get("skipped_windows", 0)) for r in read_metrics(path)
               if r.get("event") == "rollback" and step > r.get("to_step", step))


def batch_documents(run: str, step: int, rank: int | None = None,
                    with_text: bool = True) -> Iterator[dict]:
    """One dict per (window, document) of step `step` (1-based), rank `rank` or all ranks:
    step, rank, micro, window (its data position), source, id, file, record, tokens (the
    [first, last) span of the document's tokens in the window) and text."""
    from llmtk.train.config import TRAIN_FIELDS, TrainConfig
    from llmtk.train.inputs import TOKENS_KEY, open_training_data, token_specs
    from llmtk.train.tokens import TokenDataset

    config = _run_config(run)
    if config.get("cache") is None or not str(config["cache"]).startswith(TOKENS_KEY):
        raise UsageError(f"{run}: trained on documents through the token cache, which keeps no "
                         "document boundaries; tokenize them with `llmtk train tokenize` and "
                         "train on the dataset to trace batches")
    cfg = TrainConfig(**{k: v for k, v in config["train"].items() if k in TRAIN_FIELDS})
    world, T = int(config["world_size"]), int(config["model"]["seq_len"])
    B, ga = cfg.batch_size, cfg.grad_accum
    if step < 1 or step > cfg.steps:
        raise UsageError(f"--step {step}: the run has steps 1 to {cfg.steps}")
    if rank is not None and not 0 <= rank < world:
        raise UsageError(f"--rank {rank}: the run had ranks 0 to {world - 1}")
    data = open_training_data(cfg, config["cache"], T, world, 0)
    specs = token_specs("data", cfg.data) or []
    datasets = [TokenDataset.open(s.path) for s in specs]
    names = [s.name or s.path for s in specs]
    start = (step - 1) * B * world * ga + _skipped_before(run, step)
    ranks = range(world) if rank is None else [rank]
    out = []
    for m in range(ga):
        for r in ranks:
            for j in range(B):
                position = start + m * B * world + r * B + j
                s, w = data.train.locate(position)
                lo, hi = w * T, w * T + T + 1
                for doc in datasets[s].documents(lo, hi):
                    out.append({"step": step, "rank": r, "micro": m, "window": position,
                                "source": names[s], **doc,
                                "text_field": datasets[s].meta["text_field"]})
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
