"""`llmtk mix`: blend several sources by weight to a token budget."""

from typing import Annotated

import typer

from llmtk.commands import configs, groups
from llmtk.commands import options as o
from llmtk.io.run import StreamOptions

SUMMARY = "Blend several sources by weight to a token budget."

HELP = f"""\
{SUMMARY}

Counts every source's tokens (as the trainer will: tokenizer + one end-of-
document token), then writes each source's share of the budget: whole epochs
plus a seeded random subset when a source is smaller than its share, a seeded
subset when it is larger. Sources are interleaved evenly; the achieved mix is
reported on stderr and with --report.

With --shard K/N each task writes its own files' share of every source (the
plan is the single run's, from the token counts of all files): save the
counts once with --counts DIR --count-only (sharded too), and every task
reuses them instead of tokenizing what it will not write.

[bold]Examples[/bold]

  llmtk mix --source web=web.jsonl.zst:0.7 --source code=code/:0.3 \\
    --tokens 2e9 -o train.jsonl.zst

  llmtk mix -s en=en.jsonl:3 -s zh=zh.jsonl:1 --tokens 500M \\
    --report mix.json > train.jsonl

  llmtk mix -s old=old/:0.2 -s new=new/:0.8 --tokenizer tok.json \\
    --max-epochs 2 -o c.jsonl

  llmtk mix -s web=web/:0.7 -s code=code/:0.3 --counts work/counts \\
    --count-only --shard $K/$N

  llmtk mix -s web=web/:0.7 -s code=code/:0.3 --counts work/counts \\
    --shard $K/$N -o mix/$K.jsonl
"""

EPILOG = "Exit status: 0 success, 1 data error, 2 bad usage (e.g. a source too small)."


@configs.keys_are_flags
@o.stream_command(without=("inputs", "workers"))
def command(
    source: Annotated[list[str], typer.Option(
        "--source", "-s", help="NAME=PATH[:WEIGHT], repeatable; PATH is a file, directory or "
                               "glob; weights are normalised (default 1).")] = ...,
    tokens: Annotated[str | None, typer.Option(
        "--tokens", help="Token budget (2e9, 500M, 1.5B); default: all of the scarcest source "
                         "once.")] = None,
    tokenizer: Annotated[str, typer.Option(
        "--tokenizer", help="'bytes' (default) or a tokenizer.json file.")] = "bytes",
    max_epochs: Annotated[float, typer.Option(
        "--max-epochs", min=0.0, help="Refuse to repeat any source more often than this.")] = 4.0,
    report: Annotated[str | None, typer.Option(
        "--report", help="Write the achieved mix as JSON.")] = None,
    annotate: Annotated[bool, typer.Option(
        "--annotate", help="Add llmtk.source and llmtk.epoch to every document.")] = False,
    counts: Annotated[str | None, typer.Option(
        "--counts", help="Save the per-file token counts in this folder, and reuse those "
                         "already there (every shard of a job array reads the same).")] = None,
    count_only: Annotated[bool, typer.Option(
        "--count-only", help="Only count (into --counts; with --shard, this task's own "
                             "files); write no documents.")] = False,
    seed: o.Seed = 0,
    *,
    stream: StreamOptions,
) -> None:
    from llmtk.errors import UsageError
    from llmtk.io import StreamRun
    from llmtk.mix.plan import parse_source, plan
    from llmtk.mix.run import count_tokens, emit
    from llmtk.mix.run import report as build_report
    from llmtk.text.tokenizer import load_tokenizer
    from llmtk.units import parse_number

    sources = [parse_source(s) for s in source]
    names = [s.name for s in sources]
    if len(set(names)) != len(names):
        raise UsageError(f"--source: names must be unique, got {', '.join(names)}")
    budget = parse_number("--tokens", tokens)
    tok = load_tokenizer(tokenizer)
    if count_only and not counts:
        raise UsageError("--count-only needs --counts DIR (where the counts go)")
    stream.inputs = [s.spec for s in sources]
    if count_only:
        stream.output = None
    # Paths are checked (no output is a source or the tokenizer) before anything is read.
    run = StreamRun("mix", stream, inputs_also=[tokenizer] if tokenizer != "bytes" else [],
                    outputs_also=[("--report", report)])
    with run:
        for s in sources:
            count_tokens(run, s, tok, counts, stream.shard if count_only else None)
        if count_only:
            run.count("mix.counted_docs", sum(len(s.doc_tokens) - s.doc_tokens.count(0)
                                              for s in sources))
            return
        used = plan(sources, budget, max_epochs, seed)
        result = build_report(sources, emit(run, sources, annotate), used, tok)
        if report:
            run.write_json(report, result)
    if not stream.quiet:
        _print(result)


