"""`llmtk contam-check`: find evaluation-set n-grams in training data; report, drop or annotate."""

from typing import Annotated

import typer

from llmtk.commands import configs
from llmtk.commands import options as o
from llmtk.io.run import StreamOptions

SUMMARY = "Find evaluation-set n-grams in training data; report, drop or annotate."

HELP = f"""\
{SUMMARY}

Training documents stream through (stdin/files to stdout/-o); every document
sharing an n-gram (default 13 words, GPT-3's rule) with an evaluation item is
counted, and dropped with --drop (or the matched words masked with --mask).
Each evaluation item gets its coverage (share of its words inside n-grams seen
in training) and a class: dirty >= 80%, clean < 20% (Llama 2's thresholds),
else partial; each eval file gets its dirty/partial/clean shares, as in the
Llama 2 and GPT-3 contamination tables.

Eval sets: JSONL, JSON arrays, CSV/TSV, Parquet, or a `datasets.save_to_disk`
folder. The benchmark is recognised by its fields (MMLU, GSM8K, HumanEval,
MBPP, HellaSwag, ARC, TriviaQA, NaturalQuestions, BoolQ, SQuAD, C-Eval,
CMMLU, chat messages, text) and its question text is checked; --eval-field
names the fields instead.

[bold]Examples[/bold]

  llmtk contam-check train.jsonl.zst --eval evals/ --drop \\
    -o train.clean.jsonl.zst

  zstdcat web.jsonl.zst \\
    | llmtk contam-check -e mmlu.jsonl --report-only --report r.json

  llmtk contam-check train.jsonl --eval gsm8k.jsonl --n 8 --dirty 0.7 \\
    --annotate > marked.jsonl
"""

EPILOG = ("Exit status: 0 no contamination (or it was removed with --drop or --mask), "
          "3 contaminated documents found and left in, 1 data error, 2 bad usage.")


@configs.keys_are_flags
@o.stream_command()
def command(
    eval_paths: Annotated[list[str], typer.Option(
        "--eval", "-e", metavar="PATH", help="Evaluation set (file, save_to_disk folder "
                                             "or directory), repeatable.")] = ...,
    eval_field: Annotated[str | None, typer.Option(
        "--eval-field", metavar="FIELDS",
        help="Field(s) of an eval record to check, comma-separated; a.b reaches inside "
             "(lists are joined). Default: by the benchmark's layout.")] = None,
    eval_id_field: Annotated[str, typer.Option(
        "--eval-id-field", metavar="FIELD",
        help="Field that names an eval item (default id; else FILE:LINE).")
    ] = "id",
    n: Annotated[int, typer.Option("--n", min=3, max=50,
                                   help="n-gram length in words (13 = GPT-3, 8 = PaLM).")] = 13,
    drop: Annotated[bool, typer.Option("--drop", help="Drop contaminated documents "
                                                      "(reason contam.ngram).")] = False,
    mask: Annotated[str | None, typer.Option(
        "--mask", help="Replace the matched word runs with this token (e.g. '<EVAL>') "
                       "instead of dropping the document.")] = None,
    annotate: Annotated[bool, typer.Option(
        "--annotate", help="Add llmtk.contaminated (and eval_ids) to every document.")] = False,
    report: Annotated[str | None, typer.Option(
        "--report", help="Write the per-item report as JSON.")] = None,
    report_only: Annotated[bool, typer.Option(
        "--report-only", help="Check and report; write no documents.")] = False,
    dirty: Annotated[float, typer.Option("--dirty", min=0.0, max=1.0,
                                         help="Coverage at or above which an item is dirty.")
                     ] = 0.8,
    clean: Annotated[float, typer.Option("--clean", min=0.0, max=1.0,
                                         help="Coverage below which an item is clean.")] = 0.2,
    *,
    stream: StreamOptions,
) -> None:
    from llmtk.contam.check import EvalIndex
    from llmtk.contam.evalsets import summary as eval_set_summary
    from llmtk.contam.run import build_report, check_stream, load_eval_items
    from llmtk.errors import UsageError
    from llmtk.io import StreamRun

    if clean > dirty:
        raise UsageError(f"--clean {clean} is above --dirty {dirty}")
    if drop and report_only:
        raise UsageError("--drop and --report-only contradict each other")
    if mask is not None and (drop or report_only):
        raise UsageError("--mask cannot be combined with --drop or --report-only")
    if mask == "":
        raise UsageError("--mask: give a token such as '<EVAL>'")
    if report_only and stream.output:
        raise UsageError("--report-only writes no documents: drop -o (or drop --report-only)")
    fields = [f.strip() for f in (eval_field or "").split(",") if f.strip()] or None
    # Paths are checked (no output is an input, --eval included) before anything is read.
    run = StreamRun("contam-check", stream, inputs_also=eval_paths,
                    outputs_also=[("--report", report)])
    sets: list = []
    index = EvalIndex(load_eval_items(eval_paths, fields, eval_id_field, n, sets), n)
    with run:
        found = check_stream(run, index, drop=drop, annotate=annotate, write=not report_only,
                             mask=mask)
        result = build_report(index, dirty, clean, found, run.summary.records_in,
                              stream.shard)
        result["eval_sets"] = eval_set_summary(sets, result["sources"])
        # Only counts that add across shards; the item classes are in the report.
        run.count("contaminated_docs", found)
        if report:
            run.write_json(report, result)
    if not stream.quiet:
        _print_eval_sets(result)
    if found and not drop and mask is None:
        raise typer.Exit(3)


def _print_eval_sets(result: dict) -> None:
    from rich.markup import escape

    from llmtk.io.console import stderr_console

    console = stderr_console()
    n = result["n"]
    for path, e in result["eval_sets"].items():
        # The shares are of the checkable items (Llama 2's and GPT-3's tables): say so, with
        # the count they are of, beside the items too short to hold one n-gram.
        checkable = e["items"] - e["too_short"]
        shares = ", ".join(f"{e[c]} {c} ({e[c + '_share'] * 100:.1f}%)"
                           for c in ("dirty", "partial", "clean"))
        line = (f"{path} ({e['layout']}: {', '.join(e['fields'])}): {e['items']} items, "
                f"{e['too_short']} too short to check (fewer than {n} words); of the "
                f"{checkable} checked: {shares}")
        console.print(escape(line), soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command(name="contam-check", help=HELP, short_help=SUMMARY, epilog=EPILOG)(command)
