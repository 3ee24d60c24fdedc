"""Byte sinks: stdout through one private buffer, or a file written atomically.

stdout is written with os.write on fd 1 through our own 1 MiB buffer, so a
job script's PYTHONUNBUFFERED=1 does not turn every record into a syscall,
and a closed pipe surfaces as `PipeClosed` (exit 0) instead of a traceback.
A file goes to `FILE.tmp-PID` and is renamed over FILE only by `commit()`;
`abort()` removes it, so a failed run never leaves a file that looks finished.
"""

import os
import sys

from llmtk.errors import LlmtkError, PipeClosed, UsageError
from llmtk.io.compression import Compressor, kind_from_name

BUFFER = 1 << 20


class Sink:
    def __init__(self, path: str | None, compress: str | None = None) -> None:
        """path None or '-' means stdout; compress overrides the extension's choice."""
        self.to_stdout = path in (None, "-")
        self.path = None if self.to_stdout else path
        kind = compress or ("plain" if self.to_stdout else kind_from_name(path))  # type: ignore[arg-type]
        if self.to_stdout and kind != "plain" and os.isatty(1):
            raise UsageError("refusing to write compressed data to a terminal (use -o or a pipe)")
        self._compressor = Compressor(kind) if kind != "plain" else None
        self._buf = bytearray()
        self.bytes_written = 0  # uncompressed bytes handed to write()
        self._closed = False
        if self.to_stdout:
            self._fd = 1
            self._tmp = None
        else:
            directory = os.path.dirname(os.path.abspath(path))  # type: ignore[arg-type]
            if not os.path.isdir(directory):
                raise UsageError(f"{path}: directory {directory} does not exist")
            self._tmp = f"{path}.tmp-{os.getpid()}"
            try:
                self._fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            except OSError as e:
                raise LlmtkError(f"{path}: cannot create: {e.strerror}") from None

    def write(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        if len(buf) >= BUFFER:
            self._drain()

    def _drain(self) -> None:
        data = bytes(self._buf)
        self._buf.clear()
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

    def commit(self) -> None:
        """Flush everything; rename a file output into place."""
        if self._closed:
            return
        self._drain()
        if self._compressor is not None:
            self._write_all(self._compressor.finish())
        self._closed = True
        if self._tmp is not None:
            try:
                os.fsync(self._fd)
                os.close(self._fd)
                os.replace(self._tmp, self.path)  # type: ignore[arg-type]
            except OSError as e:
                self._remove_tmp()
                raise LlmtkError(f"{self.path}: cannot finish writing: {e.strerror}") from None

    def abort(self) -> None:
        """Throw away a file output; flush what stdout already has (it is a stream)."""
        if self._closed:
            return
        self._closed = True
        if self._tmp is None:
            self._buf.clear()  # records after the failure point are not sent
            return
        try:
            os.close(self._fd)
        except OSError:
            pass
        self._remove_tmp()

    def _remove_tmp(self) -> None:
        try:
            os.unlink(self._tmp)  # type: ignore[arg-type]
        except OSError:
            pass


def stderr_is_terminal() -> bool:
    try:
        return os.isatty(sys.stderr.fileno())
    except (OSError, ValueError):
        return False
