"""Evaluating a checkpoint: bad cases, per-step files and `eval` metrics records.

RUN_DIR/eval/STEP/ holds, per task,
  TASK.items.jsonl  one line per item: id, correct (what the next checkpoint compares with)
  TASK.bad.jsonl    the bad cases: the N most confident wrong answers and up to N items that
                    were right at the previous evaluated step and are wrong now ("flipped"),
                    each with prompt, expected, answer and scores, and `why`
For perplexity tasks the bad cases are the N documents with the highest loss per token.
The metrics go to the run's metrics log as
  {"step": S, "event": "eval", "task": T, "metric": M, "value": V, "items": N}
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable

import orjson

from llmtk.evaluate.metrics import Scorer, TaskResult, evaluate_task
from llmtk.evaluate.prompts import Format
from llmtk.evaluate.tasks import PERPLEXITY, Task


def _jsonl(rows: list[dict]) -> bytes:
    return b"".join(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in rows)


def previous_correct(eval_root: str, task: str, step: int) -> tuple[int, dict[str, bool]] | None:
    """(step, {id: correct}) of the newest evaluation of `task` before `step`, if any."""
    if not os.path.isdir(eval_root):
        return None
    steps = sorted((int(d) for d in os.listdir(eval_root) if d.isdigit() and int(d) < step),
                   reverse=True)
    for s in steps:
        path = os.path.join(eval_root, str(s), f"{task}.items.jsonl")
        if os.path.exists(path):
            with open(path, "rb") as f:
                rows = [orjson.loads(line) for line in f if line.strip()]
            return s, {str(r["id"]): bool(r["correct"]) for r in rows}
    return None


def bad_cases(result: TaskResult, previous: dict[str, bool] | None, n: int,
              versus: dict | None = None) -> list[dict]:
    """The N most confident wrong items plus up to N flipped ones, most confident first;
    with a baseline comparison (`versus`), every item it lost and gained after them."""
    if result.kind == PERPLEXITY:
        worst = sorted(result.items, key=lambda r: -r["nll_per_token"])[:n]
        return [{**r, "why": ["high_loss"]} for r in worst]
    chosen = _own_bad_cases(result, previous, n)
    if versus is not None:
        by_id = {str(r["id"]): r for r in result.items}
        for why, ids in (("lost_vs_baseline", versus["lost"]),
                         ("gained_vs_baseline", versus["gained"])):
            for i in ids:
                chosen.setdefault(i, {**by_id[i], "why": []})["why"].append(why)
    return sorted(chosen.values(), key=lambda r: -r["confidence"])


def _own_bad_cases(result: TaskResult, previous: dict[str, bool] | None,
                   n: int) -> dict[str, dict]:
    wrong = sorted((r for r in result.items if not r["correct"]),
                   key=lambda r: -r["confidence"])
    flipped = [r for r in wrong if previous is not None and previous.get(str(r["id"]))]
    chosen: dict[str, dict] = {}
    for r in wrong[:n]:
        chosen[str(r["id"])] = {**r, "why": ["confident_wrong"]}
    for r in flipped[:n]:
        entry = chosen.setdefault(str(r["id"]), {**r, "why": []})
        entry["why"].append("flipped")
    return chosen


def write_step(run_dir: str, step: int, result: TaskResult, n_bad: int,
               baseline: TaskResult | None = None) -> dict:
    """Write the item and bad-case files of one task; return its summary (with the
    comparison against `baseline`, the same task scored by another model, if given)."""
    from llmtk.evaluate.compare import compare
    from llmtk.io import write_file_atomically

    eval_root = os.path.join(run_dir, "eval")
    prev = previous_correct(eval_root, result.name, step)
    prev_map = prev[1] if prev else None
    flipped = 0
    if prev_map is not None and result.kind != PERPLEXITY:
        flipped = sum(1 for r in result.items if not r["correct"] and prev_map.get(str(r["id"])))
    out_dir = os.path.join(eval_root, str(step))
    os.makedirs(out_dir, exist_ok=True)
    bad_path = os.path.join(out_dir, f"{result.name}.bad.jsonl")
    if result.kind != PERPLEXITY:
        write_file_atomically(os.path.join(out_dir, f"{result.name}.items.jsonl"),
                              _jsonl([{"id": r["id"], "correct": r["correct"]}
                                      for r in result.items]))
    versus = compare(result, baseline) if baseline is not None else None
    write_file_atomically(bad_path, _jsonl([{"step": step, "task": result.name, **r}
                                            for r in bad_cases(result, prev_map, n_bad,
                                                               versus)]))
    return {"task": result.name, "layout": result.layout, "kind": result.kind,
            "items": result.n, "metrics": result.metrics, "step": step,
            "flipped": flipped, "previous_step": prev[0] if prev else None,
            "bad_cases": bad_path, "baseline": versus}


def eval_records(summary: dict) -> list[dict]:
    """The metrics-log rows of one task's evaluation."""
    now = time.time()
    return [{"step": summary["step"], "event": "eval", "task": summary["task"], "metric": m,
             "value": v, "items": summary["items"], "time": now}
            for m, v in summary["metrics"].items()]


