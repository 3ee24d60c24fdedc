"""Completion markers: `OUTPUT.done` beside a task's output, written after all its outputs.

A job array reruns every task after a failure; a task whose marker is there,
for the same tool and the same input files (path, size, mtime), and whose
outputs still exist, is skipped. A task killed midway has no marker (its
outputs are temporary files until the very end), so it simply runs again.
Delete the markers to redo finished tasks with other options.
"""

from __future__ import annotations

import os

import orjson

from llmtk.io.atomic import write_json_atomically

SUFFIX = ".done"


def marker_path(output: str) -> str:
    return output.rstrip("/") + SUFFIX


def fingerprint(tool: str, inputs: list[str]) -> dict:
    files = []
    for p in inputs:
        st = os.stat(p)
        files.append([p, st.st_size, st.st_mtime_ns])
    return {"tool": tool, "inputs": files}


def is_done(output: str, print_: dict, outputs: list[str]) -> bool:
    try:
        with open(marker_path(output), "rb") as f:
            saved = orjson.loads(f.read())
    except (OSError, orjson.JSONDecodeError):
        return False
    same = saved.get("tool") == print_["tool"] and saved.get("inputs") == print_["inputs"]
    return same and all(os.path.exists(p) for p in outputs)


def mark_done(output: str, print_: dict, outputs: list[str], stats: dict | None = None) -> None:
    write_json_atomically(marker_path(output), {**print_, "outputs": outputs, "stats": stats})
