"""The run summary: records in/out/dropped per reason, bytes, time, throughput.

Printed to stderr as a small table, and written as `--stats FILE.json` with
sorted keys. Every number in the JSON adds across shards (`seconds` then
means total process time), so merging a job array's stats is a plain sum of
the same keys; rates are left out of the JSON because they do not add.
"""

import sys
import time
from collections import Counter

# At most this many rows per family of counts (`lang.en`, `lang.de`, ... is one
# family); the rest are summed into one "N more" row. --stats has them all.
COUNT_ROWS = 5


class Summary:
    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.records_in = 0
        self.records_out = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.files_in = 0  # input files read (stdin counts as one)
        self.files_skipped = 0  # files of input folders that are not data (named on stderr)
        self.dropped: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()
        self.started = time.perf_counter()
        self.seconds = 0.0

    def finish(self) -> None:
        self.seconds = time.perf_counter() - self.started

    def as_dict(self) -> dict:
        return {
            "tool": self.tool,
            "records_in": self.records_in,
            "records_out": self.records_out,
            "dropped": dict(sorted(self.dropped.items())),
            "errors": dict(sorted(self.errors.items())),
            "counts": dict(sorted(self.counts.items())),
            "files_in": self.files_in,
            "files_skipped": self.files_skipped,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "seconds": round(self.seconds, 3),
        }

    def mb_per_s(self) -> float:
        return self.bytes_in / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def count_rows(self) -> list[tuple[str, int]]:
        """The counts as summary rows: each family's largest COUNT_ROWS, then 'N more'."""
        families: dict[str, list[tuple[str, int]]] = {}
        for key, n in self.counts.items():
            families.setdefault(key.split(".", 1)[0], []).append((key, n))
        rows = []
        for family, items in sorted(families.items()):
            items.sort(key=lambda kv: (-kv[1], kv[0]))
            rows += items[:COUNT_ROWS]
            rest = items[COUNT_ROWS:]
            if rest:
                rows.append((f"{family}: {len(rest)} more (in --stats)",
                             sum(n for _, n in rest)))
        return rows

    def print(self) -> None:
        """Draw the summary and write it to stderr in one write, so that the summaries
        of several tools sharing a terminal never interleave line by line."""
        from rich.table import Table

        from llmtk.io.console import stderr_console

        table = Table(title=f"llmtk {self.tool}", title_justify="left", show_header=False,
                      box=None, padding=(0, 2))
        table.add_column(style="bold")
        table.add_column(justify="right")
        table.add_row("records in", f"{self.records_in:,}")
        table.add_row("records out", f"{self.records_out:,}")
        for reason, n in sorted(self.dropped.items()):
            table.add_row(f"dropped {reason}", f"{n:,}")
        for reason, n in sorted(self.errors.items()):
            table.add_row(f"bad input {reason}", f"{n:,}")
        if self.counts:
            table.add_row("counted in records", "")
        for key, n in self.count_rows():
            table.add_row(f"  {key}", f"{n:,}")
        if self.files_skipped:
            table.add_row("files read / skipped", f"{self.files_in:,} / {self.files_skipped:,}")
        table.add_row("bytes in / out", f"{self.bytes_in:,} / {self.bytes_out:,}")
        table.add_row("time", f"{self.seconds:.2f} s  ({self.mb_per_s():.1f} MB/s)")
        console = stderr_console()
        with console.capture() as captured:
            console.print(table)
        sys.stderr.write(captured.get())  # one buffered write, flushed at once
        sys.stderr.flush()


def merge_stats(parts: list[dict], names: list[str] | None = None) -> dict:
    """The --stats of several tasks as one: numbers add, nested counters add key by key.

    Every other value (the tool's name) must be the same in all parts. The merged
    totals equal those of one process over the same input (`seconds` is then the
    total process time).
    """
    from llmtk.errors import UsageError

    names = names or [f"part {i}" for i in range(len(parts))]
    merged: dict = {}

    def add(into: dict, part: dict, where: str) -> None:
        for key, value in part.items():
            here = f"{where}{key}"
            if key not in into:
                into[key] = _copy(value)
            elif isinstance(value, dict) and isinstance(into[key], dict):
                add(into[key], value, here + ".")
            elif _number(value) and _number(into[key]):
                into[key] = into[key] + value
            elif value != into[key]:
                raise UsageError(f"{name}: {here} is {value!r}, another part says "
                                 f"{into[key]!r}; only stats of the same tool merge")

    for part, name in zip(parts, names, strict=True):
        if not isinstance(part, dict):
            raise UsageError(f"{name}: not a --stats JSON object")
        add(merged, part, "")
    if isinstance(merged.get("seconds"), float):
        merged["seconds"] = round(merged["seconds"], 3)
    return _sorted(merged)


def _number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _copy(v):
    return {k: _copy(x) for k, x in v.items()} if isinstance(v, dict) else v


def _sorted(d: dict) -> dict:
    return {k: _sorted(v) if isinstance(v, dict) else v for k, v in sorted(d.items())}
