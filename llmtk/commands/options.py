"""The shared option vocabulary, declared once (sqlite-utils' option bundles).

Every streaming command spells these the same way; use the aliases in a
command's signature and pass the values to `stream_options(...)`.
"""

import dataclasses
import enum
import functools
import inspect
import os
import typing
from collections.abc import Callable
from typing import Annotated

import typer

from llmtk.errors import UsageError
from llmtk.io.compression import COMPRESS_NAMES
from llmtk.io.run import StreamOptions

IO_PANEL = "Input and output"
# The main help's second list: commands beside the tools (job arrays, the I/O layer alone).
PLUMBING_PANEL = "Plumbing"

Inputs = Annotated[
    list[str] | None,
    typer.Argument(
        help="Input files, directories or globs: JSON Lines (.jsonl, .ndjson; plain, .zst, "
        ".gz, .xz, .bz2), Parquet, web archives (WARC/ARC/WET), Hugging Face save_to_disk "
        "folders; '-' or nothing reads stdin.",
        metavar="FILES",
        show_default=False,
    ),
]
Output = Annotated[
    str | None,
    typer.Option(
        "-o",
        "--output",
        help="Write here instead of stdout; .zst/.gz/.xz/.bz2 pick the compression, .parquet "
        "writes Parquet. "
        "Written to a temporary file and renamed when complete.",
        rich_help_panel=IO_PANEL,
    ),
]
Compress = Annotated[
    str | None,
    typer.Option(
        "--compress",
        help="Compression for the output: none, zstd, gzip, xz or bz2 (default: from the -o "
        "extension; none on stdout).",
        rich_help_panel=IO_PANEL,
    ),
]
Rejects = Annotated[
    str | None,
    typer.Option(
        "--rejects",
        help="Write dropped records here, each with llmtk.reason.",
        rich_help_panel=IO_PANEL,
    ),
]
Stats = Annotated[
    str | None,
    typer.Option(
        "--stats",
        help="Write the run summary as JSON (sorted keys; counts add across shards).",
        rich_help_panel=IO_PANEL,
    ),
]
TextField = Annotated[
    str,
    typer.Option("--text-field", help="The field that holds the text.", rich_help_panel=IO_PANEL),
]
def choice(name: str, *values: str) -> type[enum.StrEnum]:
    """A fixed set of values as an enum: typer lists them in help and click checks them
    (one `llmtk: error: Invalid value for '--x'` line naming the choices)."""
    return enum.StrEnum(name, {v: v for v in values})


OnErrorChoice = choice("OnErrorChoice", "fail", "skip", "reject")


OnError = Annotated[
    OnErrorChoice,
    typer.Option(
        "--on-error",
        help="On a bad input line: fail (stop with FILE:LINE), skip (count it) or "
        "reject (count it and write it to --rejects).",
        rich_help_panel=IO_PANEL,
    ),
]
Shard = Annotated[
    str | None,
    typer.Option(
        "--shard",
        help="K/N: handle only task K of N (0-based). File inputs: whole files, a "
        "contiguous size-balanced run of the sorted list per task; stdin: records by a "
        "stable hash of the id (or position). With -o, OUTPUT.done marks a finished task "
        "and a rerun skips it.",
        rich_help_panel=IO_PANEL,
    ),
]
Workers = Annotated[
    int,
    typer.Option(
        "--workers",
        "-j",
        min=1,
        help="Worker processes; output order and bytes do not depend on it.",
        rich_help_panel=IO_PANEL,
    ),
]
MaxRecordBytes = Annotated[
    str,
    typer.Option(
        "--max-record-bytes",
        help="Longest record (line) accepted, e.g. 64Mi or 1e6; a longer one is a bad "
        "record (io.record_too_long), handled per --on-error.",
        rich_help_panel=IO_PANEL,
    ),
]
Seed = Annotated[int, typer.Option("--seed", help="Random seed.")]
# The Ray executor's cluster (`llmtk run`, `llmtk mix search`)
RayAddress = Annotated[str | None, typer.Option(
    "--address", help="Ray cluster address (e.g. auto, or ray://head:10001); default: "
                      "$RAY_ADDRESS, else a local Ray instance.")]
QUIET_FLAGS = ("-q", "--quiet")
QUIET_HELP = ("No summary or progress on stderr; errors, and warnings about the input "
              "(files skipped, no records), still show.")
Quiet = Annotated[bool, typer.Option(*QUIET_FLAGS, help=QUIET_HELP)]
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


def _default(name: str):
    """StreamOptions' default for a field: the one place the shared defaults are written."""
    return next(f.default for f in dataclasses.fields(StreamOptions) if f.name == name)


# The shared stream options, in the order they appear in a command's signature, with their
# defaults from StreamOptions (in the option's own form where it differs: no inputs is
# stdin, the shard is K/N text, the record limit a size with a binary suffix).
STREAM_OPTIONS: dict[str, tuple[object, object]] = {
    "inputs": (Inputs, None),
    "output": (Output, _default("output")),
    "compress": (Compress, _default("compress")),
    "rejects": (Rejects, _default("rejects")),
    "stats": (Stats, _default("stats")),
    "text_field": (TextField, _default("text_field")),
    "on_error": (OnError, _default("on_error")),
    "shard": (Shard, None),
    "workers": (Workers, _default("workers")),
    "quiet": (Quiet, _default("quiet")),
    "max_record_bytes": (MaxRecordBytes, f"{_default('max_record_bytes') >> 20}Mi"),
}


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
stream_command = option_bundle("stream", STREAM_OPTIONS, stream_options,
                               pass_command_options=True)
