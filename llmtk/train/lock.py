"""Exclusive locks: one run per run directory, one tokenizer per token cache.

`fcntl.flock` on a lock file: the kernel drops the lock when the holder exits, however
it exits (SIGKILL included), so a stale lock never needs cleaning up. The run lock file
holds the holder's host and PID so that a refused run can say who has the directory.

A run killed as a process group (Ctrl-C on a job script, `scancel`, a SIGKILL to torchrun)
still holds its lock for a moment while its processes exit, and a restart issued at once
would be refused by a run that is already gone. So when the recorded holder is on this
host and gone or going (no /proc/PID, a zombie, or a SIGKILL pending), the new run waits
for the lock up to EXIT_WAIT_S, says so, and only then refuses, naming the processes
that still hold the lock file open.
"""

from __future__ import annotations

import fcntl
import os
import socket
import sys
import time
from collections.abc import Callable

from llmtk.errors import ConfigError

# How long a dying holder may take to let go: a killed process group's workers exit in
# well under a second on a quiet machine; gloo's and the data loader's threads, and a
# loaded machine, stretch that. 30 s is short next to any restart policy's own delays.
EXIT_WAIT_S = 30.0
SIGKILL_BIT = 1 << 8  # signal 9 in /proc/PID/status's pending-signal masks


class DirLock:
    """An exclusive flock on DIR/.lock, held until release() or the process ends."""

    def __init__(self, directory: str, name: str = ".lock"):
        self.path = os.path.join(directory, name)
        self.fd: int | None = None

    def acquire(self, wait: bool = False, timeout: float = 0.0) -> bool:
        """Take the lock; False if another process holds it (and wait is False), or still
        holds it after `timeout` seconds."""
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return False
                time.sleep(0.05)
        self.fd = fd
        os.ftruncate(fd, 0)
        os.write(fd, f"{socket.gethostname()} {os.getpid()}\n".encode())
        return True

    def recorded(self) -> tuple[str, int] | None:
        """(host, PID) the holder wrote into the lock file, or None."""
        try:
            with open(self.path) as f:
                host, pid = f.read().split()
            return host, int(pid)
        except (OSError, ValueError):
            return None

    def holder(self) -> str:
        who = self.recorded()
        return f"host {who[0]}, PID {who[1]}" if who else "an unknown process"

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


def process_state(pid: int) -> str:
    """'gone', 'exiting' (a zombie, dead, or with a SIGKILL pending) or 'running', from
    /proc (Linux); 'running' where /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
    except FileNotFoundError:
        return "gone" if os.path.isdir("/proc/self") else "running"
    except (OSError, ValueError):
        return "running"
    if fields.get("State", "").strip()[:1] in ("Z", "X"):
        return "exiting"
    for mask in ("ShdPnd", "SigPnd"):
        try:
            if int(fields.get(mask, "0").strip(), 16) & SIGKILL_BIT:
                return "exiting"
        except ValueError:
            pass
    return "running"


def open_by(path: str) -> list[str]:
    """'PID N (command)' for every process of this host with `path` open (/proc scan)."""
    target = os.path.realpath(path)
    found = []
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    for pid in sorted(pids):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == target for fd in fds):
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
                found.append(f"PID {pid} ({cmd[:80] or '?'})")
        except OSError:
            continue  # gone meanwhile, or not ours to look at
    return found


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def lock_run_dir(out: str, wait_s: float = EXIT_WAIT_S,
                 say: Callable[[str], None] = _stderr) -> DirLock:
    """Lock the run directory or raise a usage error naming the run that holds it. A
    holder of this host that is gone or exiting is waited for, up to `wait_s` seconds."""
    lock = DirLock(out)
    if lock.acquire():
        return lock
    who = lock.recorded()
    state = process_state(who[1]) if who and who[0] == socket.gethostname() else "running"
    if state == "running":
        raise ConfigError("out", f"is in use by another llmtk train ({lock.holder()}); "
                          "wait for it to finish or choose another {0}", also=("out",), value=out)
    say(f"{out}: the run that held it ({lock.holder()}) is {state}; waiting up to "
        f"{wait_s:.0f} s for its processes to let go of {lock.path}")
    if lock.acquire(timeout=wait_s):
        return lock
    holders = ", ".join(open_by(lock.path)) or "processes this user cannot see"
    raise ConfigError("out", f"is still locked {wait_s:.0f} s after the run that held it "
                      f"({lock.holder()}) was {state}: {lock.path} is held open by {holders}; "
                      "stop them or choose another {0}", also=("out",), value=out)
