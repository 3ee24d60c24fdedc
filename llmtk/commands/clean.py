"""`llmtk clean`: normalise, language-ID, quality-filter and PII-scrub a document stream.

Thin: options -> `llmtk.clean.CleanConfig` -> `Cleaner` applied by `StreamRun.apply`, plus the
`train-quality` and `calibrate` subcommands. The stage options are made from the stages
(`llmtk.clean.stages.PIPELINE`), so a new stage adds its options without an edit here.
`clean` is a command group whose own callback does the cleaning, so `llmtk clean FILES
--lang en` and `llmtk clean train-quality ...` both work.
"""

from __future__ import annotations

import inspect
import sys
import types
import typing
from typing import Annotated

import typer

from llmtk.clean.stages import PER_LANG, PIPELINE
from llmtk.clean.stages.base import Flag, split_list
from llmtk.commands import configs, groups
from llmtk.commands import options as o
from llmtk.errors import UsageError
from llmtk.io.run import StreamOptions

HELP = (
    "Normalise, language-ID, quality-filter and PII-scrub a document stream.\n\n"
    "Stages: URL filter -> main-content extraction from HTML (WARC responses, HTML "
    "documents; resiliparse or trafilatura, math and code kept) -> normalise (Unicode, "
    "mojibake, ANSI/control characters, whitespace, width) -> lines repeated at the top or "
    "bottom of a host's pages (--host-lines, off by default) -> language ID (fastText "
    "lid.176 + script census) -> Gopher quality, Gopher repetition, C4 "
    "and FineWeb rules (datatrove's thresholds, language-aware) -> fastText quality classifier "
    "-> perplexity under an llmtk train model -> secret and PII placeholders. Source code "
    "(--profile code) gets code rules (StarCoder / The Stack) instead. Every dropped record "
    "carries a reason such as gopher.short_doc.\n\n"
) + """\
[bold]Examples[/bold]

  zstdcat crawl.jsonl.zst | llmtk clean --lang en,zh > clean.jsonl

  llmtk clean crawl/ -j 8 --rejects rejects.jsonl.zst -o clean.jsonl.zst

  llmtk clean crawl/*.warc.gz --url-blocklist block.txt -o web.jsonl.zst

  llmtk clean --print-config > clean.toml
  llmtk clean --config clean.toml in.jsonl

  llmtk clean in.jsonl --dry-run --annotate --stats stats.json | head

  llmtk clean train-quality --positive wiki.jsonl \\
    --negative crawl.jsonl -o quality.bin

  llmtk clean in.jsonl --quality-model quality.bin --min-quality 0.5

  llmtk clean calibrate --lang sw wiki-sw.jsonl -o sw.toml

  llmtk clean --profile code the-stack.jsonl --rejects junk.jsonl > code.jsonl

Exit status: 0 success, 1 data or runtime error, 2 bad usage.
"""

STAGES = "Stages"
KEYWORD = inspect.Parameter.POSITIONAL_OR_KEYWORD


clean_app = groups.group(help=HELP, short_help=HELP.splitlines()[0])


# The stage options are made from llmtk.clean.stages.PIPELINE, as train's are from its config
# fields: each stage's `flags` say which fields are options and in what words; the type and
# the default (`[default: X]` in the help) are the field's. A value given sets `stage.field`.
# --filters picks among the per-language filter stages. The rest are the command's own.
OWN: dict[str, tuple[object, object, o.Opt]] = {
    "config": (str | None, None, o.Opt(STAGES,
        "TOML file with stage settings (see --print-config).")),
    "print_config": (bool, False, o.Opt(STAGES,
        "Print the effective configuration as TOML and exit.")),
    "filters": (str | None, None, o.Opt(STAGES, configs.with_default(
        f"Heuristic filters to run: any of {', '.join(PER_LANG)}, comma-separated, or "
        "none.", "all"))),
    "annotate": (bool, False, o.Opt(STAGES,
        "Add llmtk.lang, llmtk.lang_score, llmtk.quality and per-filter values to each "
        "written record.")),
    "dry_run": (bool, False, o.Opt(STAGES,
        "Drop and change nothing; count what would be dropped (with --annotate: "
        "llmtk.reason).")),
}


def _stage_flags() -> dict[str, tuple[type, Flag]]:
    """Parameter name (the flag's, `min_lang_score`) -> (the stage, its Flag)."""
    return {f.flag.removeprefix("--").replace("-", "_"): (stage, f)
            for stage in PIPELINE for f in stage.flags}


PARAMS = _stage_flags()
# config key -> the flag that sets it, for errors worded as the user wrote them
FLAGS = {f"{stage.name}.{f.key}": f.flag for stage, f in PARAMS.values()} | {
    f"{name}.enabled": "--filters" for name in PER_LANG}


