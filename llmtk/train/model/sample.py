"""Text generation from a loaded model: greedy or temperature / top-k sampling, stopping
at the end-of-document token.

One prompt at a time (no padding to get wrong) and no KV cache: each new token runs the
model over the last seq_len tokens, as nanoGPT's sample.py does. Clear, exact, and fast
enough for the small models llmtk trains on a laptop; serve big models with a server.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SampleOptions:
    max_new_tokens: int = 64
    temperature: float = 0.8   # 0: greedy (argmax)
    top_k: int | None = 50     # None or 0: the whole vocabulary
    seed: int = 0


def complete(model, tok, prompt: str, opts: SampleOptions, generator=None) -> tuple[str, int]:
    """(the continuation of prompt, number of tokens generated); stops early at EOS."""
    import torch
    import torch.nn.functional as F

    device = next(model.parameters()).device
    ids = tok.encode(prompt) or [tok.eos_id]  # an empty prompt starts a new document
    idx = torch.tensor([ids], dtype=torch.long, device=device)  # (1, T)
    new: list[int] = []
    vocab = getattr(tok, "vocab_size", None)
    with torch.no_grad():
        for _ in range(opts.max_new_tokens):
            logits, _ = model(idx[:, -model.cfg.seq_len:])
            logits = logits[0, -1, :].float()  # (V,)
            if vocab is not None and vocab < logits.numel():
                logits[vocab:] = float("-inf")  # padded rows of the embedding are no tokens
            if opts.temperature <= 0:
                nxt = int(logits.argmax())
            else:
                logits = logits / opts.temperature
                if opts.top_k:
                    kth = torch.topk(logits, min(opts.top_k, logits.numel())).values[-1]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                probs = F.softmax(logits, dim=-1)
                nxt = int(torch.multinomial(probs, 1, generator=generator))
            if nxt == tok.eos_id:
                break
            new.append(nxt)
            idx = torch.cat((idx, torch.tensor([[nxt]], device=device)), dim=1)
    return tok.decode(new), len(new)
