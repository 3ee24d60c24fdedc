"""The `Scorer` over a llmtk GPT: log-likelihoods, greedy generation, rolling perplexity.

Any module with `model(idx) -> (logits, _)` and a `cfg.seq_len` works (the llmtk GPT,
with or without LoRA adapters). Contexts and continuations are tokenized separately
and concatenated (lm-eval's `_encode_pair`), so the continuation's tokens are the same
for every context; an empty context is the EOS token (lm-eval's prefix token). A pair
longer than the model's window keeps its last seq_len + 1 tokens (lm-eval truncates
from the left too).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from llmtk.evaluate.tasks import Item


class ModelScorer:
    """prompt_ids: for an instruction-tuned model, renders an item's chat `messages` with
    the run's chat template (generation prompt included) into token ids; None prompts
    with the item's plain text, as for a base model."""

    def __init__(self, model, tokenizer, *, prompt_ids: Callable[[list[dict]], list[int]]
                 | None = None, autocast=None):
        import contextlib

        self.model, self.tok = model, tokenizer
        self.seq_len = model.cfg.seq_len
        self.prompt_ids = prompt_ids
        self.device = next(model.parameters()).device
        self.autocast = autocast or contextlib.nullcontext

    def _logprobs(self, rows: list[list[int]]):
        """Right-padded forward of token rows -> log-softmax (B, L, V) in fp32."""
        import torch

        width = max(len(r) for r in rows)
        idx = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            idx[i, :len(r)] = torch.tensor(r, dtype=torch.long)
        with torch.no_grad(), self.autocast():
            logits, _ = self.model(idx.to(self.device))
        return torch.log_softmax(logits.float(), dim=-1).cpu()

    def _eval_mode(self):
        was = self.model.training
        self.model.eval()
        return was

    def loglikelihood(self, requests: list[tuple[str, str]]) -> list[tuple[float, bool]]:
        was = self._eval_mode()
        rows, conts = [], []
        for ctx, cont in requests:
            ctx_ids = self.tok.encode(ctx) or [self.tok.eos_id]
            cont_ids = self.tok.encode(cont)
            whole = (ctx_ids + cont_ids)[-(self.seq_len + 1):]
            n = min(len(cont_ids), len(whole) - 1)
            rows.append(whole[:-1])
            conts.append(whole[len(whole) - n:])
        lp = self._logprobs(rows)  # (B, L, V)
        out = []
        for i, (row, cont) in enumerate(zip(rows, conts, strict=True)):
            start = len(row) - len(cont)  # the position that predicts cont[0]
            span = lp[i, start:len(row)]  # (n, V)
            target = span.new_tensor(cont).long() if cont else None
            if target is None:
                out.append((0.0, True))
                continue
            ll = span.gather(1, target[:, None]).sum().item()
            greedy = bool((span.argmax(dim=-1) == target).all())
            out.append((ll, greedy))
        self.model.train(was)
        return out

    def generate(self, item: Item, stop: list[str], max_new_tokens: int) -> tuple[str, float]:
        import torch

        was = self._eval_mode()
        if self.prompt_ids is not None:
            ids = list(self.prompt_ids(item.messages))
        else:
            ids = self.tok.encode(item.prompt) or [self.tok.eos_id]
        new: list[int] = []
        total = 0.0
        text = ""
        for _ in range(max_new_tokens):
            ctx = torch.tensor([(ids + new)[-self.seq_len:]], dtype=torch.long)
            with torch.no_grad(), self.autocast():
                logits, _ = self.model(ctx.to(self.device))
            lp = torch.log_softmax(logits[0, -1].float(), dim=-1)
            nxt = int(lp.argmax())
            if nxt == self.tok.eos_id:
                break
            new.append(nxt)
            total += float(lp[nxt])
            text = self.tok.decode(new)
            cut = min((text.find(s) for s in stop if s in text), default=-1)
            if cut >= 0:
                text = text[:cut]
                break
        self.model.train(was)
        return text, (total / len(new) if new else -math.inf)

    def rolling(self, texts: list[str]) -> list[tuple[float, int]]:
        was = self._eval_mode()
        T = self.seq_len
        windows, owner = [], []
        for k, text in enumerate(texts):
            ids = [self.tok.eos_id, *self.tok.encode(text)]
            for start in range(1, len(ids), T):  # disjoint windows of T predicted tokens
                windows.append((ids[start - 1:start - 1 + T], ids[start:start + T]))
                owner.append(k)
        sums = [0.0] * len(texts)
        counts = [0] * len(texts)
        for b in range(0, len(windows), 16):
            chunk = windows[b:b + 16]
            lp = self._logprobs([inp for inp, _ in chunk])
            for j, (_, tgt) in enumerate(chunk):
                t = lp.new_tensor(tgt).long()
                sums[owner[b + j]] += lp[j, :len(tgt)].gather(1, t[:, None]).sum().item()
                counts[owner[b + j]] += len(tgt)
        self.model.train(was)
        return list(zip(sums, counts, strict=True))