def _stage_parameter(name: str, stage, flag: Flag) -> inspect.Parameter:
    """`Annotated[type | None, typer.Option(...)]` for one stage field (default None: a TOML
    file may set what no flag does); a lone `--no-X` switch is a bool defaulting to False."""
    cfg = stage.config()
    kind = flag.kind or _plain(typing.get_type_hints(stage.config)[flag.key])
    shown = None if flag.off or not flag.show_default else configs.default_words(
        getattr(cfg, flag.key))
    option = o.declare(name, o.Opt(STAGES, flag.help, flags=flag.flags),
                       help=configs.with_default(flag.help, shown), show_default=False)
    if flag.off:
        return inspect.Parameter(name, KEYWORD, default=False, annotation=Annotated[bool, option])
    return inspect.Parameter(name, KEYWORD, default=None, annotation=Annotated[kind | None, option])


def _plain(kind):
    """`float | None` -> float: the option's own type (None is its "not given")."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    return args[0] if isinstance(kind, types.UnionType) and len(args) == 1 else kind


def _own(name: str) -> inspect.Parameter:
    kind, default, opt = OWN[name]
    return inspect.Parameter(name, KEYWORD, default=default,
                             annotation=Annotated[kind, o.declare(name, opt)])


def _parameters() -> list[inspect.Parameter]:
    """--config, --print-config, each stage's options in the order the stages run (--filters
    before the first filter), --annotate, --dry-run; then the stream options."""
    params = [_own("config"), _own("print_config")]
    for stage in PIPELINE:
        if stage.per_lang and stage.name == PER_LANG[0]:
            params.append(_own("filters"))
        params += [_stage_parameter(name, st, f) for name, (st, f) in PARAMS.items()
                   if st is stage]
    params += [_own("annotate"), _own("dry_run")]
    stream = inspect.Parameter("stream", inspect.Parameter.KEYWORD_ONLY,
                               annotation=StreamOptions)
    return [*params, stream]


def stage_values(given: dict[str, object], filters: str | None) -> dict[str, object]:
    """{config key: value} of the stage options that were given (not None; a `--no-X`
    switch: True)."""
    values = {}
    for param, (stage, flag) in PARAMS.items():
        value = given[param]
        if flag.off:
            value = False if value else None
        elif value is not None and flag.value is not None:
            value = flag.value(value)
        if value is not None:
            values[f"{stage.name}.{flag.key}"] = value
    if filters is not None:
        chosen = split_list(filters)
        if chosen == ["none"]:
            chosen = []
        unknown = set(chosen) - set(PER_LANG)
        if unknown:
            raise UsageError(f"--filters: unknown filter(s) {sorted(unknown)}; "
                             f"choose from {', '.join(PER_LANG)} or none")
        values.update({f"{name}.enabled": name in chosen for name in PER_LANG})
    return values


def clean(**options) -> None:
    stream = options.pop("stream")
    own = {name: options.pop(name) for name in OWN}
    values = stage_values(options, own["filters"])
    # From here on a ConfigError (a bad key, from the config or a stage loading its model)
    # reaches the user as the flag that set the key, or as `FILE: key`.
    with configs.flags_for(FLAGS, values.keys(), own["config"]):
        _clean(own["config"], values, own["print_config"], own["annotate"], own["dry_run"],
               stream)


clean = groups.main(clean_app, help=HELP)(o.stream_command()(configs.signed(clean,
                                                                           _parameters())))


def _clean(config: str | None, values: dict, print_config: bool, annotate: bool,
           dry_run: bool, stream: StreamOptions) -> None:
    from llmtk.clean import CleanConfig, Cleaner
    from llmtk.io import StreamRun

    cfg = CleanConfig.from_toml(config) if config else CleanConfig()
    cfg = cfg.with_values(values)
    cfg.validate()
    if print_config:
        sys.stdout.write(cfg.to_toml())
        return

    opts = stream
    models = [*(p for stage in PIPELINE for p in stage.reads(getattr(cfg, stage.name))),
              *([config] if config else [])]
    run = StreamRun("clean", opts, inputs_also=models)  # paths checked before reading
    cleaner = Cleaner(cfg, annotate=annotate, dry_run=dry_run)
    cleaner.load()
    with run:
        for stage, key in cleaner.fitting():  # a first pass: perplexity quantile, host lines
            if "-" in run.paths:
                raise UsageError(f"{FLAGS[key]} reads the input twice: give files, not stdin")
            from llmtk.io import read_docs

            # run.paths are this task's own files already; stdin is refused above
            first_pass = read_docs(run.paths, opts.text_field, lambda bad: None,
                                   run.record_shard, max_record=opts.max_record_bytes)
            line = stage.fit(first_pass, opts.workers, cleaner.before(stage))
            if not opts.quiet:
                from llmtk.io.console import stderr_console

                stderr_console().print(f"llmtk clean: {line}")
        run.apply(cleaner)


@clean_app.command(
    "train-quality",
    help="""\
Train a fastText quality classifier: positive (good) vs negative documents.

Holds out --test-fraction of the documents and prints precision/recall of the positive
label on them (to stderr; --json prints them to stdout). The model is a standard fastText
.bin file for --quality-model.

[bold]Examples[/bold]

  llmtk clean train-quality --positive wiki.jsonl \\
    --negative crawl.jsonl.zst -o q.bin

  llmtk clean in.jsonl --quality-model q.bin --min-quality 0.5 > good.jsonl
