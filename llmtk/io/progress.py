"""A live progress line on stderr, only when stderr is a terminal — and one per terminal.

In `llmtk clean … | llmtk dedup | llmtk contam-check …` every stage shares one
terminal. If each drew its own line they would overwrite each other, so a stage
draws only while it holds the terminal: an exclusive `flock` on its own open of
the terminal device (stages opened by the shell share one open file description
of fd 2, and a lock on that would be shared too). A stage that reads files
claims it at once; a stage that reads a pipe is downstream of another, so it
waits a second and then takes the terminal only if nobody holds it (retrying
now and then, so progress carries on when an earlier stage finishes).
"""

import os
import time

from llmtk.io.console import stderr_console
from llmtk.io.summary import Summary

PIPE_STAGE_WAIT = 1.0  # seconds a pipe-reading stage leaves a file-reading one to claim
RETRY = 2.0            # seconds between attempts to claim a terminal held by another stage


class TerminalClaim:
    """An exclusive, non-blocking lock on the terminal that stderr is, or nothing."""

    def __init__(self, terminal_fd: int = 2) -> None:
        self.terminal_fd = terminal_fd
        self._fd: int | None = None

    def try_claim(self) -> bool:
        if self._fd is not None:
            return True
        import fcntl

        try:
            fd = os.open(os.ttyname(self.terminal_fd), os.O_RDONLY | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the description releases the lock
            self._fd = None


class Progress:
    EVERY = 0.25  # seconds between redraws

    def __init__(self, tool: str, summary: Summary, reads_pipe: bool = False,
                 total_bytes: int | None = None) -> None:
        self.tool = tool
        self.summary = summary
        self.total_bytes = total_bytes or None  # on disk, of every input: None if unknown
        self.done_bytes: int | None = None  # on disk, read so far
        self._claim = TerminalClaim()
        self._live = None
        now = time.perf_counter()
        self._next = now + self.EVERY
        self._next_claim = now + (PIPE_STAGE_WAIT if reads_pipe else 0.0)
        if not reads_pipe:
            self._start_if_free(now)

    def _start_if_free(self, now: float) -> None:
        if not self._claim.try_claim():
            self._next_claim = now + RETRY
            return
        from rich.live import Live

        self._live = Live(self._render(), console=stderr_console(), transient=True,
                          auto_refresh=False)
        self._live.start()

    def _render(self):
        from rich.text import Text

        return Text(self.line(time.perf_counter()))

    def line(self, now: float) -> str:
        """`llmtk TOOL: 42% · 1,234 records, 12.0 MB (3.0 MB/s), 1,200 out · 0:05 left`.

        The share and time left come from the bytes read of the files on disk (compressed
        bytes for compressed files), so they need regular files: a pipe shows counts only.
        """
        s = self.summary
        seconds = max(now - s.started, 1e-9)
        counts = (f"{s.records_in:,} records, {s.bytes_in / 1e6:,.1f} MB "
                  f"({s.bytes_in / 1e6 / seconds:,.1f} MB/s), {s.records_out:,} out")
        if self.total_bytes is None or self.done_bytes is None:
            return f"llmtk {self.tool}: {counts}"
        share = min(self.done_bytes / self.total_bytes, 1.0)
        left = "" if share <= 0 else f" · {clock(seconds * (1 - share) / share)} left"
        return f"llmtk {self.tool}: {share:.0%} · {counts}{left}"

    def update(self, _bytes_read: int = 0, done_bytes: int | None = None) -> None:
        """Called once per chunk read (about 1 MiB) with the on-disk bytes read so far (None
        when unknown, e.g. inside a Parquet file); redraws at most every EVERY seconds."""
        if done_bytes is not None:
            self.done_bytes = done_bytes
        now = time.perf_counter()
        if now < self._next:
            return
        self._next = now + self.EVERY
        if self._live is None:
            if now >= self._next_claim:
                self._start_if_free(now)
            return
        self._live.update(self._render(), refresh=True)

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
        self._claim.release()


def clock(seconds: float) -> str:
    """0:05, 12:34, 3:02:01."""
    m, sec = divmod(int(seconds + 0.5), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"