def _print(result: dict) -> None:
    from rich.table import Table

    from llmtk.io.console import stderr_console

    table = Table(title=f"achieved mix: {result['emitted_tokens']:,} tokens "
                        f"(budget {result['budget_tokens']:,})", title_justify="left")
    for col in ("source", "tokens", "share", "target", "emitted", "achieved", "epochs"):
        table.add_column(col, justify="left" if col == "source" else "right")
    for name, r in result["sources"].items():
        table.add_row(name, f"{r['tokens']:,}", f"{r['share']:.1%}", f"{r['target_tokens']:,}",
                      f"{r['emitted_tokens']:,}", f"{r['achieved_share']:.1%}",
                      f"{r['epochs']:.2f}")
    stderr_console().print(table)


SEARCH_SUMMARY = "Choose the mixture weights by small proxy trainings."

SEARCH_HELP = f"""\
{SEARCH_SUMMARY}

Samples K mixtures of token datasets (written by `llmtk train tokenize`):
the natural token shares, equal weights, then Dirichlet draws around the
natural shares spread over the simplex, within --min-weight/--max-weight and
so that no source is read more than --max-epochs times by one proxy. Each is
trained by `llmtk train` (the proxy's config with the trial's --data
NAME=DIR:W and --val-data) in SEARCH/trials/K/: --jobs at once here, or as a
Slurm job array or Ray tasks (--executor). The objective (the mean validation
loss, or --objective weights) is fitted as a function of the weights (a
log-linear mixing law, a quadratic ridge regression and, with the `mix` extra,
RegMix's LightGBM regression; the one with the lower leave-one-out error kept)
and the weights with the lowest predicted objective are written as
SEARCH/proposal.toml, with SEARCH/trials.jsonl and
SEARCH/search.png; --verify N then trains the proposal and N - 1 mixtures
near it. A rerun skips finished trials and redoes killed ones; a failed trial
is reported and left out.

[bold]Examples[/bold]

  llmtk mix search web=tokens/web code=tokens/code math=tokens/math \\
    --val tokens/target-val --trials 16 --config proxy.toml --out search/

  llmtk mix search web=tok/web code=tok/code --val code=tok/code-val \\
    --val web=tok/web-val --objective code=2,web=1 --min-weight code=0.1 \\
    --trials 12 --jobs 4 --config proxy.toml --out search/

  llmtk train --config search/proposal.toml --model 1b --out runs/big
"""

SEARCH_EPILOG = ("Exit status: 0 success (failed trials are reported and left out), 1 every "
                 "trial failed or a data error, 2 bad usage.")


