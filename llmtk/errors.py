"""Exceptions that the CLI turns into one line on stderr and an exit status.

Domain packages raise these; `llmtk.cli.main` prints `llmtk: error: <message>`
and exits with `exit_code` (tracebacks only with LLMTK_DEBUG=1).
"""


class LlmtkError(Exception):
    """A runtime or data error: exit status 1."""

    exit_code = 1


class DataError(LlmtkError):
    """Bad input data; the message starts with `FILE:LINE:` where it can."""


class UsageError(LlmtkError):
    """Bad or inconsistent options: exit status 2."""

    exit_code = 2


class PipeClosed(Exception):
    """The reader of stdout went away (`| head`): end quietly with status 0."""


class AlreadyDone(Exception):
    """A sharded task whose completion marker is there: say so and exit 0 (llmtk.io.marker)."""