class OncePerStep:
    """An eval-row sink that logs each (step, task, metric) once: `llmtk eval` run again on
    a checkpoint (or on one `train --eval-tasks` already scored) must not add a second row
    for the step, which plot-loss would draw as a second point. Append-only, so it is safe
    beside a training run that is appending to the same log.

    existing: the log's rows so far; write: appends one row. A repeated key whose value
    differs (another --limit, an edited task file) is not logged; `conflicts` names it."""

    def __init__(self, existing, write: Callable[[dict], None]):
        self.logged = {(r.get("step"), r.get("task"), r.get("metric")): r.get("value")
                       for r in existing if r.get("event") == "eval"}
        self._write = write
        self.conflicts: list[tuple[int, str]] = []  # (step, task), in order, each once

    def __call__(self, row: dict) -> None:
        key = (row["step"], row["task"], row["metric"])
        if key not in self.logged:
            self.logged[key] = row["value"]
            self._write(row)
        elif not _same(self.logged[key], row["value"]) and key[:2] not in self.conflicts:
            self.conflicts.append(key[:2])


def _same(a, b) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b or math.isclose(a, b, rel_tol=1e-6) or (math.isnan(a) and math.isnan(b))
    return a == b


def evaluate_tasks(tasks: list[Task], scorer: Scorer, *, run_dir: str, step: int,
                   n_bad: int = 5, max_new_tokens: int = 128,
                   log: Callable[[dict], None] | None = None, write: bool = True,
                   formats: dict[str, Format] | None = None,
                   baseline: dict[str, TaskResult] | None = None) -> list[dict]:
    """Evaluate every task (asked as formats[task name] says, else zero-shot plain), write
    its files under run_dir/eval/step/ (unless `write` is False: another process writes
    them), send the `eval` records to `log`; return one summary per task, with its
    comparison against baseline[task name] when given, and its items per second."""
    summaries = []
    for task in tasks:
        fmt = (formats or {}).get(task.name, Format())
        start = time.perf_counter()
        result = evaluate_task(task, scorer, max_new_tokens=max_new_tokens, fmt=fmt)
        seconds = time.perf_counter() - start
        if not write:
            continue
        summary = write_step(run_dir, step, result, n_bad, (baseline or {}).get(task.name))
        summary["items_per_s"] = result.n / max(seconds, 1e-9)
        if log is not None:
            for row in eval_records(summary):
                log(row)
        summaries.append(summary)
    return summaries


def summary_line(s: dict) -> str:
    """One line per task for the terminal."""
    metrics = ", ".join(f"{k} {v:.4f}" for k, v in s["metrics"].items())
    flips = "" if s["kind"] == PERPLEXITY else (
        f", {s['flipped']} flipped since step {s['previous_step']}"
        if s["previous_step"] is not None else ", no earlier evaluation")
    speed = f", {s['items_per_s']:.1f} items/s" if "items_per_s" in s else ""
    versus = ""
    if s.get("baseline"):
        deltas = ", ".join(f"{m} {e['delta']:+.4f} [{e['ci'][0]:+.4f}, {e['ci'][1]:+.4f}]"
                           for m, e in s["baseline"]["metrics"].items())
        versus = (f"; vs baseline: {deltas}; {len(s['baseline']['lost'])} lost, "
                  f"{len(s['baseline']['gained'])} gained")
    return (f"eval @ {s['step']}: {s['task']} ({s['items']} items): {metrics}{flips}"
            f"{speed}{versus}")
