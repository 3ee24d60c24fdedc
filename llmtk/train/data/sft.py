"""Instruction data for `llmtk train --sft`: records -> conversations -> packed rows.

Layouts, detected per record (`--template` forces one):
  chat    {"messages": [{"role": "system"|"user"|"assistant", "content": ...}, ...]}
  prompt  {"prompt": ..., "response": ...}            (optional "system")
  alpaca  {"instruction": ..., "input": ..., "output": ...}  (input may be empty)
A conversation becomes token ids through the chat template (llmtk.train.data.chat); only
assistant tokens carry loss, every other target is the ignore index -1.

Rows: seq_len + 1 tokens each. With packing (the default) whole examples are laid
one after another in file order until the next would not fit; each token carries
its example's number (`doc`) so the model attends within an example only and
restarts positions, and the target of an example's last token is never the next
example's first. Without packing each row holds one example and padding. An
example longer than a row keeps its first seq_len + 1 tokens (counted as truncated);
one left without any assistant token is dropped (counted).

The rows are a fixed array, so the data position is one integer and resume is exact,
as for pre-training (the `Sampler`'s seeded epoch permutation, over rows).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import orjson

from llmtk.errors import ConfigError, DataError
from llmtk.train.data.cache import Sampler
from llmtk.train.data.chat import check_messages

LAYOUTS = ("auto", "chat", "prompt", "alpaca")


def detect(rec: dict) -> str | None:
    if "messages" in rec:
        return "chat"
    if "prompt" in rec and "response" in rec:
        return "prompt"
    if "instruction" in rec and "output" in rec:
        return "alpaca"
    return None


def to_messages(rec: dict, layout: str, where: str) -> list[dict]:
    """One record of the given layout as a conversation."""
    found = layout if layout != "auto" else detect(rec)
    try:
        if found == "chat":
            return check_messages(rec["messages"], where)
        if found == "prompt":
            user, answer = rec["prompt"], rec["response"]
        elif found == "alpaca":
            user = rec["instruction"]
            if rec.get("input"):
                user = f"{user}\n\n{rec['input']}"
            answer = rec["output"]
        else:
            raise DataError(f"{where}: not an instruction record (expected messages, "
                            "prompt/response or instruction/input/output)")
    except KeyError as e:
        raise DataError(f"{where}: no {e.args[0]!r} field for the {layout!r} layout") from None
    if not isinstance(user, str) or not isinstance(answer, str):
        raise DataError(f"{where}: prompt and response must be strings")
    msgs = [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
    if isinstance(rec.get("system"), str):
        msgs.insert(0, {"role": "system", "content": rec["system"]})
    return msgs


def read_conversations(paths: list[str], layout: str) -> list[tuple[str, list[dict]]]:
    """(where, messages) of every record in the files."""
    from llmtk.io import expand_inputs, read_docs

    if layout not in LAYOUTS:
        raise ConfigError("template", f"must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    files = expand_inputs(paths)
    if "-" in files:
        raise ConfigError("data", "training cannot read stdin (the cache and resume need files)")
    return [(d.where(), to_messages(d.data, layout, d.where()))
            for d in read_docs(files, require_text=False)]


def split_val(convs: list, fraction: float) -> tuple[list, list]:
    """A stable content-hash split (the same example always lands on the same side)."""
    if fraction <= 0:
        return convs, []
    train, val = [], []
    for c in convs:
        h = int.from_bytes(hashlib.blake2b(orjson.dumps(c[1]), digest_size=8).digest(), "big")
        (val if h < fraction * 2.0**64 else train).append(c)
    return train, val


@dataclass
class Rows:
    """Packed SFT rows: tokens, targets' trained flags and example numbers, (N, T + 1)."""

    tokens: np.ndarray
    trained: np.ndarray
    doc: np.ndarray
    seq_len: int
    stats: dict

    def __len__(self) -> int:
        return len(self.tokens)

    def get(self, i: int) -> np.ndarray:
        """Row i as a (3, T + 1) int64 array: tokens, trained, doc."""
        return np.stack([self.tokens[i], self.trained[i], self.doc[i]]).astype(np.int64)


