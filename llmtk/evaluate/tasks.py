"""Task files: JSONL (plain, .zst, .gz) in a common public layout, detected from the records.

Layouts (the first record decides; every record must then fit it):

| layout      | fields                                             | kind            |
|-------------|----------------------------------------------------|-----------------|
| hellaswag   | ctx, endings (list), label (int or digit string)   | multiple choice |
| arc         | question, choices {text, label}, answerKey         | multiple choice |
| mmlu        | question, choices (list), answer (int)             | multiple choice |
| gsm8k       | question, answer ("... #### 42")                   | generation      |
| chat        | messages (the last is the expected assistant turn) | generation      |
| prompt      | prompt + response, or instruction (+ input) + output | generation    |
| text        | text                                               | perplexity      |

Prompts follow lm-evaluation-harness's task definitions (0-shot): HellaSwag
"{activity_label}: {ctx}" with its bracket clean-up, ARC "Question: {q}\\nAnswer:",
MMLU's subject line, the question, "A. ..." lines and "Answer:" with the letters as
choices, GSM8K "Question: {q}\\nAnswer:". Every continuation is " " + choice
(lm-eval's target delimiter).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from llmtk.errors import ConfigError, DataError

MULTIPLE_CHOICE, GENERATE, PERPLEXITY = "multiple_choice", "generate", "perplexity"
KIND_OF = {"hellaswag": MULTIPLE_CHOICE, "arc": MULTIPLE_CHOICE, "mmlu": MULTIPLE_CHOICE,
           "gsm8k": GENERATE, "chat": GENERATE, "prompt": GENERATE, "text": PERPLEXITY}
LETTERS = "ABCDEFGHIJ"
LIMIT_SEED = 0  # --limit's default --seed


@dataclass
class Item:
    """One thing to score. Multiple choice: `context`, `choices`, `gold`. Generation:
    `prompt` (the base-model prompt), `messages` (the same as a chat, for SFT models) and
    `answer` (the expected final answer) and `target` (what a few-shot example shows after
    its prompt: GSM8K's whole worked answer). Perplexity: `text`."""

    id: str
    context: str = ""
    choices: list[str] = field(default_factory=list)
    gold: int = 0
    prompt: str = ""
    messages: list[dict] = field(default_factory=list)
    answer: str = ""
    text: str = ""
    target: str = ""
    user: str = ""  # multiple choice through a chat template: the user turn, if not `context`


@dataclass
class Task:
    name: str
    path: str
    layout: str
    items: list[Item]          # the items scored
    pool: list[Item] = field(default_factory=list)  # every row of the file (few-shot pool)

    @property
    def kind(self) -> str:
        return KIND_OF[self.layout]


def detect_layout(rec: dict) -> str | None:
    """The layout of one record, or None when it fits none."""
    if "ctx" in rec and "endings" in rec and "label" in rec:
        return "hellaswag"
    if "question" in rec and isinstance(rec.get("choices"), dict) and "answerKey" in rec:
        return "arc"
    if "question" in rec and isinstance(rec.get("choices"), list) and "answer" in rec:
        return "mmlu"
    if "question" in rec and isinstance(rec.get("answer"), str):
        return "gsm8k"
    if isinstance(rec.get("messages"), list):
        return "chat"
    if ("prompt" in rec and ("response" in rec or "completion" in rec)) or (
            "instruction" in rec and "output" in rec):
        return "prompt"
    if isinstance(rec.get("text"), str):
        return "text"
    return None


def _hellaswag_clean(text: str) -> str:
    """lm-eval's hellaswag `preprocess`: WikiHow's " [title]" markers and other brackets."""
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


def _int(value, what: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{what} must be an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    raise ValueError(f"{what} must be an integer, got {value!r}")


def gsm8k_target(answer: str) -> str:
    """The final answer of a GSM8K solution: what follows '#### '."""
    return answer.split("####")[-1].strip().replace(",", "")


def _item(layout: str, rec: dict, ident: str) -> Item:
    if layout == "hellaswag":
        ctx = rec["ctx"]
        if "ctx_a" in rec and "ctx_b" in rec:  # the raw dataset: lm-eval joins the halves
            ctx = rec["ctx_a"] + " " + str(rec["ctx_b"]).capitalize()
        label = rec.get("activity_label")
        query = _hellaswag_clean(f"{label}: {ctx}" if label else ctx)
        endings = [_hellaswag_clean(str(e)) for e in rec["endings"]]
        return Item(ident, context=query, choices=endings, gold=_int(rec["label"], "label"))
    if layout == "arc":
        ch = rec["choices"]
        labels, texts = list(ch["label"]), [str(t) for t in ch["text"]]
        if rec["answerKey"] not in labels:
            raise ValueError(f"answerKey {rec['answerKey']!r} is not one of {labels}")
        # A chat model is asked the question itself: "Question: ...\nAnswer:" cues a base
        # model to continue with the answer; a chat model answers a user's question.
        return Item(ident, context=f"Question: {rec['question']}\nAnswer:", choices=texts,
                    gold=labels.index(rec["answerKey"]), user=str(rec["question"]))
    if layout == "mmlu":
        choices = [str(c) for c in rec["choices"]]
        if len(choices) > len(LETTERS):
            raise ValueError(f"at most {len(LETTERS)} choices")
        subject = str(rec.get("subject", "")).replace("_", " ").strip()
        head = (f"The following are multiple choice questions (with answers) about "
                f"{subject}.\n\n" if subject else "")
        lines = [str(rec["question"]).strip()]
        lines += [f"{LETTERS[i]}. {c}" for i, c in enumerate(choices)]
        answer = rec["answer"]
        if isinstance(answer, str) and len(answer) == 1 and answer in LETTERS:
            answer = LETTERS.index(answer)
        return Item(ident, context=head + "\n".join(lines) + "\nAnswer:",
                    choices=list(LETTERS[:len(choices)]), gold=_int(answer, "answer"))
    if layout == "gsm8k":
        q = str(rec["question"])
        return Item(ident, prompt=f"Question: {q}\nAnswer:",
                    messages=[{"role": "user", "content": q}], answer=gsm8k_target(rec["answer"]),
                    target=str(rec["answer"]))
    if layout == "chat":
        msgs = rec["messages"]
        if not msgs or not isinstance(msgs[-1], dict) or msgs[-1].get("role") != "assistant":
            raise ValueError("the last message must be the expected assistant turn")
        shown = msgs[:-1]
        prompt = "\n".join(str(m.get("content", "")) for m in shown)
        expected = str(msgs[-1]["content"])
        return Item(ident, prompt=prompt, messages=shown, answer=expected, target=expected)
    if layout == "prompt":
        if "instruction" in rec:
            user = str(rec["instruction"])
            if rec.get("input"):
                user += "\n\n" + str(rec["input"])
            expected = rec["output"]
        else:
            user, expected = str(rec["prompt"]), rec.get("response", rec.get("completion"))
        return Item(ident, prompt=user, messages=[{"role": "user", "content": user}],
                    answer=str(expected), target=str(expected))
    return Item(ident, text=rec["text"])


def task_name(path: str) -> str:
    base = os.path.basename(path)
    for ext in (".zst", ".gz", ".zstd"):
        if base.endswith(ext):
            base = base[: -len(ext)]
    return base.removesuffix(".jsonl").removesuffix(".json")


def split_spec(spec: str) -> tuple[str | None, str]:
    """`[NAME=]FILE` -> (NAME or None, FILE); a path that exists with a `=` in it is a FILE."""
    if "=" in spec and not os.path.exists(spec):
        name, path = spec.split("=", 1)
        return name, path
    return None, spec


def load_task(spec: str, limit: int | None = None, seed: int = LIMIT_SEED) -> Task:
    """Read `[NAME=]FILE` into a Task; the layout comes from the first record. limit: score
    N items drawn at random with `seed` (kept in file order), the same N for the same seed
    and file; the whole file stays the few-shot pool."""
    from llmtk.io import read_docs

    name, path = split_spec(spec)
    if not os.path.isfile(path):
        raise ConfigError("tasks", "no such file", value=path)
    name = name or task_name(path)
    layout = None
    items: list[Item] = []
    for doc in read_docs([path], require_text=False):
        rec = doc.data
        found = detect_layout(rec)
        if layout is None:
            if found is None:
                raise DataError(f"{doc.where()}: no known task layout (expected HellaSwag "
                                "ctx/endings/label, ARC or MMLU question/choices/answer, GSM8K "
                                "question/answer, messages, prompt/response or text)")
            layout = found
        elif found != layout:
            raise DataError(f"{doc.where()}: a {found or 'unknown'} record in a {layout} task")
        ident = str(rec.get("id", rec.get("ind", doc.line)))
        try:
            item = _item(layout, rec, ident)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise DataError(f"{doc.where()}: bad {layout} record: {e}") from None
        if KIND_OF[layout] == MULTIPLE_CHOICE and not 0 <= item.gold < len(item.choices):
            raise DataError(f"{doc.where()}: the answer index {item.gold} is not one of the "
                            f"{len(item.choices)} choices")
        items.append(item)
    if not items:
        raise DataError(f"{path}: no task items")
    return Task(name, path, layout, limited(items, limit, seed), items)


def limited(items: list[Item], limit: int | None, seed: int) -> list[Item]:
    """N items drawn with `seed` (a private generator, so nothing else moves it), in order."""
    if limit is None or limit >= len(items):
        return items
    import random

    keep = sorted(random.Random(seed).sample(range(len(items)), limit))
    return [items[i] for i in keep]
