"""`llmtk clean`: normalise, language-ID, quality-filter and PII-scrub a document stream.

Thin: options -> `llmtk.clean.CleanConfig` -> `Cleaner` applied by `StreamRun.apply`, plus the
`train-quality` subcommand. `clean` is a command group whose own callback does the cleaning,
so `llmtk clean FILES --lang en` and `llmtk clean train-quality ...` both work.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from llmtk.commands import configs, groups
from llmtk.commands import options as o
from llmtk.errors import UsageError
from llmtk.io.run import StreamOptions

HELP = (
    "Normalise, language-ID, quality-filter and PII-scrub a document stream.\n\n"
    "Stages: URL filter -> main-content extraction from HTML (WARC responses, HTML "
    "documents; resiliparse or trafilatura, math and code kept) -> normalise (Unicode, "
    "mojibake, ANSI/control characters, whitespace, width) -> "
    "language ID (fastText lid.176 + script census) -> Gopher quality, Gopher repetition, C4 "
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


clean_app = groups.group(help=HELP, short_help=HELP.splitlines()[0])


def _split(value: str) -> list[str]:
    return [x.strip() for x in value.split(",") if x.strip()]


def _off(switch: bool) -> bool | None:
    """A `--no-X` switch: given, it sets the key to false; not given, it leaves it alone."""
    return False if switch else None


# Each stage option and the config key it sets, declared once: `stage_values` reads them in
# one loop, and a ConfigError on a key is worded with the flag (llmtk.commands.configs).
# parameter: (flag, config key, value from the flag's value; None: the value as it is)
SETTINGS: dict[str, tuple[str, str, object]] = {
    "no_normalize": ("--no-normalize", "normalize.enabled", _off),
    "unicode": ("--unicode", "normalize.unicode", None),
    "zh_convert": ("--zh-convert", "normalize.zh_convert", None),
    "extract": ("--extract", "extract.method", None),
    "url_blocklist": ("--url-blocklist", "url.blocklist", None),
    "url_patterns": ("--url-patterns", "url.patterns", None),
    "url_banned_words": ("--url-banned-words", "url.banned_words", None),
    "no_langid": ("--no-langid", "langid.enabled", _off),
    "no_lang_thresholds": ("--no-lang-thresholds", "langid.lang_thresholds", _off),
    "lang": ("--lang", "langid.keep", _split),
    "min_lang_score": ("--min-lang-score", "langid.min_score", None),
    "quality_model": ("--quality-model", "quality.model", None),
    "min_quality": ("--min-quality", "quality.min_score", None),
    "quality_label": ("--quality-label", "quality.label", None),
    "ppl_model": ("--ppl-model", "perplexity.model", None),
    "max_ppl": ("--max-ppl", "perplexity.max_ppl", None),
    "ppl_quantile": ("--ppl-quantile", "perplexity.quantile", None),
    "pii": ("--pii", "pii.enabled", None),
    "profile": ("--profile", "code.profile", None),
    "secrets": ("--secrets", "secrets.scrub", None),
}
FILTER_NAMES = ("gopher_repetition", "gopher_quality", "c4", "fineweb")
FLAGS = {key: flag for flag, key, _ in SETTINGS.values()} | {
    f"{name}.enabled": "--filters" for name in FILTER_NAMES}


def stage_values(given: dict[str, object], filters: str | None) -> dict[str, object]:
    """{config key: value} of the stage options that were given (not None)."""
    values = {}
    for param, (_flag, key, convert) in SETTINGS.items():
        value = given[param]
        if value is not None and callable(convert):
            value = convert(value)
        if value is not None:
            values[key] = value
    if filters is not None:
        chosen = _split(filters)
        if chosen == ["none"]:
            chosen = []
        unknown = set(chosen) - set(FILTER_NAMES)
        if unknown:
            raise UsageError(f"--filters: unknown filter(s) {sorted(unknown)}; "
                             f"choose from {', '.join(FILTER_NAMES)} or none")
        values.update({f"{name}.enabled": name in chosen for name in FILTER_NAMES})
    return values


@groups.main(clean_app, help=HELP)
@o.stream_command()
def clean(
    config: Annotated[
        str | None,
        typer.Option("--config", help="TOML file with stage settings (see --print-config).",
                     rich_help_panel=STAGES),
    ] = None,
    print_config: Annotated[
        bool,
        typer.Option("--print-config", help="Print the effective configuration as TOML and exit.",
                     rich_help_panel=STAGES),
    ] = False,
    lang: Annotated[
        str | None,
        typer.Option("--lang", help="Keep only these languages (ISO codes, comma-separated).",
                     rich_help_panel=STAGES),
    ] = None,
    min_lang_score: Annotated[
        float | None,
        typer.Option("--min-lang-score", help="With --lang: drop documents whose language "
                     "score is below this \\[default: 0.65].", rich_help_panel=STAGES),
    ] = None,
    no_langid: Annotated[
        bool,
        typer.Option("--no-langid", help="Skip language ID (filters then pick CJK rules from "
                     "the script alone).", rich_help_panel=STAGES),
    ] = False,
    no_lang_thresholds: Annotated[
        bool,
        typer.Option("--no-lang-thresholds", help="Use the global thresholds for every "
                     "language, not the built-in per-language ones (FineWeb-2's).",
                     rich_help_panel=STAGES),
    ] = False,
    filters: Annotated[
        str | None,
        typer.Option("--filters", help="Heuristic filters to run: any of gopher_repetition, "
                     "gopher_quality, c4, fineweb, comma-separated, or none \\[default: all].",
                     rich_help_panel=STAGES),
    ] = None,
    unicode: Annotated[
        str | None,
        typer.Option("--unicode", help="Unicode normal form: nfc, nfkc or none \\[default: nfc].",
                     rich_help_panel=STAGES),
    ] = None,
    no_normalize: Annotated[
        bool,
        typer.Option("--no-normalize", help="Skip normalisation entirely.", rich_help_panel=STAGES),
    ] = False,
    zh_convert: Annotated[
        str | None,
        typer.Option("--zh-convert", help="Convert Chinese script with OpenCC: t2s or s2t.",
                     rich_help_panel=STAGES),
    ] = None,
    extract: Annotated[
        str | None,
        typer.Option("--extract", help="Main-content extractor for HTML records (WARC "
                     "responses, documents that are HTML pages): resiliparse, trafilatura or "
                     "none \\[default: resiliparse].", rich_help_panel=STAGES),
    ] = None,
    url_blocklist: Annotated[
        str | None,
        typer.Option("--url-blocklist", help="File of blocked domains (subdomains match too) "
                     "or URL prefixes, one a line: url.blocked_domain.", rich_help_panel=STAGES),
    ] = None,
    url_patterns: Annotated[
        str | None,
        typer.Option("--url-patterns", help="File of URL substrings (or re:REGEX), one a "
                     "line: url.blocked_pattern.", rich_help_panel=STAGES),
    ] = None,
    url_banned_words: Annotated[
        str | None,
        typer.Option("--url-banned-words", help="File of words, one a line; a URL holding "
                     "one as a word is dropped (FineWeb's rule): url.banned_word.",
                     rich_help_panel=STAGES),
    ] = None,
    quality_model: Annotated[
        str | None,
        typer.Option("--quality-model", help="fastText classifier to score documents with.",
                     rich_help_panel=STAGES),
    ] = None,
    min_quality: Annotated[
        float | None,
        typer.Option("--min-quality", help="Drop documents whose classifier score is below "
                     "this \\[default: 0.5].", rich_help_panel=STAGES),
    ] = None,
    quality_label: Annotated[
        str | None,
        typer.Option("--quality-label", help="The classifier's positive label \\[default: hq].",
                     rich_help_panel=STAGES),
    ] = None,
    ppl_model: Annotated[
        str | None,
        typer.Option("--ppl-model", help="The model to score perplexity with: an llmtk train run, "
                     "checkpoint (full or sharded) or export, or hf:PATH.", rich_help_panel=STAGES),
    ] = None,
    max_ppl: Annotated[
        float | None,
        typer.Option("--max-ppl", help="With --ppl-model: drop documents above this perplexity.",
                     rich_help_panel=STAGES),
    ] = None,
    ppl_quantile: Annotated[
        float | None,
        typer.Option("--ppl-quantile", help="With --ppl-model: drop documents above this "
                     "quantile of the input's perplexities (e.g. 0.9; reads the input twice).",
                     rich_help_panel=STAGES),
    ] = None,
    pii: Annotated[
        bool | None,
        typer.Option("--pii/--no-pii", help="Replace e-mails, phones, ID and card numbers, IPs "
                     "with placeholders \\[default: on].", show_default=False,
                     rich_help_panel=STAGES),
    ] = None,
    profile: Annotated[
        str | None,
        typer.Option("--profile", help="What the records are: web (prose), code (source "
                     "files: language from the lang field, the path's extension or a #! line; "
                     "code rules instead of the prose ones) or auto (code when lang or path "
                     "names a programming language) \\[default: web].", rich_help_panel=STAGES),
    ] = None,
    secrets: Annotated[
        str | None,
        typer.Option("--secrets", help="Replace private keys, API tokens and passwords in "
                     "URLs and connection strings with placeholders in: code (code records), "
                     "all, or off \\[default: code].", rich_help_panel=STAGES),
    ] = None,
    annotate: Annotated[
        bool,
        typer.Option("--annotate", help="Add llmtk.lang, llmtk.lang_score, llmtk.quality and "
                     "per-filter values to each written record.", rich_help_panel=STAGES),
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Drop and change nothing; count what would be dropped "
                     "(with --annotate: llmtk.reason).", rich_help_panel=STAGES),
    ] = False,
    *,
    stream: StreamOptions,
) -> None:
    values = stage_values({p: v for p, v in locals().items() if p in SETTINGS}, filters)
    # From here on a ConfigError (a bad key, from the config or a stage loading its model)
    # reaches the user as the flag that set the key, or as `FILE: key`.
    with configs.flags_for(FLAGS, values.keys(), config):
        _clean(config, values, print_config, annotate, dry_run, stream)


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
    models = [m for m in (cfg.quality.model, cfg.perplexity.model, config) if m]
    run = StreamRun("clean", opts, inputs_also=models)  # paths checked before reading
    cleaner = Cleaner(cfg, annotate=annotate, dry_run=dry_run)
    cleaner.load()
    with run:
        if cfg.perplexity.quantile is not None:
            if run.paths == ["-"] or "-" in run.paths:
                raise UsageError("--ppl-quantile reads the input twice: give files, not stdin")
            from llmtk.clean.pipeline import perplexity_threshold
            from llmtk.io import read_docs

            # run.paths are this task's own files already; stdin is refused above
            first_pass = read_docs(run.paths, opts.text_field, lambda bad: None,
                                   run.record_shard, max_record=opts.max_record_bytes)
            cleaner.max_ppl = perplexity_threshold(cleaner, first_pass, cfg.perplexity.quantile,
                                                   opts.workers)
            if not opts.quiet:
                from llmtk.io.console import stderr_console

                q = cfg.perplexity.quantile
                stderr_console().print(
                    f"llmtk clean: perplexity threshold (quantile {q}): {cleaner.max_ppl:.3f}"
                )
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
