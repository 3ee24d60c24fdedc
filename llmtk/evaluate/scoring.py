"""The `Scorer` over a llmtk GPT: log-likelihoods, greedy generation, rolling perplexity.

Any module with `model(idx) -> (logits, _)` and a `cfg.seq_len` works (the llmtk GPT,
with or without LoRA adapters). Contexts and continuations are tokenized separately
and concatenated (lm-eval's `_encode_pair`), so the continuation's tokens are the same
for every context, except that the context's trailing whitespace tokens are scored with
the continuation, as lm-eval does; an empty context is the EOS token (lm-eval's prefix
token). A pair
longer than the model's window keeps its last seq_len + 1 tokens (lm-eval truncates
from the left too).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from llmtk.errors import UsageError
from llmtk.evaluate.prompts import Context


class ModelScorer:
    """prompt_ids: renders chat messages with the model's chat template (the assistant's
    turn opened) into token ids; contexts given as messages need it. Plain-text contexts
    are tokenized as they are. Log-likelihood requests are scored longest first in
    batches of `batch_size` (lm-eval's order: a batch pads little, and running out of
    memory shows on the first batch), answered in request order."""

    def __init__(self, model, tokenizer, *, prompt_ids: Callable[[list[dict]], list[int]]
                 | None = None, autocast=None, batch_size: int = 16):
        import contextlib

        self.model, self.tok = model, tokenizer
        self.seq_len = model.cfg.seq_len
        self.prompt_ids = prompt_ids
        self.batch_size = batch_size
        self.device = next(model.parameters()).device
        self.autocast = autocast or contextlib.nullcontext

    def context_ids(self, ctx: Context) -> list[int]:
        """The token ids a context is scored after (an empty text: the EOS token)."""
        if isinstance(ctx, str):
            return self.tok.encode(ctx) or [self.tok.eos_id]
        if self.prompt_ids is None:
            raise UsageError("a chat-format context needs the model's chat template")
        return list(self.prompt_ids(ctx))

    def _split_trailing_space(self, ids: list[int]) -> tuple[list[int], list[int]]:
        """(context, its trailing whitespace tokens): lm-eval's `_encode_pair` moves a
        context's trailing whitespace into the continuation, so a chat template's newline
        after the assistant header is scored with each choice (the same for every choice,
        so acc is unchanged; acc_norm divides it by each choice's length)."""
        k = len(ids)
        while k > 1 and not self.tok.decode([ids[k - 1]]).strip():
            k -= 1
        return ids[:k], ids[k:]

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

    def loglikelihood(self, requests: list[tuple[Context, str]]) -> list[tuple[float, bool]]:
        was = self._eval_mode()
        memo: dict[str, list[int]] = {}  # the choices of one item share its context
        rows, conts = [], []
        for ctx, cont in requests:
            key = ctx if isinstance(ctx, str) else repr(ctx)
            if key not in memo:
                memo[key] = self._split_trailing_space(self.context_ids(ctx))
            ctx_ids, space = memo[key]
            cont_ids = space + self.tok.encode(cont)
            whole = (ctx_ids + cont_ids)[-(self.seq_len + 1):]
            n = min(len(cont_ids), len(whole) - 1)
            rows.append(whole[:-1])
            conts.append(whole[len(whole) - n:])
        order = sorted(range(len(rows)), key=lambda i: (-len(rows[i]), i))
        out: list[tuple[float, bool]] = [(0.0, True)] * len(rows)
        for b in range(0, len(order), self.batch_size):
            chunk = order[b:b + self.batch_size]
            lp = self._logprobs([rows[i] for i in chunk])  # (B, L, V)
            for j, i in enumerate(chunk):
                row, cont = rows[i], conts[i]
                if not cont:
                    continue
                start = len(row) - len(cont)  # the position that predicts cont[0]
                span = lp[j, start:len(row)]  # (n, V)
                target = span.new_tensor(cont).long()
                ll = span.gather(1, target[:, None]).sum().item()
                out[i] = (ll, bool((span.argmax(dim=-1) == target).all()))
        self.model.train(was)
        return out

    def generate(self, context: Context, stop: list[str],
                 max_new_tokens: int) -> tuple[str, float]:
        import torch

        was = self._eval_mode()
        ids = self.context_ids(context)
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

    def rolling(self, texts: list[str], chat: bool = False) -> list[tuple[float, int]]:
        """Disjoint windows of up to seq_len predicted tokens; the first window also holds
        the prefix (the EOS token, or the chat template's opened assistant turn)."""
        was = self._eval_mode()
        T = self.seq_len
        prefix = self.context_ids([]) if chat else [self.tok.eos_id]
        prefix = prefix[-(T // 2):] or [self.tok.eos_id]
        windows, owner = [], []  # (input ids, offset of the first target's predictor, targets)
        for k, text in enumerate(texts):
            ids = prefix + self.tok.encode(text)
            pos = len(prefix)  # the next token to predict
            while pos < len(ids):
                first = 0 if pos == len(prefix) else pos - 1
                end = min(len(ids), first + T + 1)
                windows.append((ids[first:end - 1], pos - 1 - first, ids[pos:end]))
                owner.append(k)
                pos = end
        sums = [0.0] * len(texts)
        counts = [0] * len(texts)
        for b in range(0, len(windows), self.batch_size):
            chunk = windows[b:b + self.batch_size]
            lp = self._logprobs([inp for inp, _, _ in chunk])  # (B, L, V)
            for j, (_, off, tgt) in enumerate(chunk):
                t = lp.new_tensor(tgt).long()
                sums[owner[b + j]] += lp[j, off:off + len(tgt)].gather(1, t[:, None]).sum().item()
                counts[owner[b + j]] += len(tgt)
        self.model.train(was)
        return list(zip(sums, counts, strict=True))
