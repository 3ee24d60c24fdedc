"""The shared option vocabulary, declared once (sqlite-utils' option bundles).

Every streaming command spells these the same way: `@stream_command()` adds them to a
command and hands it a StreamOptions. `Opt` is the one way an option is worded, here as
for train's fields and clean's stages: the type and the default are the field's.
"""

import dataclasses
import enum
import functools
import inspect
import os
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

import typer

from llmtk.errors import UsageError
from llmtk.io.compression import COMPRESS_NAMES
from llmtk.io.run import StreamOptions

IO_PANEL = "Input and output"
# The main help's second list: commands beside the tools (job arrays, the I/O layer alone).
PLUMBING_PANEL = "Plumbing"


def dashed(key: str) -> str | None:
    """`batch_size` -> `--batch-size`: the flag of a key where the two share a name (never
    a dotted section key such as clean's `quality.model`)."""
    return None if "." in key else "--" + key.replace("_", "-")


@dataclass(frozen=True)
class Opt:
    """How a command shows one field (of TrainConfig, LaunchConfig, StreamOptions, a clean
    stage) as an option: only the words. The option's name, type and default are the
    field's own (its name, annotation and default), so they are written in one place.
    `default` words a default the field leaves None because it is derived at run time."""

    panel: str | None
    help: str
    default: str | None = None
    metavar: str | None = None
    flags: tuple[str, ...] = ()  # default: the field's name, dashed
    argument: bool = False       # a positional argument (FILES...), not an option
    min: int | None = None       # the smallest number accepted


def declare(name: str, opt: Opt, *, help: str | None = None, show_default: bool = True,
            metavar: str | None = None):
    """The typer.Option (typer.Argument) that shows field `name` as `opt` says; `help`
    instead of opt.help (with its `[default: X]`), `metavar` where opt has none."""
    if opt.argument:
        return typer.Argument(help=help or opt.help, metavar=opt.metavar, show_default=False)
    return typer.Option(*(opt.flags or (dashed(name),)), help=help or opt.help,
                        rich_help_panel=opt.panel, show_default=show_default,
                        metavar=opt.metavar or metavar, min=opt.min)


def choice(name: str, *values: str) -> type[enum.StrEnum]:
    """A fixed set of values as an enum: typer lists them in help and click checks them
    (one `llmtk: error: Invalid value for '--x'` line naming the choices)."""
    return enum.StrEnum(name, {v: v for v in values})


OnErrorChoice = choice("OnErrorChoice", "fail", "skip", "reject")
QUIET_FLAGS = ("-q", "--quiet")
QUIET_HELP = ("No summary or progress on stderr; errors, and warnings about the input "
              "(files skipped, no records), still show.")

# The shared stream options: one entry per StreamOptions field a command takes, in the
# order they appear in a command's signature, as train's options are made from TrainConfig's
# fields. The type and the default are the field's (_FORMS: where the option's own form
# differs); every streaming command spells them the same way.
STREAM_OPTIONS: dict[str, Opt] = {
    "inputs": Opt(None,
        "Input files, directories or globs: JSON Lines (.jsonl, .ndjson; plain, .zst, "
        ".gz, .xz, .bz2), Parquet, web archives (WARC/ARC/WET), Hugging Face save_to_disk "
        "folders; '-' or nothing reads stdin.", metavar="FILES", argument=True),
    "output": Opt(IO_PANEL,
        "Write here instead of stdout; .zst/.gz/.xz/.bz2 pick the compression, .parquet "
        "writes Parquet. Written to a temporary file and renamed when complete.",
        flags=("-o", "--output")),
    "compress": Opt(IO_PANEL,
        "Compression for the output: none, zstd, gzip, xz or bz2 (default: from the -o "
        "extension; none on stdout)."),
    "rejects": Opt(IO_PANEL, "Write dropped records here, each with llmtk.reason."),
    "stats": Opt(IO_PANEL,
        "Write the run summary as JSON (sorted keys; counts add across shards)."),
    "text_field": Opt(IO_PANEL, "The field that holds the text."),
    "on_error": Opt(IO_PANEL,
        "On a bad input line: fail (stop with FILE:LINE), skip (count it) or "
        "reject (count it and write it to --rejects)."),
    "shard": Opt(IO_PANEL,
        "K/N: handle only task K of N (0-based). File inputs: whole files, a "
        "contiguous size-balanced run of the sorted list per task; stdin: records by a "
        "stable hash of the id (or position). With -o, OUTPUT.done marks a finished task "
        "and a rerun skips it."),
    "workers": Opt(IO_PANEL, "Worker processes; output order and bytes do not depend on it.",
        flags=("--workers", "-j"), min=1),
    "quiet": Opt(None, QUIET_HELP, flags=QUIET_FLAGS),
    "max_record_bytes": Opt(IO_PANEL,
        "Longest record (line) accepted, e.g. 64Mi or 1e6; a longer one is a bad "
        "record (io.record_too_long), handled per --on-error."),
}


