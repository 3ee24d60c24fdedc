"""Exceptions that the CLI turns into one line on stderr and an exit status.

Domain packages raise these; `llmtk.cli.main` prints `llmtk: error: <message>`
and exits with `exit_code` (tracebacks only with LLMTK_DEBUG=1).
"""

import re


class LlmtkError(Exception):
    """A runtime or data error: exit status 1."""

    exit_code = 1


class DataError(LlmtkError):
    """Bad input data; the message starts with `FILE:LINE:` where it can."""


class UsageError(LlmtkError):
    """Bad or inconsistent options: exit status 2."""

    exit_code = 2


class ConfigError(UsageError):
    """A bad setting, named by its config key (`gopher_quality.min_doc_words`, `steps`).

    Domain code knows config keys, not flags: the command that built the config words the
    key as the flag the user typed, or as `FILE: key` for a value read from a config file
    (llmtk.commands.configs.flags_for). `source` is the file, when the loader knows the value
    came from one. Other keys the message names are in `also` and appear in `message` as
    {0}, {1}, ...; they are worded the same way. `value`, when given, follows the key
    (`--resume runs/a: no complete checkpoint there`). Unworded, `str(e)` is `key: message`.
    """

    def __init__(self, key: str, message: str, *, also: tuple[str, ...] = (),
                 source: str | None = None, value: object = None) -> None:
        self.key, self.message, self.also, self.source = key, message, tuple(also), source
        self.value = value  # shown after the key when the message is about one given value
        super().__init__(key, message)

    def __str__(self) -> str:
        return self.worded(lambda k: k)

    def __reduce__(self):  # across --workers processes, with every attribute
        return (type(self), (self.key, self.message), dict(vars(self)))

    def worded(self, name, where: str | None = None) -> str:
        """The one-line message, each key written as `name(key)` (a flag, say); `where`
        replaces the leading key (`FILE: key`). A file the loader named always leads."""
        if self.source:
            where = f"{self.source}: {self.key}"
        # only {0}, {1}, ... are replaced: a value in the message may hold braces of its own
        text = re.sub(r"\{(\d+)\}", lambda m: name(self.also[int(m.group(1))]), self.message
                      ) if self.also else self.message
        shown = "" if self.value is None else f" {self.value}"
        return f"{where or name(self.key)}{shown}: {text}"


class PipeClosed(Exception):
    """The reader of stdout went away (`| head`): end quietly with status 0."""


class AlreadyDone(Exception):
    """A sharded task whose completion marker is there: say so and exit 0 (llmtk.io.marker)."""