def build_rows(convs: list[tuple[str, list[dict]]], chat, seq_len: int, pad_id: int,
               packing: bool = True) -> Rows:
    width = seq_len + 1
    encoded, truncated, dropped = [], 0, 0
    for _where, msgs in convs:
        ids, trained = chat.encode(msgs)
        if len(ids) > width:
            ids, trained = ids[:width], trained[:width]
            truncated += 1
        if not any(trained[1:]):  # the first token is never a target
            dropped += 1
            continue
        encoded.append((ids, trained))
    if not encoded:
        where = convs[0][0] if convs else "--data"
        raise DataError(f"{where}: no instruction example with an assistant token "
                        f"(read {len(convs)}, dropped {dropped})")
    rows: list[list[tuple[list[int], list[bool]]]] = [[]]
    used = 0
    for ex in encoded:
        if rows[-1] and (not packing or used + len(ex[0]) > width):
            rows.append([])
            used = 0
        rows[-1].append(ex)
        used += len(ex[0])
    n = len(rows)
    tokens = np.full((n, width), pad_id, dtype=np.int32)
    trained = np.zeros((n, width), dtype=np.bool_)
    doc = np.zeros((n, width), dtype=np.int32)
    for r, examples in enumerate(rows):
        at = 0
        for k, (ids, tr) in enumerate(examples):
            tokens[r, at:at + len(ids)] = ids
            trained[r, at:at + len(ids)] = tr
            doc[r, at:at + len(ids)] = k
            at += len(ids)
        doc[r, at:] = len(examples)  # padding: its own "example", never trained
    # A target counts only inside one example: never an example's first token.
    trained[:, 1:] &= doc[:, 1:] == doc[:, :-1]
    trained[:, 0] = False
    stats = {"examples": len(encoded), "truncated": truncated, "dropped": dropped,
             "rows": n, "trained_tokens": int(trained.sum()),
             "fill": round(float((tokens != pad_id).sum() / tokens.size), 4) if n else 0.0}
    return Rows(tokens, trained, doc, seq_len, stats)


class SFTSampler(Sampler):
    """The pre-training `Sampler` over packed rows: its rows are (B, 3, T + 1) int64
    (tokens, trained flags, example ids); batches are (x, y, doc)."""

    @staticmethod
    def split(t):
        """(B, 3, T + 1) rows -> (x, y, doc), (B, T) each; y is -1 where no loss is taken."""
        import torch

        tokens, trained, doc = t[:, 0], t[:, 1].bool(), t[:, 2]
        y = torch.where(trained[:, 1:], tokens[:, 1:], torch.full_like(tokens[:, 1:], -1))
        return tokens[:, :-1], y, doc[:, :-1]  # (B, T) each

    def __init__(self, rows: Rows, micro_batch: int, world: int, rank: int, seed: int,
                 shuffle: bool = True, cp: tuple[int, int] = (1, 0)):
        super().__init__(rows, micro_batch, world, rank, seed, shuffle)
        self.cp = cp  # (size, rank): --cp's ranks each take their chunks of every row

    @cached_property
    def _per_row(self) -> np.ndarray:
        """(rows,) each row's loss-carrying targets (position 0 is never a target)."""
        return self.w.trained[:, 1:].sum(axis=1)

    @cached_property
    def _per_row_mine(self) -> np.ndarray:
        """(rows,) the same at this cp rank's positions of each row (its chunks)."""
        from llmtk.train.layout.context_parallel import chunk_positions

        targets = self.w.trained[:, 1:]
        mine = chunk_positions(targets.shape[1], *self.cp)
        return targets[:, np.concatenate([np.arange(r.start, r.stop) for r in mine])].sum(axis=1)

    def _trained(self, start: int, count: int, mine: bool = False) -> int:
        """Loss-carrying tokens in rows [start, start + count) of the job's order (`mine`:
        only at this cp rank's positions of each row)."""
        per_row = self._per_row_mine if mine and self.cp[0] > 1 else self._per_row
        return int(sum(per_row[self._index(start + j)] for j in range(count)))

    def loss_scale(self, step_position: int, micro: int, grad_accum: int) -> float:
        """The factor that turns this rank's micro-batch mean loss into its share of the
        mean over every trained token of the optimizer step (all ranks, all micro-batches),
        so a step's loss and gradient do not depend on how it is split across processes
        and micro-steps. The trainer divides by grad_accum and DDP/FSDP2 average over the
        data-parallel and cp ranks: scale = n_micro * world * cp * grad_accum / n_step,
        n_micro counted at this cp rank's positions (under --cp the ranks of a group read
        the same rows, each its own chunks of them)."""
        n_step = self._trained(step_position, self.B * self.world * grad_accum)
        n = self._trained(step_position + micro * self.global_batch + self.rank * self.B,
                          self.B, mine=True)
        return n * self.world * self.cp[0] * grad_accum / max(1, n_step)

    def cp_share(self, position: int) -> float:
        """Under --cp, the factor that turns this rank's mean loss over its chunks of its
        micro-batch at `position` into its share of the micro-batch's mean (validation
        averages the cp ranks' losses); 1 without cp."""
        if self.cp[0] == 1:
            return 1.0
        start = position + self.rank * self.B
        return self._trained(start, self.B, mine=True) * self.cp[0] / max(
            1, self._trained(start, self.B))

    def trained_tokens(self, position: int) -> int:
        """Loss-carrying tokens in the first `position` rows the job has consumed."""
        per_row = self.w.trained.sum(axis=1)
        n = len(self.w)
        epochs, rest = divmod(position, n)
        total = int(per_row.sum()) * epochs
        if rest:
            order = (np.random.default_rng([self.seed, epochs]).permutation(n)
                     if self.shuffle else np.arange(n))
            total += int(per_row[order[:rest]].sum())
        return total
