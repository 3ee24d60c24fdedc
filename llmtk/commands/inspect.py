"""`llmtk inspect`: what a corpus holds, in one streaming pass, with a report to look at.

`llmtk inspect DATA` reads the corpus once (llmtk.inspect.scan); `llmtk inspect merge
PARTS` adds up the `--shard K/N -o PART.json` parts of a job array. A small click group
sends any first argument that is not `merge` to the hidden default command.
"""

import dataclasses
import sys
from typing import Annotated

import typer

from llmtk.commands import configs, groups
from llmtk.commands import options as o
from llmtk.errors import UsageError
from llmtk.io import StreamOptions, StreamRun

SUMMARY = "What a corpus holds before training, in one pass."

HELP = f"""\
{SUMMARY}

Duplicates (the shares `llmtk dedup` would drop, from its own keys and
signatures), languages (clean's language ID), broken documents (HTML left in
the text, mojibake, replacement and control characters, very long lines,
near-empty documents, each with an example), personal data and secrets (the
rules clean scrubs with), sources (--by FIELD; a URL field counts by host),
and lengths in characters, words and tokens. A summary goes to stderr, --json
prints the numbers, --report draws them on one self-contained HTML page.

[bold]Examples[/bold]

  llmtk inspect crawl/ --by source --report crawl.html

  zstdcat web.jsonl.zst | llmtk inspect --by url --json > web.inspect.json

  llmtk inspect data.parquet --tokenizer tokenizer.json --sample 0.1

[bold]Scale-out[/bold] (job arrays; the merge gives the numbers of one pass)

  llmtk inspect crawl/ --shard $K/$N -o parts/$K.json -q

  llmtk inspect merge parts/*.json --json --report crawl.html
"""

EPILOG = "Exit status: 0 success, 1 data or runtime error, 2 bad usage."

By = Annotated[str | None, typer.Option(
    "--by", help="Count sources by this field (e.g. source, lang); a URL field (url, or any "
    "value with ://) counts by host; lang without the field: the detected language.",
    show_default=False)]
Sample = Annotated[str | None, typer.Option(
    "--sample", help="Look at part of the input: a fraction (0.1: documents picked by a "
    "stable hash) or a count (1000: the first documents). Duplicate shares are then those "
    "within the sample.", show_default=False)]
Tokenizer = Annotated[str | None, typer.Option(
    "--tokenizer", help="Count tokens with this tokenizer.json (default: UTF-8 bytes, "
    "llmtk's byte-level tokenizer).", show_default=False)]
Report = Annotated[str | None, typer.Option(
    "--report", help="Write a self-contained HTML page with the tables and plots.",
    show_default=False)]
Json = Annotated[bool, typer.Option("--json", help="Print the numbers as JSON on stdout.")]
Quality = Annotated[bool, typer.Option(
    "--quality", help="Also run clean's default rules, dry, and show the share each would "
    "drop (costs about one `llmtk clean --dry-run` more).")]
Part = Annotated[str | None, typer.Option(
    "-o", "--output", help="Write the mergeable profile (its numbers and sketches) here: "
    "a part for `llmtk inspect merge`. With --shard, PART.done marks a finished task.",
    show_default=False)]


