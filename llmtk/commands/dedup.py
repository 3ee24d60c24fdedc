"""`llmtk dedup`: drop exact and MinHash near-duplicate documents.

`llmtk dedup FILE` does the whole job in one process. The scale-out stages are
subcommands (`signatures`, `buckets`, `clusters`, `filter`); a small click group sends any
first argument that is not a stage name to the hidden default command, so the
plain form needs no subcommand and its --help is the main help.
"""

from typing import Annotated

import typer

from llmtk.commands import configs, groups
from llmtk.commands import options as o
from llmtk.dedup.config import DedupConfig
from llmtk.errors import UsageError
from llmtk.io import StreamOptions, StreamRun

SUMMARY = "Drop exact and MinHash near-duplicate documents."
STAGES = ("signatures", "buckets", "clusters", "filter")

HELP = f"""\
{SUMMARY}

Keeps the first document of each cluster, in input order, and drops the rest
(to --rejects with llmtk.dup_of and llmtk.reason dedup.exact or dedup.minhash).
Exact duplicates share their normalised text; near-duplicates share an LSH band
of their MinHash signatures (word 5-grams, character 5-grams for CJK, 16 bands
x 7 rows, each candidate verified on its signature: about Jaccard 0.67 and up).
It streams: each document is written as soon as it is known to be the first of
its cluster.

[bold]Examples[/bold]

  zstdcat crawl.jsonl.zst | llmtk clean | llmtk dedup > unique.jsonl

  llmtk dedup web/ -o web.dedup.jsonl.zst --rejects dups.jsonl.zst --workers 8

  llmtk dedup new.jsonl --index old-idx/ --save-index new-idx/ \\
    -o new.dedup.jsonl

  llmtk dedup pages.jsonl --level paragraph --max-repeats 1 > no-footers.jsonl

[bold]Scale-out[/bold] (job arrays over a shared filesystem, same result as one process;
--keep first only)

  llmtk dedup signatures crawl/ --shard $K/$N -o work/sigs/

  llmtk dedup buckets work/sigs/ --shard $K/$M -o work/buckets/

  llmtk dedup clusters work/buckets/ -o work/clusters/

  llmtk dedup filter crawl/ --index work/clusters/ --shard $K/$N \\
    -o out/$K.jsonl.zst

See `llmtk dedup signatures --help` (buckets, clusters, filter) for each stage.
"""

EPILOG = "Exit status: 0 success, 1 data or runtime error, 2 bad usage."

PARAMS = "MinHash parameters"

NGram = Annotated[int, typer.Option("--ngram", help="Shingle size: tokens per n-gram.",
                                    rich_help_panel=PARAMS)]
Unit = Annotated[str, typer.Option(
    "--unit", help="Shingle tokens: word, char, auto (char for CJK text, else word), or code "
    "(identifiers, numbers and operators; punctuation is then kept).",
    rich_help_panel=PARAMS)]
Bands = Annotated[int | None, typer.Option(
    "--bands", help="LSH bands \\[default: 16].", rich_help_panel=PARAMS, show_default=False)]
Rows = Annotated[int | None, typer.Option(
    "--rows", help="MinHash values per band \\[default: 7].", rich_help_panel=PARAMS,
    show_default=False)]
Threshold = Annotated[float | None, typer.Option(
    "--threshold", help="Target Jaccard similarity: picks --bands x --rows (<= 112 "
    "permutations) for you.", rich_help_panel=PARAMS, show_default=False)]
Normalise = Annotated[str, typer.Option(
    "--normalise", help="Before hashing: any of lowercase,whitespace,punctuation,digits, "
    "or none.", rich_help_panel=PARAMS)]
Verify = Annotated[float | None, typer.Option(
    "--verify", help="Also require this estimated Jaccard similarity (from the full signature) "
    "for a band match to count \\[default: 0.5; with --threshold T: T - 0.3]; 0 accepts every "
    "band match, as datatrove does.", rich_help_panel=PARAMS, show_default=False)]
Seed = Annotated[int, typer.Option("--seed", help="Seed of the MinHash permutations.",
                                   rich_help_panel=PARAMS)]
Annotate = Annotated[bool, typer.Option(
    "--annotate", help="Keep duplicates, marked with llmtk.dup_of and llmtk.dup_reason.")]
Clusters = Annotated[str | None, typer.Option(
    "--clusters", help="Write cluster membership here: one {id, cluster, reason} line per "
    "member of each cluster that has duplicates.")]


