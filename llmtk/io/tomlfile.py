"""The one TOML loader of the `--config FILE` options (clean, train), with one error wording.

An unreadable file is `FILE: cannot read: REASON`; a syntax error is
`FILE:LINE: invalid TOML: MESSAGE` (tomllib puts the line in its message; it is moved to the
front, where every llmtk data error has it). Both are usage errors (exit 2). A bad key or
value is the caller's `ConfigError(key, message, source=FILE)`, worded `FILE: key: message`.
"""

from __future__ import annotations

import re
import tomllib

from llmtk.errors import UsageError

# tomllib's messages end in "(at line 3, column 7)" or "(at end of document)"
_AT_LINE = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")


def load(path: str) -> dict:
    """The file's top-level table."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise UsageError(f"{path}: invalid TOML: not UTF-8 text (byte {e.start})") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(_decode_error(path, str(e))) from None


def _decode_error(path: str, message: str) -> str:
    m = _AT_LINE.search(message)
    if m is None:
        return f"{path}: invalid TOML: {message}"
    return f"{path}:{m.group(1)}: invalid TOML: {message[:m.start()]} (column {m.group(2)})"
