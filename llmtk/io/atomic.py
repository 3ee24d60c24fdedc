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

`atomic_file(path)` is the usual way in; `atomic_name(path)` serves libraries that
write by file name (fastText, tokenizers), `atomic_dir(target)` a folder filled file by
file, and `write_file_atomically`/`write_json_atomically` a small file or report in one
call. Code outside this module never renames an output into place itself (`make lint`
bans bare os.rename/os.replace elsewhere).

`sweep_stale(target)` removes `TARGET.tmp-PID` leftovers of runs that were
killed (SIGKILL leaves no chance to clean up): only names of exactly that
pattern, regular files owned by us, whose PID is not alive.
"""

import contextlib
import os
import re
import shutil
import stat
from collections.abc import Iterator
from typing import BinaryIO

import orjson

from llmtk.errors import LlmtkError

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def temp_name(target: str, pid: int | None = None) -> str:
    return f"{target}.tmp-{os.getpid() if pid is None else pid}"


def pid_alive(pid: int) -> bool:
    """Whether process `pid` of this host runs (ours or someone else's)."""
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
        if m is None or pid_alive(int(m.group(1))):
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


@contextlib.contextmanager
def atomic_name(path: str) -> Iterator[str]:
    """`with atomic_name(path) as tmp:` for a library that writes by file name: tmp is
    our exclusively created temporary file (written over in place, never a planted link),
    renamed over path when the block ends without error (removed otherwise)."""
    staged = Staged(path)
    try:
        yield staged.tmp
        staged.finish()
        staged.publish()
    except BaseException:
        staged.discard()
        raise


def write_file_atomically(path: str, data: bytes) -> None:
    """A small regular file (a marker, a report) in one call."""
    with atomic_file(path) as f:
        f.write(data)


def json_bytes(obj) -> bytes:
    """Reports and stats: indented JSON with sorted keys, so the same run gives the same bytes."""
    options = orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE
    return orjson.dumps(obj, option=options)


def write_json_atomically(path: str, obj) -> None:
    """A report or stats file: indented JSON with sorted keys, written atomically."""
    write_file_atomically(path, json_bytes(obj))


@contextlib.contextmanager
def atomic_dir(target: str, tmp: str | None = None, replace: bool = False,
               exist_ok: bool = False) -> Iterator[str]:
    """`with atomic_dir(target) as tmp:` fill the new directory tmp (TARGET.tmp-PID unless
    named); it is renamed to target when the block ends without error, removed otherwise.

    The rename replaces an empty target directory. `replace=True` first removes a target
    that is there (a task killed after its rename, before its completion marker);
    `exist_ok=True` keeps a non-empty target and drops ours (another process finished the
    same directory first).
    """
    tmp = tmp or temp_name(target.rstrip(os.sep))
    shutil.rmtree(tmp, ignore_errors=True)  # a leftover of a killed process with our PID
    os.makedirs(tmp)
    try:
        yield tmp
        if replace and os.path.lexists(target):
            shutil.rmtree(target)
        try:
            os.rename(tmp, target)
        except OSError as e:
            if exist_ok and os.path.isdir(target) and os.listdir(target):
                shutil.rmtree(tmp, ignore_errors=True)
                return
            raise LlmtkError(f"{target}: cannot rename into place: {e.strerror}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def publish_dir(tmp: str, target: str) -> None:
    """Rename a directory filled in several steps (by several processes, say) into place,
    replacing a target that is there; `atomic_dir` is the one-block form."""
    if os.path.lexists(target):
        shutil.rmtree(target)
    os.rename(tmp, target)


def set_aside(path: str, suffix: str, numbered: bool = True) -> str:
    """Rename `path` out of the way, never deleting it (it may hold the only copy): to the
    first free PATH.SUFFIX-K, or to PATH.SUFFIX (replacing one) when not numbered.
    Returns the new name."""
    aside = f"{path}.{suffix}"
    if numbered:
        k = 1
        while os.path.lexists(f"{aside}-{k}"):
            k += 1
        aside = f"{aside}-{k}"
    os.replace(path, aside)
    return aside