def _config(ngram, unit, bands, rows, threshold, seed, normalise, verify=None):
    """The checked DedupConfig of the MinHash options (its keys are the flag names)."""
    from llmtk.dedup.config import DedupConfig, auto_verify, bands_rows_for, parse_normalise

    with configs.flags_for(configs.dashed):
        if threshold is not None:
            if bands is not None or rows is not None:
                raise UsageError("--threshold picks --bands and --rows: give one or the other")
            bands, rows = bands_rows_for(threshold)
        default = DedupConfig()
        config = DedupConfig(ngram=ngram, unit=unit,
                             bands=default.bands if bands is None else bands,
                             rows=default.rows if rows is None else rows, seed=seed,
                             normalise=parse_normalise(normalise),
                             verify=auto_verify(threshold) if verify is None else verify)
        config.validate()
    return config


MINHASH_OPTIONS: dict[str, tuple[object, object]] = {
    "ngram": (NGram, 5),
    "unit": (Unit, "auto"),
    "bands": (Bands, None),
    "rows": (Rows, None),
    "threshold": (Threshold, None),
    "normalise": (Normalise, "lowercase,whitespace,punctuation,digits"),
    "verify": (Verify, None),
    "seed": (Seed, 1),
}
# `@minhash_options()`: the shingling and LSH parameters, handed over as `config`.
minhash_options = o.option_bundle("config", MINHASH_OPTIONS, _config)


@configs.keys_are_flags
@o.stream_command()
@minhash_options()
def run_command(
    level: Annotated[o.choice("Level", "doc", "paragraph"), typer.Option(
        "--level", help="doc: drop duplicate documents; paragraph: remove repeated lines "
        "across documents.")] = "doc",
    keep: Annotated[o.choice("Keep", "first", "longest"), typer.Option(
        "--keep", help="Which document of a cluster stays: first (streaming) or longest "
        "(reads all input first).")] = "first",
    max_repeats: Annotated[int, typer.Option(
        "--max-repeats", min=1, help="--level paragraph: keep this many occurrences of a "
        "line; remove later ones.")] = 1,
    annotate: Annotate = False,
    clusters: Clusters = None,
    index: Annotated[str | None, typer.Option(
        "--index", help="Deduplicate against this saved index too (from --save-index).")] = None,
    save_index: Annotated[str | None, typer.Option(
        "--save-index", help="Save the index (with --index's documents) to this folder.")] = None,
    *,
    config: DedupConfig,
    stream: StreamOptions,
) -> None:
    if level == "paragraph" and (index or save_index or clusters or keep != "first"):
        raise UsageError("--level paragraph does not take --index, --save-index, --clusters "
                         "or --keep")
    workers = stream.workers
    with StreamRun("dedup", stream, inputs_also=[index] if index else [],
                   outputs_also=[("--clusters", clusters)],
                   output_dirs=[("--save-index", save_index)]) as run:
        if level == "paragraph":
            from llmtk.dedup.paragraph import dedup_paragraphs

            dedup_paragraphs(run, config.normalise, max_repeats, annotate, workers)
            return
        from llmtk.dedup.stream import DedupOptions, dedup_stream

        dedup_stream(run, DedupOptions(config=config, keep=keep, annotate=annotate,
                                       clusters=clusters, index=index, save_index=save_index,
                                       workers=workers))


SIG_HELP = """\
Stage 1 of 4: MinHash signatures of one task's input files.

Task K of N takes its own whole files (a contiguous, size-balanced run of the
sorted input list) and writes OUT/part-K-of-N/: per LSH band, and for the
exact-text key, its (key, document) pairs sorted by key, in runs of 2^20
documents; the ids; --verify's low bytes. OUT/meta.json records the MinHash
options, the task count and the input list; a task with other ones is
refused. A finished task leaves OUT/part-K-of-N.done and a rerun skips it.

[bold]Examples[/bold]

  llmtk dedup signatures crawl/ --shard $SLURM_ARRAY_TASK_ID/64 -o work/sigs/

  llmtk dedup signatures crawl/ -o work/sigs/ --workers 16 --threshold 0.8
"""


@configs.keys_are_flags
@o.stream_command(without=("output", "compress"))
@minhash_options()
def signatures_command(
    out_dir: Annotated[str, typer.Option("-o", "--output", help="Folder for the signatures.",
                                         show_default=False)] = ...,  # type: ignore[assignment]
    *,
    config: DedupConfig,
    stream: StreamOptions,
) -> None:
    from llmtk.dedup.stages import write_signatures

    with StreamRun("dedup signatures", stream, output_dirs=[("-o", out_dir)]) as run:
        write_signatures(run, config, out_dir, stream.workers)


