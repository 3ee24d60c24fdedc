"""Completion markers: `OUTPUT.done` beside a task's output, written after all its outputs.

A job array reruns every task after a failure; a task whose marker is there,
for the same tool and the same input files (path, size, mtime), and whose
outputs still exist, is skipped. A task killed midway has no marker (its
outputs are temporary files until the very end), so it simply runs again.

The marker also records the options that change the output (`--filters`,
`--lang`, `--text-field`, ...; not `--workers` or `--quiet`). A rerun of a
finished task with other options is refused with exit 2, naming the options
that differ: skipping would leave outputs that do not match the command, and
silently redoing one task of an array would mix two settings in one dataset.
Delete the markers (`rm OUT/*.done`) to redo finished tasks with new options.
"""

from __future__ import annotations

import os

import orjson

from llmtk.errors import UsageError
from llmtk.io.atomic import write_json_atomically

SUFFIX = ".done"


def marker_path(output: str) -> str:
    return output.rstrip("/") + SUFFIX


def fingerprint(tool: str, inputs: list[str], settings: dict | None = None) -> dict:
    files = []
    for p in inputs:
        st = os.stat(p)
        files.append([p, st.st_size, st.st_mtime_ns])
    return {"tool": tool, "inputs": files, "settings": settings or {}}


def is_done(output: str, print_: dict, outputs: list[str]) -> bool:
    """True when the marker vouches for this task as asked; False when it must run (no
    marker, other inputs, an output gone). Raises UsageError when the task finished with
    other options."""
    path = marker_path(output)
    try:
        with open(path, "rb") as f:
            saved = orjson.loads(f.read())
    except (OSError, orjson.JSONDecodeError):
        return False
    same = saved.get("tool") == print_["tool"] and saved.get("inputs") == print_["inputs"]
    if not (same and all(os.path.exists(p) for p in outputs)):
        return False
    then = saved.get("settings", print_["settings"])  # a marker from before they were kept
    if then != print_["settings"]:
        changed = differences(then, print_["settings"])
        raise UsageError(f"{output} was finished with other options ({changed}); "
                         f"delete {path} to redo it with these")
    return True


def differences(then: dict, now: dict) -> str:
    """`--filters none, was all; --lang en, was (not given)`: what changed, flag by flag."""
    def shown(settings: dict, flag: str) -> str:
        return "(not given)" if settings.get(flag) is None else orjson.dumps(
            settings[flag]).decode()

    changed = sorted(f for f in {*then, *now} if then.get(f) != now.get(f))
    return "; ".join(f"{f} {shown(now, f)} now, {shown(then, f)} then" for f in changed)


def mark_done(output: str, print_: dict, outputs: list[str], stats: dict | None = None) -> None:
    write_json_atomically(marker_path(output), {**print_, "outputs": outputs, "stats": stats})
