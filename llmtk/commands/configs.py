"""Config keys worded as the user wrote them: the flag, or `FILE: key` for a config file.

Domain configs know keys, not flags: they raise `ConfigError(key, message)` (llmtk.errors).
The command that built a config turns that into the one-line usage error here, in one place:

- a key the command line set is its flag (`--min-quality: expected a number ...`);
- otherwise, with `--config FILE`, it is `FILE: key` (`clean.toml: quality.min_score: ...`);
- otherwise (a default, a shared stream option, or a command without config files) the
  flag, or the key if it has none.

Other keys a message names (ConfigError.also) are worded the same way, without the file.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager

from llmtk.commands.options import STREAM_OPTIONS, dashed
from llmtk.errors import ConfigError, UsageError


@contextmanager
def flags_for(flags: Mapping[str, str] | Callable[[str], str | None],
              given: Collection[str] = (), config: str | None = None) -> Iterator[None]:
    """Re-raise a ConfigError from the block as a UsageError worded for this command.

    `flags` maps a key to its flag (a key it lacks is its own dashed name), or is a function
    doing so; `given` holds the keys the command line set; `config` is the `--config` file,
    if any."""
    try:
        yield
    except ConfigError as e:
        raise UsageError(word(e, flags, given, config)) from None


def word(e: ConfigError, flags: Mapping[str, str] | Callable[[str], str | None],
         given: Collection[str] = (), config: str | None = None) -> str:
    table = flags if isinstance(flags, Mapping) else None

    def flag_of(key: str) -> str | None:
        # keys the table lacks (the shared stream options: `compress`) share the flag's name
        return (table.get(key) or dashed(key)) if table is not None else flags(key)

    def from_file(key: str) -> bool:
        # the shared stream options are flags only: no config file sets them
        return config is not None and key not in given and key not in STREAM_OPTIONS

    def name(key: str) -> str:
        flag = flag_of(key)
        return flag if flag and not from_file(key) else key

    where = f"{config}: {e.key}" if from_file(e.key) else None
    return e.worded(name, where)


def keys_are_flags(command: Callable) -> Callable:
    """A command whose ConfigErrors' keys are its flag names (`max_epochs` is --max-epochs):
    they reach the user (and typer's test runner) already worded."""
    import functools

    @functools.wraps(command)
    def run(*args, **kwargs):
        with flags_for(dashed):
            return command(*args, **kwargs)

    return run


# -- options made from config fields (train's from TrainConfig, clean's from its stages) --------


def default_words(value: object) -> str | None:
    """How help shows a field's default, read from the dataclass so that the default is
    written in one place (None: show none: a list, a value derived at run time, a flag that
    is off, an empty string)."""
    if value is dataclasses.MISSING or value is None or value is False or value == "" \
            or isinstance(value, list):
        return None
    if value is True:
        return "on"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def with_default(help: str, shown: str | None) -> str:
    """The help with `[default: X]` at its end (in the text, not typer's show_default: a
    string there prints as "(X)")."""
    return f"{help} [dim]\\[default: {shown}][/dim]" if shown else help


def signed(command: Callable, params: list[inspect.Parameter]) -> Callable:
    """`command` with these parameters: typer reads them from its signature and their types
    from its annotations."""
    command.__signature__ = inspect.Signature(params, return_annotation=None)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    return command