@configs.keys_are_flags
def search_command(
    sources: Annotated[list[str], typer.Argument(
        help="NAME=DIR: the token datasets to mix (at least two).", show_default=False,
        metavar="NAME=DIR")],
    val: Annotated[list[str], typer.Option(
        "--val", help="[NAME=]DIR, repeatable: a token dataset of what the model must be good "
                      "at (a bare DIR is named after its folder).", show_default=False)] = ...,
    trials: Annotated[int, typer.Option(
        "--trials", "-k", min=1, help="K: how many mixtures to train.")] = 16,
    config: Annotated[str, typer.Option(
        "--config", help="The proxy: a `llmtk train --config` file (model shape, steps, "
                         "seq-len, batch-size, seed, ...).", show_default=False)] = ...,
    out: Annotated[str, typer.Option(
        "--out", help="The search folder (trials, trials.jsonl, proposal.toml, search.png).",
        show_default=False)] = ...,
    jobs: Annotated[int | None, typer.Option(
        "--jobs", "-j", min=1, help="Trials at once (default: this machine's CPUs over the "
                                    "proxy's threads).")] = None,
    objective: Annotated[str, typer.Option(
        "--objective", help="mean (of the validation losses) or NAME=W,NAME=W (weighted).")]
        = "mean",
    min_weight: Annotated[list[str] | None, typer.Option(
        "--min-weight", help="[NAME=]W, repeatable: a lower bound on the weight (of one source"
                             ", or of all); default 0.01: every source stays in.")] = None,
    max_weight: Annotated[list[str] | None, typer.Option(
        "--max-weight", help="[NAME=]W, repeatable: an upper bound on the weight.")] = None,
    max_epochs: Annotated[float, typer.Option(
        "--max-epochs", min=0.0, help="Cap each weight so that one proxy reads its source at "
                                      "most this many times.")] = 4.0,
    executor: Annotated[str, typer.Option(
        "--executor", help="local (processes here, --jobs at once), slurm (one job array, "
                           "sbatch --wait) or ray (Ray tasks).")] = "local",
    address: o.RayAddress = None,
    verify: Annotated[int, typer.Option(
        "--verify", min=0, help="Then train the proposal and N - 1 mixtures near it, and "
                                "report each measured objective beside its prediction.")]
        = 0,
    no_plot: Annotated[bool, typer.Option("--no-plot", help="Write no search.png.")] = False,
    seed: o.Seed = 0,
    quiet: o.Quiet = False,
) -> None:
    import os

    from llmtk.errors import UsageError
    from llmtk.io.console import stderr_console
    from llmtk.mix import search as S


    def log(message: str) -> None:
        if not quiet:
            stderr_console().print(f"llmtk mix search: {message}", markup=False)

    named = [S.parse_named("NAME=DIR", s) for s in sources]
    if len(named) < 2:
        raise UsageError("NAME=DIR: give at least two sources to mix")
    names = [n for n, _ in named]
    vals = [S.parse_named("--val", v, bare=True) for v in val]
    for option, given in (("NAME=DIR", names), ("--val", [n for n, _ in vals])):
        if len(set(given)) != len(given):
            raise UsageError(f"{option}: a name is given twice ({', '.join(given)})")
    _check_out(out, [p for _, p in named + vals])
    found = [S.Source(n, p, _dataset_tokens(n, p)) for n, p in named]
    proxy, params = _proxy(config, _vocab_size(named[0][1]))
    for n, p in vals:
        _dataset_tokens(f"--val {n}", p)
    lo, hi = S.bounds(found, S.parse_bounds("--min-weight", min_weight or [], names, 0.01),
                      S.parse_bounds("--max-weight", max_weight or [], names, 1.0),
                      proxy, max_epochs)
    jobs = jobs or max(1, (os.cpu_count() or 1) // proxy.threads)
    from llmtk.compute.flops import flops_6nd

    # what the search costs, by `llmtk estimate`'s formula (which prices it against the run)
    log(f"proxy: {params.total:,.0f} parameters, {proxy.budget:,} tokens; {trials} trials: "
        f"{flops_6nd(params.matmul, proxy.budget) * trials:.2g} FLOPs (against the target "
        f"run: llmtk estimate --model ... --search-trials {trials} --proxy {config})")
    outcome = S.search(found, vals, proxy, out, lo, hi, trials, seed, jobs, objective, log,
                       executor, verify, address)
    written = S.write_outputs(out, found, vals, outcome, objective, plot=not no_plot)
    if not quiet:
        _print_search(names, [n for n, _ in vals], outcome)
        log("wrote " + ", ".join(written))


def _proxy(path: str, vocab_size: int):
    """The proxy's steps, token budget and threads, from its `llmtk train --config` file,
    and its parameter counts (llmtk.compute's)."""
    from llmtk.commands.proxy import read_proxy
    from llmtk.compute.models import count_params, spec_from_config
    from llmtk.mix.search import Proxy

    run = read_proxy("--config", path, vocab_size)
    return (Proxy(path, run.values, run.steps, run.tokens, run.threads),
            count_params(spec_from_config(run.shape)))


def _check_out(out: str, inputs: list[str]) -> None:
    """The search folder is neither a dataset nor inside one (checked before any run)."""
    import os

    from llmtk.errors import UsageError

    where = os.path.realpath(out)
    for path in inputs:
        data = os.path.realpath(path)
        if where == data or where.startswith(data.rstrip(os.sep) + os.sep):
            raise UsageError(f"--out: {out} is the dataset {path} or inside it")


def _vocab_size(path: str) -> int:
    from llmtk.train.data.tokens import read_meta

    return read_meta(path)["vocab_size"]


def _dataset_tokens(name: str, path: str) -> int:
    from llmtk.errors import UsageError
    from llmtk.train.data.tokens import TokenDataset, is_dataset

    if not is_dataset(path):
        raise UsageError(f"{name}: {path} is not a token dataset (write one with `llmtk train "
                         "tokenize`)")
    return TokenDataset.open(path).tokens


def _print_search(names: list[str], val_names: list[str], outcome) -> None:
    from rich.table import Table

    from llmtk.io.console import stderr_console

    fit = outcome.fit
    table = Table(title=f"{len(outcome.rows)} trials, by objective"
                  + (f" ({len(outcome.failed)} failed, left out)" if outcome.failed else ""),
                  title_justify="left")
    # weights, then L(set): each validation loss; pred: the objective predicted by the fit
    # without that trial (with it, for the proposal)
    for col in ["trial", *names, *(f"L({n})" for n in val_names), "objective",
                *(["pred"] if fit else [])]:
        table.add_column(col, justify="right")
    for r in sorted(outcome.rows, key=lambda r: r["objective"]):
        table.add_row(str(r["trial"]), *(f"{r['weights'][n]:.3f}" for n in names),
                      *(f"{r[f'val/{n}/loss']:.4f}" for n in val_names),
                      f"{r['objective']:.4f}", *([f"{r['predicted']:.4f}"] if fit else []))
    if fit:
        table.add_row("proposal", *(f"{outcome.proposal[n]:.3f}" for n in names),
                      *("" for _ in val_names), "", f"{outcome.predicted:.4f}",
                      style="bold")
    for r in outcome.verified:  # trained after the fit: measured beside predicted
        table.add_row("verified" if r["proposal"] else f"near {r['trial']}",
                      *(f"{r['weights'][n]:.3f}" for n in names),
                      *(f"{r[f'val/{n}/loss']:.4f}" for n in val_names),
                      f"{r['objective']:.4f}", f"{r['predicted']:.4f}",
                      style="bold" if r["proposal"] else None)
    console = stderr_console()
    console.print(table)
    if fit:
        for name, s in fit.scores.items():
            console.print(f"  {name}: leave-one-out RMSE {s['loo_rmse']:.4f}, Spearman "
                          f"{s['spearman']:.3f}" + ("  (chosen)" if name == fit.name else ""),
                          markup=False)


def register(app: typer.Typer) -> None:
    group = groups.group(help=HELP, short_help=SUMMARY, epilog=EPILOG)
    groups.main(group, help=HELP, epilog=EPILOG)(command)
    group.command("search", help=SEARCH_HELP, short_help=SEARCH_SUMMARY,
                  epilog=SEARCH_EPILOG)(search_command)
    app.add_typer(group, name="mix")
