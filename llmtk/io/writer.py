"""Byte sinks: stdout through one private buffer, a special file written through,
or a regular file written atomically.

stdout is written with os.write on fd 1 through our own 1 MiB buffer, so a
job script's PYTHONUNBUFFERED=1 does not turn every record into a syscall,
and a closed pipe surfaces as `PipeClosed` (exit 0) instead of a traceback.
`--output /dev/stdout` (or /dev/fd/1) is stdout.

A FIFO, a character device (`/dev/null`), a socket or a /dev/fd/N path is
opened and written through: it is never replaced by a regular file.

A regular file (or a new name, or a symlink's target) goes to
`TARGET.tmp-PID` (see llmtk.io.atomic) and is renamed over TARGET only by
`commit()`; `abort()` removes it, so a failed run never leaves a file that
looks finished. `finish()` + `publish()` are commit's two halves, for runs
that commit several outputs together.
"""

import os
import stat
import sys

from llmtk.errors import LlmtkError, PipeClosed, UsageError
from llmtk.io.atomic import Staged
from llmtk.io.compression import Compressor, kind_from_name

BUFFER = 1 << 20
STDOUT_ALIASES = ("/dev/stdout", "/dev/fd/1", "/proc/self/fd/1")
# Paths that name an already-open file: opened again and appended to, never replaced.
FD_PATHS = ("/dev/stdin", "/dev/stderr", "/dev/fd/", "/proc/")


def output_kind(path: str | None) -> str:
    """'stdout', 'through' (a special file, written through) or 'file' (written atomically)."""
    if path in (None, "-") or os.path.abspath(path) in STDOUT_ALIASES:  # type: ignore[arg-type]
        return "stdout"
    if os.path.abspath(path).startswith(FD_PATHS):  # type: ignore[arg-type]
        return "through"
    try:
        st = os.stat(path)  # type: ignore[arg-type]
    except FileNotFoundError:
        return "file"  # a new name, or a symlink whose target does not exist yet
    except OSError as e:
        raise UsageError(f"{path}: {e.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{path}: is a directory")
    return "file" if stat.S_ISREG(st.st_mode) else "through"


class Sink:
    def __init__(self, path: str | None, compress: str | None = None) -> None:
        """path None or '-' means stdout; compress overrides the extension's choice."""
        self.kind = output_kind(path)
        self.to_stdout = self.kind == "stdout"
        self.path = None if self.to_stdout else path
        kind = compress or ("plain" if self.to_stdout else kind_from_name(path))  # type: ignore[arg-type]
        self._compressor = Compressor(kind) if kind != "plain" else None
        self._buf = bytearray()
        self.bytes_written = 0  # uncompressed bytes handed to write()
        self._closed = False
        self._staged: Staged | None = None
        if self.to_stdout:
            self._fd = 1
        elif self.kind == "through":
            try:
                self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)  # type: ignore[arg-type]
            except OSError as e:
                raise LlmtkError(f"{path}: cannot open for writing: {e.strerror}") from None
        else:
            directory = os.path.dirname(os.path.realpath(path))  # type: ignore[arg-type]
            if not os.path.isdir(directory):
                raise UsageError(f"{path}: directory {directory} does not exist")
            self._staged = Staged(path)  # type: ignore[arg-type]
            self._fd = self._staged.fd
        if kind != "plain" and self.kind != "file" and os.isatty(self._fd):
            if self.kind == "through":
                os.close(self._fd)
            raise UsageError("refusing to write compressed data to a terminal (use -o or a pipe)")

    def write(self, data: bytes) -> None:
        buf = self._buf
        if len(data) >= BUFFER:  # a huge record goes out as it is, not copied twice more
            self._drain()
            self._emit(data)
            return
        buf += data
        if len(buf) >= BUFFER:
            self._drain()

    def _drain(self) -> None:
        data = bytes(self._buf)
        self._buf.clear()
        self._emit(data)

    def _emit(self, data: bytes) -> None:
        self.bytes_written += len(data)
        if self._compressor is not None:
            data = self._compressor.compress(data)
        self._write_all(data)

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
        except BrokenPipeError:
            raise PipeClosed() from None
        except OSError as e:
            where = "stdout" if self.to_stdout else self.path
            raise LlmtkError(f"{where}: write failed: {e.strerror}") from None

    def finish(self) -> None:
        """Flush everything (a file: to disk, then closed); nothing is renamed yet."""
        if self._closed:
            return
        self._drain()
        if self._compressor is not None:
            self._write_all(self._compressor.finish())
        self._closed = True
        if self._staged is not None:
            self._staged.finish()
        elif self.kind == "through":
            os.close(self._fd)

    def publish(self) -> None:
        """Rename a finished file output into place (nothing to do for streams)."""
        if self._staged is not None:
            staged, self._staged = self._staged, None
            staged.publish()

    def commit(self) -> None:
        """Flush everything; rename a file output into place."""
        self.finish()
        self.publish()

    def abort(self) -> None:
        """Throw away a file output; flush what stdout already has (it is a stream)."""
        if self._staged is not None:
            staged, self._staged = self._staged, None
            self._closed = True
            staged.discard()
            return
        if self._closed:
            return
        self._closed = True
        self._buf.clear()  # records after the failure point are not sent
        if self.kind == "through":
            try:
                os.close(self._fd)
            except OSError:
                pass


def stderr_is_terminal() -> bool:
    try:
        return os.isatty(sys.stderr.fileno())
    except (OSError, ValueError):
        return False
