"""`llmtk stats merge`: add up the --stats (or contam-check --report) files of a job array."""

from typing import Annotated

import typer

from llmtk.commands import options as o

SUMMARY = "Merge the --stats files of a job array's tasks into one."

MERGE_HELP = f"""\
{SUMMARY}

Counts add, key by key (records in/out, dropped and bad lines per reason,
bytes, seconds of process time), so the merged file equals the --stats of
one process over the same input. contam-check --report files merge too: the
matched n-grams of every evaluation item are united and its coverage and
class recomputed, so the merged report equals the single run's.

[bold]Examples[/bold]

  llmtk stats merge stats/clean-*.json > clean.stats.json

  llmtk stats merge reports/contam-*.json -o contam.report.json
"""

EPILOG = "Exit status: 0 success, 1 unreadable file, 2 files that do not merge."


def merge_command(
    files: Annotated[list[str], typer.Argument(help="--stats (or --report) JSON files.",
                                               show_default=False)],
    output: o.Output = None,
) -> None:
    import orjson

    from llmtk.errors import DataError
    from llmtk.io import Sink
    from llmtk.io.summary import merge_stats

    parts = []
    for path in files:
        try:
            with open(path, "rb") as f:
                parts.append(orjson.loads(f.read()))
        except OSError as e:
            raise DataError(f"{path}: cannot read: {e.strerror}") from None
        except orjson.JSONDecodeError as e:
            raise DataError(f"{path}: not JSON ({e})") from None
    if parts and all(isinstance(p, dict) and "dirty_threshold" in p for p in parts):
        from llmtk.contam.report import merge_reports

        merged = merge_reports(parts, files)
    else:
        merged = merge_stats(parts, files)
    options = orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE
    sink = Sink(output, "plain")
    try:
        sink.write(orjson.dumps(merged, option=options))
        sink.commit()
    except BaseException:
        sink.abort()
        raise


def register(app: typer.Typer) -> None:
    group = typer.Typer(help=SUMMARY, short_help=SUMMARY, add_completion=False,
                        rich_markup_mode="rich",
                        context_settings={"help_option_names": ["-h", "--help"]})
    group.command("merge", help=MERGE_HELP, epilog=EPILOG)(merge_command)
    # Plumbing beside the tools (with `cat` and `run`): documented in docs/cluster.md.
    app.add_typer(group, name="stats", rich_help_panel=o.PLUMBING_PANEL)
