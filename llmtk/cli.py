"""The `llmtk` command: a typer app that registers one command per tool, nothing else.

Heavy libraries (torch, numpy, fasttext, datasketch, matplotlib) are imported
inside the commands that need them, so `llmtk --help` starts fast.
"""

import os
import signal
import sys

import typer

from llmtk import __version__
from llmtk.commands import (
    cat,
    clean,
    contam_check,
    dedup,
    diagnose,
    estimate,
    eval,
    mix,
    plot_loss,
    train,
)
from llmtk.errors import LlmtkError, PipeClosed

HELP = """\
Small Unix-style tools for the whole LLM pre-training workflow.

They read and write JSON Lines (plain, .zst or .gz) on stdin/stdout, so they
compose in shell pipelines, Makefiles and cluster job scripts.

[bold]Examples[/bold]

  zstdcat crawl/*.jsonl.zst | llmtk clean --lang en,zh | llmtk dedup > clean.jsonl

  llmtk estimate --model llama3-8b --tokens 15e12 --gpus 1024xH100

  llmtk train --data train.jsonl.zst --out runs/a --model tiny --steps 1000

  llmtk diagnose runs/a/metrics.jsonl
"""

EPILOG = (
    "Exit status: 0 success, 1 data or runtime error, 2 bad usage, "
    "3 the check ran and found problems (diagnose, contam-check). "
    "Set LLMTK_DEBUG=1 for tracebacks."
)

app = typer.Typer(
    name="llmtk",
    help=HELP,
    epilog=EPILOG,
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

for module in (clean, dedup, mix, contam_check, estimate, train, eval, plot_loss, diagnose,
               cat):
    module.register(app)


def _version(value: bool) -> None:
    if value:
        print(f"llmtk {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks (same as LLMTK_DEBUG=1)."),
) -> None:
    if debug:
        os.environ["LLMTK_DEBUG"] = "1"


def _quiet_stdout() -> None:
    """Point fd 1 at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


class Terminated(Exception):
    """SIGTERM arrived: unwind so that partial outputs are removed, then exit 143."""


def _on_sigterm(signum, frame) -> None:
    raise Terminated()


def main() -> None:
    debug = os.environ.get("LLMTK_DEBUG", "") not in ("", "0")
    # Commands that need their own SIGTERM behaviour (train checkpoints) replace this.
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        app(prog_name="llmtk")
    except PipeClosed:
        _quiet_stdout()
        sys.exit(0)
    except BrokenPipeError:
        _quiet_stdout()
        sys.exit(0)
    except LlmtkError as e:
        if debug or os.environ.get("LLMTK_DEBUG", "") not in ("", "0"):
            raise
        print(f"llmtk: error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except Terminated:
        sys.exit(128 + signal.SIGTERM)
    except MemoryError:
        print("llmtk: error: out of memory", file=sys.stderr)
        sys.exit(1)
    except Exception as e:  # a bug: still one line, the traceback on request
        if debug:
            raise
        print(f"llmtk: error: internal error ({type(e).__name__}: {e}); "
              "set LLMTK_DEBUG=1 for the traceback", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
