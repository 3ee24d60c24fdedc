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

    def __init__(self, tool: str, summary: Summary, reads_pipe: bool = False) -> None:
        self.tool = tool
        self.summary = summary
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

        s = self.summary
        seconds = max(time.perf_counter() - s.started, 1e-9)
        return Text(
            f"llmtk {self.tool}: {s.records_in:,} records, {s.bytes_in / 1e6:,.1f} MB "
            f"({s.bytes_in / 1e6 / seconds:,.1f} MB/s), {s.records_out:,} out"
        )

    def update(self, _bytes_read: int = 0) -> None:
        """Called once per chunk read (about 1 MiB); redraws at most every EVERY seconds."""
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