def _default(name: str):
    """StreamOptions' default for a field: the one place the shared defaults are written."""
    return next(f.default for f in dataclasses.fields(StreamOptions) if f.name == name)


# (type, default) of the options whose form is not their field's: no inputs is stdin, the
# choices of --on-error, the shard is K/N text, the record limit a size with a binary suffix.
_FORMS: dict[str, tuple[object, object]] = {
    "inputs": (list[str] | None, None),
    "on_error": (OnErrorChoice, _default("on_error")),
    "shard": (str | None, None),
    "max_record_bytes": (str, f"{_default('max_record_bytes') >> 20}Mi"),
}


def _stream_parameter(name: str) -> tuple[object, object]:
    """(`Annotated[type, typer.Option(...)]`, default) of stream option `name`."""
    kind, default = _FORMS.get(name) or (typing.get_type_hints(StreamOptions)[name],
                                         _default(name))
    return Annotated[kind, declare(name, STREAM_OPTIONS[name])], default


STREAM_PARAMETERS = {name: _stream_parameter(name) for name in STREAM_OPTIONS}
# The same options as aliases, for a command that takes one of them on its own.
Inputs, Output, TextField, Quiet = (STREAM_PARAMETERS[n][0] for n in (
    "inputs", "output", "text_field", "quiet"))
Seed = Annotated[int, typer.Option("--seed", help="Random seed.")]
# The Ray executor's cluster (`llmtk run`, `llmtk mix search`)
RayAddress = Annotated[str | None, typer.Option(
    "--address", help="Ray cluster address (e.g. auto, or ray://head:10001); default: "
                      "$RAY_ADDRESS, else a local Ray instance.")]
Json = Annotated[bool, typer.Option("--json", help="Print JSON to stdout instead of a table.")]


def stream_options(
    *,
    inputs: list[str] | None,
    output: str | None,
    compress: str | None,
    rejects: str | None,
    stats: str | None,
    text_field: str,
    on_error: str,
    shard: str | None,
    workers: int,
    quiet: bool,
    max_record_bytes: str,
    command_options: dict | None = None,
) -> StreamOptions:
    """Check the shared options and bundle them for `llmtk.io.StreamRun` (the defaults are
    STREAM_OPTIONS', which the bundle always passes). command_options: the command's own
    options, recorded with the shared ones that change the output (`settings`)."""
    if on_error == "reject" and not rejects:
        raise UsageError("--on-error reject needs --rejects FILE")
    if compress is not None and compress not in COMPRESS_NAMES:
        raise UsageError(f"--compress: expected none, zstd, gzip, xz or bz2, got {compress!r}")
    return StreamOptions(
        inputs=list(inputs or []),
        output=output,
        compress=compress,
        rejects=rejects,
        stats=stats,
        text_field=text_field,
        on_error=on_error,
        shard=parse_shard(shard),
        workers=workers,
        quiet=quiet,
        max_record_bytes=parse_bytes("--max-record-bytes", max_record_bytes),
        settings=output_settings({**(command_options or {}), "text_field": text_field,
                                  "on_error": on_error, "compress": compress, "shard": shard,
                                  "max_record_bytes": max_record_bytes}),
    )


def output_settings(values: dict) -> dict:
    """The options a task's completion marker records, as `--flag: value` (JSON values),
    from {flag or parameter name: value}: every option given, less those that change no
    output byte (--quiet, --workers, the dry printouts). A finished task rerun with other
    settings is refused (llmtk.io.marker)."""
    settings = {}
    for key, value in values.items():
        name = key.lstrip("-").replace("-", "_")
        if name in NOT_OUTPUT_SETTINGS:
            continue
        settings[key if key.startswith("--") else "--" + name.replace("_", "-")] = _plain(value)
    return settings


