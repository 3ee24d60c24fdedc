"""Output paths checked before any input is read.

`check_paths(inputs, outputs)` refuses (UsageError, exit 2):
- an output that is one of the inputs, or another output of the same run:
  the same file by (device, inode), so also through symlinks and hard links,
  and the same new name (two outputs that do not exist yet);
- two outputs going to stdout (`-`, /dev/stdout), and stdout redirected
  (`>>`) onto an input file;
- a file output whose nearest existing directory is not writable, under a
  path where a file (or a dangling link) stands for a directory, or an output
  that is a directory.

Missing directories above a file output are created as `mkdir -p` would
(`make_parents`), once every check has passed; a run that then fails removes
the ones it created (`remove_made`), so a failed run leaves nothing behind.

Character devices (/dev/null, a terminal) are left out of the identity rule:
they hold nothing that could be overwritten, and `--rejects /dev/null -o
/dev/null` is a fair thing to ask.
"""

import contextlib
import os
import stat
from collections.abc import Iterator

from llmtk.errors import UsageError
from llmtk.io.reader import walk
from llmtk.io.writer import output_kind


def _identity(st: os.stat_result) -> tuple | None:
    if stat.S_ISCHR(st.st_mode):
        return None
    return ("inode", st.st_dev, st.st_ino)


def _path_identity(path: str) -> tuple | None:
    try:
        return _identity(os.stat(path))
    except OSError:
        return None


def _fd_identity(fd: int) -> tuple | None:
    try:
        return _identity(os.fstat(fd))
    except OSError:
        return None


def input_identities(paths: list[str], extra: list[str] = ()) -> dict[tuple, str]:
    """(device, inode) -> the input's name, for expanded inputs and extra inputs
    (files or directories: every file under them)."""
    found: dict[tuple, str] = {}
    names = list(paths)
    for item in extra:
        names.append(item)  # a folder itself too: an output folder must not be it
        if os.path.isdir(item):
            names.extend(walk(item, None))
    for name in names:
        key = _fd_identity(0) if name == "-" else _path_identity(name)
        if key is not None:
            found.setdefault(key, "stdin" if name == "-" else name)
    return found


def check_paths(
    inputs: dict[tuple, str],
    outputs: list[tuple[str, str | None]],
    directories: list[tuple[str, str | None]] = (),
) -> None:
    """Refuse outputs that would overwrite an input or each other (see the module doc).

    outputs: (option, path) of file or stream outputs; path None is skipped,
    except for "-o" where None means stdout. directories: (option, path) of
    output folders (created if missing): they must not be an input.
    """
    taken: dict[tuple, str] = {}

    def claim(key: tuple, what: str) -> None:
        if key in inputs:
            raise UsageError(f"{what}: is also an input ({inputs[key]}); refusing to overwrite "
                             "what this run reads")
        if key in taken:
            raise UsageError(f"{what}: is also {taken[key]}; give each output its own file")
        taken[key] = what

    for option, path in outputs:
        if path is None and option != "-o":
            continue
        what = f"{option} {path or '-'}"
        kind = output_kind(path)
        if kind == "stdout":
            claim(("stdout",), what)
            key = _fd_identity(1)
            if key is not None and key in inputs:
                claim(key, f"{what} (stdout)")
            continue
        key = _path_identity(path)  # type: ignore[arg-type]
        if kind == "file":
            target = os.path.realpath(path)  # type: ignore[arg-type]
            if os.path.islink(path):  # type: ignore[arg-type]
                _check_directory(what, os.path.dirname(target))  # a link's target's folder
            else:
                _check_directory(what, _nearest_existing(what, _parent(path)))  # type: ignore[arg-type]
            if key is None:
                key = ("new", target)
        if key is not None:
            claim(key, what)
    for option, path in directories:
        if path is None:
            continue
        what = f"{option} {path}"
        key = _path_identity(path)
        if key is not None and key in inputs:
            claim(key, what)
        if os.path.exists(path) and not os.path.isdir(path):
            raise UsageError(f"{what}: is not a directory")
        _check_directory(what, _nearest_existing(what, os.path.abspath(path)))


def _parent(path: str) -> str:
    return os.path.dirname(os.path.abspath(path))


def _nearest_existing(what: str, directory: str) -> str:
    """The deepest existing directory of an absolute path (where mkdir -p would start);
    a dangling link on the way is refused, never created through."""
    existing = directory
    while not os.path.exists(existing):
        if os.path.lexists(existing):
            raise UsageError(f"{what}: {existing} is a dangling symbolic link, not a directory")
        existing = os.path.dirname(existing)
    return existing


def missing_dirs(directory: str) -> list[str]:
    """The directories `mkdir -p DIRECTORY` would create, parents first."""
    missing = []
    directory = os.path.abspath(directory)
    while not os.path.lexists(directory):
        missing.append(directory)
        directory = os.path.dirname(directory)
    return missing[::-1]


def make_parents(paths: list[str]) -> list[str]:
    """Create the missing directories above these file outputs (mkdir -p); returns the
    directories created, parents first. Call after check_paths."""
    made: list[str] = []
    for path in paths:
        for d in missing_dirs(_parent(path)):
            try:
                os.mkdir(d)  # not makedirs: a name that appears meanwhile is not followed
            except FileExistsError:
                if not os.path.isdir(d) or os.path.islink(d):
                    raise UsageError(f"{path}: {d} appeared meanwhile and is not a directory"
                                     ) from None
                continue
            made.append(d)
    return made


def remove_made(made: list[str]) -> None:
    """Remove the directories make_parents created (those still empty), deepest first."""
    for d in reversed(made):
        try:
            os.rmdir(d)
        except OSError:
            pass


@contextlib.contextmanager
def parents_made(paths: list[str]) -> Iterator[None]:
    """`with parents_made([out]):` mkdir -p above these file outputs for the block; the
    directories it created are removed again (those still empty) when the block fails."""
    made = make_parents(paths)
    try:
        yield
    except BaseException:
        remove_made(made)
        raise


def _check_directory(what: str, directory: str) -> None:
    if not os.path.isdir(directory):
        raise UsageError(f"{what}: {directory} is not a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise UsageError(f"{what}: directory {directory} is not writable")