""",
)
@configs.keys_are_flags
def train_quality(
    positive: Annotated[
        list[str],
        typer.Option("--positive", help="Documents of the good class (files, dirs, globs)."),
    ],
    negative: Annotated[
        list[str],
        typer.Option("--negative", help="Documents of the other class (files, dirs, globs)."),
    ],
    output: Annotated[str, typer.Option("-o", "--output", help="Where to write the model.")],
    text_field: o.TextField = "text",
    test_fraction: Annotated[
        float, typer.Option("--test-fraction", help="Share of documents held out for testing.")
    ] = 0.1,
    epoch: Annotated[int, typer.Option("--epoch", help="Training epochs.")] = 5,
    label: Annotated[str, typer.Option("--label", help="Name of the positive label.")] = "hq",
    seed: o.Seed = 0,
    json_out: o.Json = False,
    quiet: o.Quiet = False,
) -> None:
    import orjson

    from llmtk.clean.quality import train_quality as train
    from llmtk.io import expand_inputs, read_docs

    if not 0.0 < test_fraction < 1.0:
        raise UsageError("--test-fraction: expected a number between 0 and 1")
    from llmtk.io.paths import check_paths, input_identities, parents_made

    inputs = expand_inputs(positive) + expand_inputs(negative)
    check_paths(input_identities(inputs), [("-o", output)])  # before anything is read

    def texts(paths: list[str]):
        for doc in read_docs(expand_inputs(paths), text_field):
            yield doc.text

    with parents_made([output]):
        report = train(texts(positive), texts(negative), output, test_fraction=test_fraction,
                       epoch=epoch, seed=seed, label=label)
    if json_out:
        from llmtk.io.console import write_out

        write_out(sys.stdout, orjson.dumps(report.as_dict(), option=orjson.OPT_SORT_KEYS).decode()
                  + "\n")
    elif not quiet:
        from llmtk.io.console import stderr_console

        stderr_console().print(
            f"llmtk clean train-quality: wrote {output}\n"
            f"  trained on {report.train:,} documents, tested on {report.test:,}\n"
            f"  held-out precision {report.precision:.3f}  recall {report.recall:.3f}  "
            f"F1 {report.f1:.3f}  (label {label}, threshold {report.threshold})"
        )


@clean_app.command(
    "calibrate",
    help="""\
Compute per-language thresholds from reference text (FineWeb-2's method).

Measures every Gopher/FineWeb statistic on each reference document (good text in that
language) and sets each threshold at a tail quantile of the values: --quantile (0.95) for
rules that drop documents above a value, 1 - quantile for those that drop below one; the stop
words are the most widespread words. Writes a [lang.XX] table for `llmtk clean --config`
(stdout unless -o). See docs/clean.md.

[bold]Examples[/bold]

  llmtk clean calibrate --lang sw wiki-sw.jsonl -o sw.toml

  llmtk clean --config sw.toml crawl-sw.jsonl > clean-sw.jsonl

Exit status: 0 success, 1 data or runtime error, 2 bad usage.
""",
)
@configs.keys_are_flags
def calibrate(
    inputs: Annotated[list[str], typer.Argument(help="Reference documents (files, dirs, globs).")],
    lang: Annotated[str, typer.Option("--lang", help="The reference text's language (ISO "
                                      "code, as language ID names it).")],
    output: Annotated[str | None, typer.Option("-o", "--output", help="Where to write the "
                                               "TOML table \\[default: stdout].")] = None,
    quantile: Annotated[float, typer.Option("--quantile", help="Share of the reference "
                                            "documents each rule keeps.")] = 0.95,
    text_field: o.TextField = "text",
    quiet: o.Quiet = False,
) -> None:
    import os

    from llmtk.clean.calibrate import check_lang, measure, thresholds
    from llmtk.clean.config import lang_tables_toml
    from llmtk.io import expand_inputs, read_docs

    check_lang(lang)
    if not 0.5 <= quantile < 1.0:
        raise UsageError("--quantile: expected a number between 0.5 and 1")
    paths = expand_inputs(inputs)
    if output is not None and os.path.abspath(output) in {os.path.abspath(p) for p in paths}:
        raise UsageError(f"-o {output}: is also an input")
    stats = measure((d.text for d in read_docs(paths, text_field)), lang)
    table = thresholds(stats, lang, quantile)
    head = f"# llmtk clean calibrate --lang {lang} --quantile {quantile}; for llmtk clean --config"
    text = head + "\n" + "\n".join(lang_tables_toml({lang: table})).lstrip("\n") + "\n"
    if output is None:
        from llmtk.io.console import write_out

        write_out(sys.stdout, text)
    else:
        from llmtk.io.atomic import write_file_atomically

        write_file_atomically(output, text.encode("utf-8"))
    if not quiet:
        from llmtk.io.console import stderr_console

        stderr_console().print(f"llmtk clean calibrate: {stats.docs:,} reference documents "
                               f"({lang}) -> {output or 'stdout'}")


def register(app: typer.Typer) -> None:
    app.add_typer(clean_app, name="clean")
