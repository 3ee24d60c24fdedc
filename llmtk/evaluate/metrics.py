"""Task metrics as lm-evaluation-harness defines them, over any `Scorer`.

Multiple choice (lm-eval `multiple_choice` tasks): each choice is scored as the
summed log-likelihood of " " + choice after the context (the choice alone, as the
assistant's reply, through a chat template; contexts and few-shot examples: prompts.py);
  acc      = mean(argmax_i ll_i == gold)
  acc_norm = mean(argmax_i ll_i / len(choice_i) == gold), len in characters
(lm-eval's `completion_len = [len(choice) for choice in choices]`, the choice
without the delimiter). Ties go to the first choice (numpy argmax).

Generation: greedy decoding, then exact match after lm-eval's GSM8K clean-up
(drop ",", "$", a trailing "." and anything up to "#### "; case-insensitive).
GSM8K reports `exact_match` (the "strict-match" filter: the number after
"#### ") and `exact_match_flexible` (the "flexible-extract" filter: the last
number in the output). Other generation tasks compare the whole stripped output.

Perplexity: `perplexity` = exp(total NLL / total tokens) and `bits_per_byte` =
total NLL / ln 2 / total UTF-8 bytes (lm-eval's wikitext metrics; the token
perplexity depends on the tokenizer, bits per byte does not).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Protocol

from llmtk.evaluate.prompts import Context, Format, contexts
from llmtk.evaluate.tasks import GENERATE, MULTIPLE_CHOICE, Task

STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
IGNORE = [re.compile(r","), re.compile(r"\$"), re.compile(r"(?s).*#### "), re.compile(r"\.$")]


class Scorer(Protocol):
    """A context is plain text or chat messages (rendered through the chat template, the
    assistant's turn opened); the scorer batches as it likes, answers in request order."""

    def loglikelihood(self, requests: list[tuple[Context, str]]) -> list[tuple[float, bool]]:
        """(context, continuation) -> (summed log p(continuation | context), is greedy)."""

    def generate(self, context: Context, stop: list[str],
                 max_new_tokens: int) -> tuple[str, float]:
        """Greedy continuation of the context -> (text, mean log p per new token)."""

    def rolling(self, texts: list[str], chat: bool = False) -> list[tuple[float, int]]:
        """Each whole text (as the assistant's reply when chat) -> (summed log p of its
        tokens, number of tokens)."""


@dataclass
class TaskResult:
    name: str
    layout: str
    kind: str
    metrics: dict[str, float]
    items: list[dict] = field(default_factory=list)  # per item: id, correct, scores ...

    @property
    def n(self) -> int:
        return len(self.items)


def _argmax(values: list[float]) -> int:
    return max(range(len(values)), key=lambda i: (values[i], -i))  # first of equal maxima


def _softmax_at(values: list[float], i: int) -> float:
    m = max(values)
    return math.exp(values[i] - m) / sum(math.exp(v - m) for v in values)


def clean_answer(text: str) -> str:
    for rx in IGNORE:
        text = rx.sub("", text)
    return text.strip().lower()


def extract_strict(output: str) -> str:
    m = STRICT.search(output)
    return m.group(1) if m else ""


def extract_flexible(output: str) -> str:
    found = FLEXIBLE.findall(output)
    if not found:
        return ""
    a, b = found[-1]
    return a or b


def _multiple_choice(task: Task, scorer: Scorer, fmt: Format) -> TaskResult:
    ctxs = contexts(task, fmt)
    requests = [(ctx, fmt.delimiter + c) for it, ctx in zip(task.items, ctxs, strict=True)
                for c in it.choices]
    lls = [ll for ll, _ in scorer.loglikelihood(requests)]
    rows, k = [], 0
    for it, ctx in zip(task.items, ctxs, strict=True):
        scores = lls[k:k + len(it.choices)]
        k += len(it.choices)
        normed = [s / max(1, len(c)) for s, c in zip(scores, it.choices, strict=True)]
        pred, pred_norm = _argmax(scores), _argmax(normed)
        rows.append({"id": it.id, "prompt": _shown(ctx), "expected": it.choices[it.gold],
                     "answer": it.choices[pred], "correct": pred == it.gold,
                     "correct_norm": pred_norm == it.gold, "gold": it.gold, "pred": pred,
                     "scores": [round(s, 4) for s in scores],
                     "confidence": round(_softmax_at(scores, pred), 4)})
    n = len(rows)
    metrics = {"acc": sum(r["correct"] for r in rows) / n,
               "acc_norm": sum(r["correct_norm"] for r in rows) / n}
    return TaskResult(task.name, task.layout, task.kind, metrics, rows)


def _generate(task: Task, scorer: Scorer, max_new_tokens: int, fmt: Format) -> TaskResult:
    gsm8k = task.layout == "gsm8k"
    stop = ["Question:", "</s>", "<|im_end|>"] if gsm8k else ["\n\n"]
    rows = []
    for it, ctx in zip(task.items, contexts(task, fmt), strict=True):
        output, mean_lp = scorer.generate(ctx, stop, max_new_tokens)
        expected = clean_answer(it.answer) if gsm8k else it.answer.strip()
        row = {"id": it.id, "prompt": _shown(ctx), "expected": it.answer, "output": output,
               "confidence": round(math.exp(mean_lp), 4) if math.isfinite(mean_lp) else 0.0}
        if gsm8k:
            strict = clean_answer(extract_strict(output))
            flexible = clean_answer(extract_flexible(output))
            row.update(answer=strict or flexible, correct=strict == expected,
                       correct_flexible=flexible == expected)
        else:
            row.update(answer=output.strip(), correct=output.strip() == expected)
        rows.append(row)
    n = len(rows)
    metrics = {"exact_match": sum(r["correct"] for r in rows) / n}
    if gsm8k:
        metrics["exact_match_flexible"] = sum(r["correct_flexible"] for r in rows) / n
    return TaskResult(task.name, task.layout, task.kind, metrics, rows)


def _perplexity(task: Task, scorer: Scorer, fmt: Format) -> TaskResult:
    scored = scorer.rolling([it.text for it in task.items], chat=fmt.chat)
    rows, nll, tokens, nbytes = [], 0.0, 0, 0
    for it, (lp, n_tok) in zip(task.items, scored, strict=True):
        b = len(it.text.encode("utf-8", "surrogatepass"))
        nll, tokens, nbytes = nll - lp, tokens + n_tok, nbytes + b
        rows.append({"id": it.id, "prompt": it.text[:500], "tokens": n_tok, "bytes": b,
                     "nll": -lp, "nll_per_token": round(-lp / max(1, n_tok), 4)})
    metrics = {"perplexity": math.exp(nll / max(1, tokens)),
               "bits_per_byte": nll / math.log(2) / max(1, nbytes)}
    return TaskResult(task.name, task.layout, task.kind, metrics, rows)


def _shown(ctx: Context) -> str:
    """A context as the bad-case files show it: the text, or the chat turns one a line."""
    if isinstance(ctx, str):
        return ctx
    return "\n".join(f"<{m['role']}> {m['content']}" for m in ctx)


def evaluate_task(task: Task, scorer: Scorer, *, max_new_tokens: int = 128,
                  fmt: Format | None = None) -> TaskResult:
    """Score every item of the task (asked as `fmt` says: few-shot, chat) and aggregate its
    metrics."""
    fmt = fmt or Format()
    if task.kind == MULTIPLE_CHOICE:
        return _multiple_choice(task, scorer, fmt)
    if task.kind == GENERATE:
        return _generate(task, scorer, max_new_tokens, fmt)
    return _perplexity(task, scorer, fmt)