def _sample(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        x = float(value)
    except ValueError:
        raise UsageError(f"--sample: expected a fraction or a count, got {value!r}") from None
    if not (0 < x < 1 or (x >= 1 and x == int(x))):
        raise UsageError(f"--sample: expected a fraction in (0, 1) or a whole count, "
                         f"got {value!r}")
    return x


@configs.keys_are_flags
@o.stream_command(without=("output", "compress", "workers"))
def run_command(
    by: By = None,
    sample: Sample = None,
    tokenizer: Tokenizer = None,
    json_out: Json = False,
    report: Report = None,
    quality: Quality = False,
    output: Part = None,
    *,
    stream: StreamOptions,
) -> None:
    from llmtk.inspect.scan import Settings, scan
    from llmtk.text.langid import LanguageId
    from llmtk.text.tokenizer import load_tokenizer

    fraction = _sample(sample)
    tok = load_tokenizer(tokenizer) if tokenizer else None
    if output == "-" and json_out:
        raise UsageError("-o - and --json both write to stdout: give -o a file")
    settings = Settings(by=by, tokenizer=tok.fingerprint() if tok else "bytes", sample=fraction,
                        quality=quality)
    langid = LanguageId()
    langid.load()
    cleaner = None
    if quality:
        from llmtk.clean.config import CleanConfig
        from llmtk.clean.pipeline import Cleaner

        cleaner = Cleaner(CleanConfig(), dry_run=True)
        cleaner.load()
    stream = dataclasses.replace(stream, output=output)
    _keep_freed_memory()
    with StreamRun("inspect", stream, outputs_also=[("--report", report)]) as run:
        profile = scan(run, settings, tokenizer=tok, langid=langid, sample=fraction,
                       cleaner=cleaner)
        result = _finish(profile, run, report)
    _show(result, json_out, stream.quiet)


def _keep_freed_memory() -> None:
    """Have glibc keep freed memory for the next batch instead of handing it back.

    Every batch allocates ~10 MB of numpy temporaries (dedup's normaliser and signature
    blocks); by default glibc maps the large ones afresh and trims the heap after them,
    so each batch faults its pages in again: ~75,000 page faults on the 4x benchmark
    corpus, ~25,000 with these two settings. Peak memory stays the same (the heap keeps
    at most 64 MiB it could have returned, which the next batch reuses). Setting only
    one of the two is worse than neither: each turns off glibc's own adjustment.
    Elsewhere than glibc, nothing changes."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl has it; others may not)
        return
    m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's malloc.h
    mallopt(m_mmap_threshold, 32 << 20)  # glibc's most: HEAP_MAX_SIZE / 2
    mallopt(m_trim_threshold, 64 << 20)


def _finish(profile, run, report):
    """The result; the part to -o and the page to --report, committed with the run."""
    from llmtk.io.atomic import json_bytes

    result = profile.result()
    if run.opts.output is not None:
        run.output.write(json_bytes({**profile.to_dict(), "result": result}))
    if report:
        from llmtk.inspect.report import render

        run.open_output(report, "plain").write(render(result).encode())
    return result


def _show(result: dict, json_out: bool, quiet: bool) -> None:
    if not quiet:
        from llmtk.inspect.report import print_summary
        from llmtk.io.console import stderr_console

        print_summary(result, stderr_console())
    if json_out:
        from llmtk.io.console import write_json

        write_json(sys.stdout, result)


MERGE_HELP = """\
Merge the --shard parts of a job array into the numbers of one pass.

Every part of the array must be there, once, made with the same options and
input list. Counts and histograms add; the duplicate sketches merge into
what one pass over all the input holds.

[bold]Examples[/bold]

  llmtk inspect merge parts/*.json --json > corpus.inspect.json

  llmtk inspect merge parts/*.json --report corpus.html -o corpus.part.json
"""


@configs.keys_are_flags
def merge_command(
    parts: Annotated[list[str], typer.Argument(help="Part files (inspect --shard K/N -o).",
                                               show_default=False)],
    json_out: Json = False,
    report: Report = None,
    output: Annotated[str | None, typer.Option(
        "-o", "--output", help="Write the merged profile here (itself a part).",
        show_default=False)] = None,
    quiet: o.Quiet = False,
) -> None:
    import orjson

    from llmtk.errors import DataError
    from llmtk.inspect.report import render
    from llmtk.inspect.scan import merge
    from llmtk.io.atomic import json_bytes, write_file_atomically
    from llmtk.io.paths import check_paths, input_identities

    check_paths(input_identities(list(parts), []), [("-o", output), ("--report", report)], [])

    def read(path: str) -> tuple[str, dict]:
        try:
            with open(path, "rb") as f:
                return path, orjson.loads(f.read())
        except OSError as e:
            raise DataError(f"{path}: cannot read: {e.strerror}") from None
        except orjson.JSONDecodeError as e:
            raise DataError(f"{path}: not JSON ({e})") from None

    profile = merge(read(path) for path in parts)  # one part in memory at a time
    result = profile.result()
    if output:
        write_file_atomically(output, json_bytes({**profile.to_dict(), "result": result}))
    if report:
        write_file_atomically(report, render(result).encode())
    _show(result, json_out, quiet)


def register(app: typer.Typer) -> None:
    group = groups.group(help=HELP, short_help=SUMMARY, epilog=EPILOG)
    groups.main(group, help=HELP, epilog=EPILOG)(run_command)
    group.command("merge", help=MERGE_HELP, epilog=EPILOG)(merge_command)
    app.add_typer(group, name="inspect")