BUCKETS_HELP = """\
Stage 2 of 4: duplicate edges, for a share of the (band, key range) units.

The units are every LSH band and the exact key, each cut into R key ranges
(R = ceil(M / (bands + 1))); task K of M takes the units u with u % M == K.
A unit merges the sorted runs of all signature tasks a window at a time and
writes OUT/edges-bBBB-rRRRRR-of-RRRRR.npz: each document that shares a key with
an earlier one, and that key's first document. Memory: one window (~100 MB),
whatever the corpus size. Needs every signature task to be finished.

[bold]Examples[/bold]

  llmtk dedup buckets work/sigs/ --shard $SLURM_ARRAY_TASK_ID/60 \\
    -o work/buckets/

  llmtk dedup buckets work/sigs/ -o work/buckets/
"""


@configs.keys_are_flags
def buckets_command(
    sigs: Annotated[str, typer.Argument(help="Folder written by `llmtk dedup signatures`.",
                                        show_default=False)],
    out_dir: Annotated[str, typer.Option("-o", "--output", help="Folder for the edges.",
                                         show_default=False)] = ...,  # type: ignore[assignment]
    shard: Annotated[str | None, typer.Option(
        "--shard", help="K/M: do the units u with u % M == K.")] = None,
    quiet: o.Quiet = False,
) -> None:
    import sys

    from llmtk.dedup.stages import build_buckets
    from llmtk.io.paths import check_paths, input_identities

    check_paths(input_identities([], [sigs]), [], [("-o", out_dir)])
    n = build_buckets(sigs, out_dir, o.parse_shard(shard))
    if not quiet:
        print(f"llmtk dedup buckets: {n:,} duplicate edges -> {out_dir}", file=sys.stderr)


CLUSTERS_HELP = """\
Stage 3 of 4: resolve the clusters over the duplicate edges only.

Each document with an edge gets its parent (its exact match, else its
earliest band match) and its root (the first document of its cluster), as
`llmtk dedup` does. Writes OUT/remove-part-K-of-N.npz per signature task:
its documents to remove, sorted, with dup_of. Memory: the edges, not the
corpus. Needs every bucket task to be finished.

[bold]Examples[/bold]

  llmtk dedup clusters work/buckets/ -o work/clusters/
"""


@configs.keys_are_flags
def clusters_command(
    buckets: Annotated[str, typer.Argument(help="Folder written by `llmtk dedup buckets`.",
                                           show_default=False)],
    out_dir: Annotated[str, typer.Option("-o", "--output", help="Folder for the remove lists.",
                                         show_default=False)] = ...,  # type: ignore[assignment]
    quiet: o.Quiet = False,
) -> None:
    import sys

    from llmtk.dedup.stages import build_clusters

    n = build_clusters(buckets, out_dir)
    if not quiet:
        print(f"llmtk dedup clusters: {n:,} duplicates -> {out_dir}", file=sys.stderr)


FILTER_HELP = """\
Stage 4 of 4: write one task's documents that are not duplicates.

Reads the same inputs as the signatures stage (any --shard split) and only the
remove lists of its own files; the tasks' outputs concatenated in K order
equal `llmtk dedup`'s output byte for byte, and so do --rejects, --annotate
and --clusters.

[bold]Examples[/bold]

  llmtk dedup filter crawl/ --index work/clusters/ --shard $K/64 \\
    -o out/$K.jsonl.zst

  llmtk dedup filter crawl/ --index work/clusters/ --rejects dups.jsonl \\
    > unique.jsonl
"""


@configs.keys_are_flags
@o.stream_command(without=("workers",))
def filter_command(
    index: Annotated[str, typer.Option("--index", help="Folder written by `llmtk dedup "
                                       "clusters`.", show_default=False)] = ...,  # type: ignore[assignment]
    annotate: Annotate = False,
    clusters: Clusters = None,
    *,
    stream: StreamOptions,
) -> None:
    from llmtk.dedup.stages import filter_with_clusters

    with StreamRun("dedup", stream, inputs_also=[index],
                   outputs_also=[("--clusters", clusters)]) as run:
        filter_with_clusters(run, index, annotate, clusters)


def register(app: typer.Typer) -> None:
    group = groups.group(help=HELP, short_help=SUMMARY, epilog=EPILOG)
    groups.main(group, help=HELP, epilog=EPILOG)(run_command)
    group.command("signatures", help=SIG_HELP, epilog=EPILOG)(signatures_command)
    group.command("buckets", help=BUCKETS_HELP, epilog=EPILOG)(buckets_command)
    group.command("clusters", help=CLUSTERS_HELP, epilog=EPILOG)(clusters_command)
    group.command("filter", help=FILTER_HELP, epilog=EPILOG)(filter_command)
    app.add_typer(group, name="dedup")
