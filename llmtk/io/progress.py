"""A live progress line on stderr, only when stderr is a terminal."""

import time

from llmtk.io.console import stderr_console
from llmtk.io.summary import Summary


class Progress:
    EVERY = 0.25  # seconds between redraws

    def __init__(self, tool: str, summary: Summary) -> None:
        from rich.live import Live
        from rich.text import Text

        self._text = Text
        self.tool = tool
        self.summary = summary
        self._next = time.perf_counter() + self.EVERY
        self._live = Live(self._render(), console=stderr_console(), transient=True,
                          auto_refresh=False)
        self._live.start()

    def _render(self):
        s = self.summary
        seconds = max(time.perf_counter() - s.started, 1e-9)
        return self._text(
            f"llmtk {self.tool}: {s.records_in:,} records, {s.bytes_in / 1e6:,.1f} MB "
            f"({s.bytes_in / 1e6 / seconds:,.1f} MB/s), {s.records_out:,} out"
        )

    def update(self, _bytes_read: int = 0) -> None:
        """Called once per chunk read (about 1 MiB); redraws at most every EVERY seconds."""
        now = time.perf_counter()
        if now >= self._next:
            self._next = now + self.EVERY
            self._live.update(self._render(), refresh=True)

    def stop(self) -> None:
        self._live.stop()
