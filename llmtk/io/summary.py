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
        table.add_row("bytes in / out", f"{self.bytes_in:,} / {self.bytes_out:,}")
        table.add_row("time", f"{self.seconds:.2f} s  ({self.mb_per_s():.1f} MB/s)")
        console = stderr_console()
        with console.capture() as captured:
            console.print(table)
        sys.stderr.write(captured.get())  # one buffered write, flushed at once
        sys.stderr.flush()
