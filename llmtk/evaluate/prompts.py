"""What the model is asked: few-shot examples and the chat format, as lm-evaluation-harness
builds them (its `fewshot_context`, `build_qa_turn` and default `ContextSampler`, v0.4).

A context is either plain text or a list of chat messages, which the scorer renders
through the model's chat template (generation prompt included).

Few-shot (`num_fewshot` K): K examples drawn from a pool with `random.Random(seed)`, one
generator per task consumed item after item in task order, so the same seed gives the
same examples as lm-eval. When the pool is the task itself, K + 1 are drawn and the item
is dropped from them (then the first K kept); a separate pool (`--fewshot-from`, lm-eval's
`fewshot_split`) is sampled K at a time. Each example is its question, the target
delimiter " " and its answer, followed by "\\n\\n".

Chat format: the examples and the question become one user turn (lm-eval's
`multiturn_to_singleturn`), or, with `multiturn`, alternating user and assistant turns;
the continuation scored has no target delimiter: the choice is the assistant's reply.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from llmtk.errors import DataError
from llmtk.evaluate.tasks import MULTIPLE_CHOICE, Item, Task

FEWSHOT_SEED = 1234  # lm-eval's default --fewshot_random_seed
TARGET_DELIMITER, FEWSHOT_DELIMITER = " ", "\n\n"

Context = str | list[dict]  # plain text, or chat messages for the template


@dataclass(frozen=True)
class Format:
    """How items are put to the model. pool: the few-shot examples' task (None: the task
    itself); chat: through the chat template; multiturn: few-shot examples as turns."""

    num_fewshot: int = 0
    pool: Task | None = None
    seed: int = FEWSHOT_SEED
    chat: bool = False
    multiturn: bool = False

    @property
    def delimiter(self) -> str:
        """What goes between the context and a scored continuation."""
        return "" if self.chat else TARGET_DELIMITER


def question(item: Item, kind: str, chat: bool = False) -> str:
    if kind == MULTIPLE_CHOICE:
        return (item.user or item.context) if chat else item.context
    return item.prompt


def answer(item: Item, kind: str) -> str:
    return item.choices[item.gold] if kind == MULTIPLE_CHOICE else item.target


class Sampler:
    """lm-eval's default few-shot sampler: `Random(seed).sample` over the pool in order."""

    def __init__(self, pool: list[Item], seed: int):
        self.pool, self.rnd = pool, random.Random(seed)

    def sample(self, n: int, exclude: Item | None = None) -> list[Item]:
        if n == 0:
            return []
        if exclude is None:
            return self.rnd.sample(self.pool, n)
        res = [x for x in self.rnd.sample(self.pool, n + 1) if x != exclude][:n]
        if len(res) < n:  # copies of the item in the pool: lm-eval draws again without them
            res = self.rnd.sample([x for x in self.pool if x != exclude], n)
        return res


def contexts(task: Task, fmt: Format) -> list[Context]:
    """The context of every item of a multiple-choice or generation task, in order
    (perplexity tasks score whole texts: no context, no examples)."""
    pool = fmt.pool or task
    own = fmt.pool is None
    if fmt.num_fewshot:
        if pool.kind != task.kind:
            raise DataError(f"{pool.path}: a {pool.layout} file cannot give few-shot examples "
                            f"for the {task.layout} task {task.name}")
        need = fmt.num_fewshot + (1 if own else 0)
        if len(pool.pool) < need:
            raise DataError(f"{pool.path}: {len(pool.pool)} rows, too few for "
                            f"{fmt.num_fewshot}-shot examples (needs {need})")
    sampler = Sampler(pool.pool, fmt.seed)
    out = []
    for item in task.items:
        shots = sampler.sample(fmt.num_fewshot, item if own else None)
        out.append(_context(item, task.kind, [(question(s, pool.kind, fmt.chat),
                                               answer(s, pool.kind)) for s in shots], fmt))
    return out


def _context(item: Item, kind: str, shots: list[tuple[str, str]], fmt: Format) -> Context:
    q = question(item, kind, fmt.chat)
    prefix = "".join(f"{sq}{TARGET_DELIMITER}{sa}{FEWSHOT_DELIMITER}" for sq, sa in shots)
    if not fmt.chat:
        return prefix + q
    # A chat-layout item brings its own conversation; the others are one user question.
    asked = item.messages if (kind != MULTIPLE_CHOICE and item.messages) else [
        {"role": "user", "content": q}]
    msgs = [dict(m) for m in asked]
    head = [m for m in msgs[:1] if m["role"] == "system"]  # a system turn stays first
    rest = msgs[len(head):]
    if fmt.multiturn:
        turns = []
        for sq, sa in shots:
            turns += [{"role": "user", "content": sq}, {"role": "assistant", "content": sa}]
        return head + turns + rest
    for m in rest:  # the examples go before the first question, in the same turn
        if m["role"] == "user":
            m["content"] = prefix + m["content"]
            break
    else:
        if prefix:
            rest.insert(0, {"role": "user", "content": prefix})
    return head + rest
