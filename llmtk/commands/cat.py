"""`llmtk cat`: pass records through the I/O layer: validate, shard, recompress.

A plumbing command (listed under "Plumbing" in the main help): it reads any mix
of JSON Lines (plain, zstd, gzip, xz, bzip2), Parquet and web archives
(WARC/ARC/WET), checks every record, and writes the records unchanged. It is
the I/O layer on its own, which makes it the reference for tests and for
`benchmarks/io_throughput.py`.
"""

import typer

from llmtk.commands import configs
from llmtk.commands import options as o
from llmtk.io import Doc, StreamOptions, StreamRun

HELP = """\
Pass records through unchanged: validate, shard, split, recompress.

[bold]Examples[/bold]

  cat a.jsonl.zst b.jsonl.gz | llmtk cat -o all.jsonl.zst

  llmtk cat crawl/ --shard 3/16 -o part-3.jsonl.zst

  llmtk cat dirty.jsonl --on-error reject --rejects bad.jsonl > good.jsonl

  llmtk cat crawl.warc.gz --on-error skip | head -1
"""


def _keep(doc: Doc) -> None:
    return None


@configs.keys_are_flags
@o.stream_command()
def command(*, stream: StreamOptions) -> None:
    with StreamRun("cat", stream) as run:
        if stream.workers > 1:
            run.apply(_keep)
        else:
            for doc in run.docs():
                run.write(doc)


EPILOG = "Exit status: 0 success, 1 bad input data (FILE:LINE), 2 bad usage."


def register(app: typer.Typer) -> None:
    app.command(name="cat", help=HELP, epilog=EPILOG, rich_help_panel=o.PLUMBING_PANEL)(command)
