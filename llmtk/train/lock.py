"""Exclusive locks: one run per run directory, one tokenizer per token cache.

`fcntl.flock` on a lock file: the kernel drops the lock when the holder exits, however
it exits (SIGKILL included), so a stale lock never needs cleaning up. The run lock file
holds the holder's host and PID so that a refused run can say who has the directory.
"""

from __future__ import annotations

import fcntl
import os
import socket

from llmtk.errors import ConfigError


class DirLock:
    """An exclusive flock on DIR/.lock, held until release() or the process ends."""

    def __init__(self, directory: str, name: str = ".lock"):
        self.path = os.path.join(directory, name)
        self.fd: int | None = None

    def acquire(self, wait: bool = False) -> bool:
        """Take the lock; False if another process holds it (and wait is False)."""
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return False
        self.fd = fd
        os.ftruncate(fd, 0)
        os.write(fd, f"{socket.gethostname()} {os.getpid()}\n".encode())
        return True

    def holder(self) -> str:
        try:
            with open(self.path) as f:
                host, pid = f.read().split()
            return f"host {host}, PID {pid}"
        except (OSError, ValueError):
            return "an unknown process"

    def release(self, remove: bool = False) -> None:
        """Drop the lock; remove=True also deletes the lock file (a start that failed
        leaves nothing behind), while still holding it, so no one locks a file that is gone."""
        if self.fd is not None:
            if remove:
                try:
                    os.unlink(self.path)
                except OSError:
                    pass
            os.close(self.fd)  # closing the descriptor drops the flock
            self.fd = None

    def __enter__(self) -> DirLock:
        self.acquire(wait=True)
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def lock_run_dir(out: str) -> DirLock:
    """Lock the run directory or raise a usage error naming the run that holds it."""
    lock = DirLock(out)
    if not lock.acquire():
        raise ConfigError("out", f"is in use by another llmtk train ({lock.holder()}); "
                          "wait for it to finish or choose another {0}", also=("out",), value=out)
    return lock
