"""Consoles: the one rich console on stderr, and buffered rich output for stdout.

rich honours NO_COLOR by itself.
"""

from functools import cache

from llmtk.errors import PipeClosed


@cache
def stderr_console():
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def write_out(file, text: str) -> None:
    """Write and flush; a reader that went away becomes PipeClosed (exit 0, no message)."""
    try:
        file.write(text)
        file.flush()
    except BrokenPipeError:
        raise PipeClosed from None


def buffered_console(file):
    """A rich console that draws into a buffer; `emit` then writes it to `file` in one go.

    Rich (and click) turn a BrokenPipeError into exit status 1; writing the finished
    text ourselves lets `llmtk estimate | head -1` end quietly with 0 like every llmtk tool.
    """
    import io
    import os
    import shutil

    from rich.console import Console

    tty = file.isatty()
    buf = io.StringIO()
    # A terminal's own width; redirected output honours COLUMNS, else a width that
    # fits every table on one line.
    columns = os.environ.get("COLUMNS", "")
    if tty:
        width = shutil.get_terminal_size().columns
    else:
        width = int(columns) if columns.isdigit() and int(columns) >= 40 else 110
    console = Console(file=buf, force_terminal=tty, width=width, highlight=False,
                      soft_wrap=False)

    def emit() -> None:
        write_out(file, buf.getvalue())

    return console, emit


def strict_json(obj):
    """obj with non-finite floats as the strings "NaN", "Infinity", "-Infinity" (the metrics
    log's convention): json.dumps would write bare NaN/Infinity, which is not JSON."""
    if isinstance(obj, float):
        if obj != obj:
            return "NaN"
        if obj in (float("inf"), float("-inf")):
            return "Infinity" if obj > 0 else "-Infinity"
        return obj
    if isinstance(obj, dict):
        return {k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [strict_json(v) for v in obj]
    return obj


def write_json(file, obj) -> None:
    """Indented strict JSON with sorted keys, then a newline (see write_out)."""
    import json

    write_out(file, json.dumps(strict_json(obj), indent=2, sort_keys=True, allow_nan=False)
              + "\n")