# Options that leave every output byte as it is: how much is printed, how many processes.
NOT_OUTPUT_SETTINGS = {"quiet", "workers", "print_config"}


def _plain(value):
    """An option's value as JSON: enums by value, bundles as dicts; a path-like string in
    its normal form (`evals/` and `evals` are one folder)."""
    if isinstance(value, str) and "/" in value:
        return os.path.normpath(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return str(value)


def parse_bytes(option: str, value: str) -> int:
    """'67108864', '64Mi' (binary), '64M' or '1e6' (decimal) -> a positive number of bytes."""
    from llmtk.units import parse_number

    text = value.strip()
    scale = 1
    for suffix, factor in (("Ki", 1 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30)):
        if text.endswith(suffix):
            text, scale = text[: -len(suffix)], factor
            break
    n = int(parse_number(option, text) * scale)
    if n < 1:
        raise UsageError(f"{option}: expected a positive size, got {value!r}")
    return n


def parse_shard(value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    try:
        k, n = (int(x) for x in value.split("/"))
    except ValueError:
        raise UsageError(f"--shard: expected K/N such as 0/8, got {value!r}") from None
    if n < 1 or not 0 <= k < n:
        raise UsageError(f"--shard: need 0 <= K < N, got {value!r}")
    return k, n


def option_bundle(name: str, options: dict[str, tuple[object, object]],
                  build: Callable[..., object], *, pass_command_options: bool = False
                  ) -> Callable:
    """A decorator factory for a bundle of options shared by several commands.

        bundle = option_bundle("stream", STREAM_OPTIONS, stream_options)

        @bundle(without=("workers",))
        def command(own_option: ... = ..., *, stream: StreamOptions) -> None: ...

    The options are declared once (sqlite-utils' option bundles): the decorator
    adds them, keyword-only, to the signature typer reads and calls the command
    with `name=build(**values)`. Options in `without` are left out of the
    command and reach `build` with their defaults. Bundles stack. With
    pass_command_options, `build` also gets `command_options=`, the command's own values.
    """

    def bundle(*, without: tuple[str, ...] = ()) -> Callable:
        unknown = set(without) - set(options)
        if unknown:
            raise ValueError(f"unknown {name} options: {sorted(unknown)}")
        names = [n for n in options if n not in without]

        def decorate(func: Callable) -> Callable:
            sig = inspect.signature(func, eval_str=True)
            own = [p for p in sig.parameters.values() if p.name != name]
            keyword_only = inspect.Parameter.KEYWORD_ONLY
            positional = [p for p in own if p.kind != keyword_only]
            added = [inspect.Parameter(n, keyword_only, default=options[n][1],
                                       annotation=options[n][0]) for n in names]
            later = [p for p in own if p.kind == keyword_only]
            new_sig = sig.replace(parameters=[*positional, *added, *later])

            @functools.wraps(func)
            def command(*args, **kwargs):
                values = {n: kwargs.pop(n) if n in names else default
                          for n, (_, default) in options.items()}
                own = ({"command_options": {flags.get(k, k): v for k, v in kwargs.items()}}
                       if pass_command_options else {})
                return func(*args, **{name: build(**values, **own)}, **kwargs)

            flags = _long_flags(new_sig)
            command.__signature__ = new_sig  # type: ignore[attr-defined]
            command.__annotations__ = {p.name: p.annotation for p in new_sig.parameters.values()
                                       if p.annotation is not inspect.Parameter.empty}
            return command

        return decorate

    return bundle


def _long_flags(sig: inspect.Signature) -> dict[str, str]:
    """Parameter name -> its first long flag (`eval_paths` -> `--eval`), from the typer
    Option in its annotation; parameters without one are left out."""
    flags = {}
    for p in sig.parameters.values():
        for info in typing.get_args(p.annotation)[1:]:
            decls = [getattr(info, "default", None), *(getattr(info, "param_decls", ()) or ())]
            long = [d for d in decls if isinstance(d, str) and d.startswith("--")]
            if long:
                flags[p.name] = long[0].split("/")[0]
    return flags


# `@stream_command()`: the shared stream options, handed over as `stream: StreamOptions`.
stream_command = option_bundle("stream", STREAM_PARAMETERS, stream_options,
                               pass_command_options=True)
