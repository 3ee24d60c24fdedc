"""Regular-file outputs written under an exclusive temporary name and renamed into place.

A `Staged` file is `TARGET.tmp-PID` in the target's own directory (so the
rename is atomic), created with O_CREAT|O_EXCL|O_NOFOLLOW: a name planted in
advance (a symlink to someone else's file, say) makes the create fail instead
of being followed. The mode comes from the umask, as for any new file
(0o666 & ~umask). A symlink output writes its target; the link stays a link.

Writing is two-phase so that several outputs of one run are committed
together: `finish()` flushes, fsyncs and closes (this is where a full disk
shows), `publish()` renames. A run calls `finish()` on every output first and
`publish()` only when all of them finished.

`sweep_stale(target)` removes `TARGET.tmp-PID` leftovers of runs that were
killed (SIGKILL leaves no chance to clean up): only names of exactly that
pattern, regular files owned by us, whose PID is not alive.
"""

import contextlib
import os
import re
import stat
from collections.abc import Iterator
from typing import BinaryIO

from llmtk.errors import LlmtkError

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def temp_name(target: str, pid: int | None = None) -> str:
    return f"{target}.tmp-{os.getpid() if pid is None else pid}"


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True


def _ours(path: str) -> bool:
    """A regular file (not a link) owned by this user."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()


def sweep_stale(target: str) -> list[str]:
    """Remove TARGET.tmp-PID files of dead PIDs that we own; return what was removed."""
    directory, base = os.path.split(target)
    pattern = re.compile(re.escape(base) + r"\.tmp-([0-9]+)")
    removed = []
    try:
        names = os.listdir(directory or ".")
    except OSError:
        return removed
    for name in names:
        m = pattern.fullmatch(name)
        if m is None or _pid_alive(int(m.group(1))):
            continue
        path = os.path.join(directory, name)
        if _ours(path):
            try:
                os.unlink(path)
                removed.append(path)
            except OSError:
                pass
    return removed


def create_temp(target: str, shown: str | None = None) -> tuple[str, int]:
    """Exclusively create TARGET.tmp-PID; returns (its name, an fd open for writing)."""
    tmp = temp_name(target)
    for attempt in (0, 1):
        try:
            return tmp, os.open(tmp, _CREATE, 0o666)
        except FileExistsError:
            # Only this process would use this name, and it has not yet: a leftover of an
            # earlier run that had our PID. Ours to remove only if it is a file we own.
            if attempt == 0 and _ours(tmp):
                os.unlink(tmp)
                continue
            raise LlmtkError(f"{shown or target}: cannot create {tmp}: it exists and is not "
                             f"a file of ours (refusing to follow or replace it)") from None
        except OSError as e:
            raise LlmtkError(f"{shown or target}: cannot create {tmp}: {e.strerror}") from None
    raise AssertionError("unreachable")


class Staged:
    """A regular file being written: `fd` is open on the temporary name until `finish()`."""

    def __init__(self, path: str) -> None:
        self.path = path  # as the user wrote it (for messages)
        self.target = os.path.realpath(path)  # a symlink's target is what is replaced
        sweep_stale(self.target)
        self.tmp, self.fd = create_temp(self.target, path)
        self._open = True

    def finish(self) -> None:
        """Flush to disk and close; an error (disk full) removes the temporary file."""
        try:
            os.fsync(self.fd)
        except OSError as e:
            self.discard()
            raise LlmtkError(f"{self.path}: cannot finish writing: {e.strerror}") from None
        os.close(self.fd)
        self._open = False

    def publish(self) -> None:
        try:
            os.replace(self.tmp, self.target)
        except OSError as e:
            self.discard()
            raise LlmtkError(f"{self.path}: cannot rename into place: {e.strerror}") from None

    def discard(self) -> None:
        if self._open:
            self._open = False
            try:
                os.close(self.fd)
            except OSError:
                pass
        try:
            os.unlink(self.tmp)
        except OSError:
            pass



@contextlib.contextmanager
def atomic_file(path: str) -> Iterator[BinaryIO]:
    """`with atomic_file(path) as f:` a file object on an exclusive temporary name,
    renamed over path when the block ends without error (removed otherwise)."""
    staged = Staged(path)
    try:
        with os.fdopen(staged.fd, "wb", closefd=False) as f:
            yield f
        staged.finish()
        staged.publish()
    except BaseException:
        staged.discard()
        raise
