"""The `llmtk` command: a typer app that registers one command per tool, nothing else.

Heavy libraries (torch, numpy, fasttext, datasketch, matplotlib) are imported
inside the commands that need them, so `llmtk --help` starts fast; and `llmtk CMD`
imports and registers CMD's module alone (COMMANDS), so a run pays for no other
command's imports and options (`llmtk clean` on a small file: about a tenth of it).
"""

import importlib
import os
import signal
import sys

import typer
from typer.core import TyperGroup

from llmtk import __version__
from llmtk.commands.groups import DefaultCommand
from llmtk.commands.helpfmt import pipeline_sorted, polish
from llmtk.errors import AlreadyDone, ConfigError, LlmtkError, PipeClosed

HELP = """\
Small Unix-style tools for the whole LLM pre-training workflow.

The data tools read JSON Lines (plain, .zst, .gz, .xz or .bz2), Parquet and web
archives, and write JSON Lines on stdout, so they compose in shell pipelines,
Makefiles and cluster job scripts. The plumbing commands run them as job arrays
(run, stats merge) and show the I/O layer alone (cat).

[bold]Examples[/bold]

  zstdcat crawl/*.jsonl.zst | llmtk clean --lang en,zh \\
    | llmtk dedup > clean.jsonl

  llmtk estimate --model llama3-8b --tokens 15e12 --gpus 1024xH100

  llmtk train --data train.jsonl.zst --out runs/a --model tiny --steps 1000

  llmtk diagnose runs/a/metrics.jsonl
"""

EPILOG = (
    "Exit status: 0 success, 1 data or runtime error, 2 bad usage, "
    "3 the check ran and found problems (diagnose, contam-check). "
    "Set LLMTK_DEBUG=1 for tracebacks."
)

class _PipelineOrdered(TyperGroup):
    """Lists the commands in the order a pipeline uses them, not as registered."""

    def list_commands(self, ctx) -> list[str]:
        return pipeline_sorted(super().list_commands(ctx))


# Each command's name and the module (llmtk.commands.X) whose register() adds it, in the
# order they are registered.
COMMANDS = {"inspect": "inspect", "clean": "clean", "dedup": "dedup", "mix": "mix",
            "contam-check": "contam_check", "estimate": "estimate", "train": "train",
            "eval": "eval", "generate": "generate", "plot-loss": "plot_loss",
            "diagnose": "diagnose", "stats": "stats", "run": "run", "cat": "cat"}


def _version(value: bool) -> None:
    if value:
        print(f"llmtk {__version__}")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks (same as LLMTK_DEBUG=1)."),
) -> None:
    if debug:
        os.environ["LLMTK_DEBUG"] = "1"


def make_app(names=None) -> typer.Typer:
    """The typer app with the commands `names` (default: all of them) registered."""
    root = typer.Typer(
        name="llmtk",
        cls=_PipelineOrdered,
        help=HELP,
        epilog=EPILOG,
        no_args_is_help=True,
        add_completion=False,
        rich_markup_mode="rich",
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    root.callback()(_root)
    for name in names or COMMANDS:
        importlib.import_module(f"llmtk.commands.{COMMANDS[name]}").register(root)
    return root


def __getattr__(name: str):
    """`llmtk.cli.app`: the app with every command, made on first use (tests, docs)."""
    if name == "app":
        globals()["app"] = make_app()
        return globals()["app"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def chosen_command(args: list[str]) -> str | None:
    """The command a command line runs (its first word that is no option), when it names
    one; None otherwise (`llmtk`, `llmtk --help`, a misspelt command: all are needed)."""
    for arg in args:
        if arg == "--":
            return None
        if not arg.startswith("-"):  # (the root's options take no values)
            return arg if arg in COMMANDS else None
    return None


def build_command(args: list[str] | None = None):
    """The click command tree for the command line `args` (default: every command), with
    help placeholders as words (helpfmt)."""
    name = chosen_command(args) if args is not None else None
    command = typer.main.get_command(make_app([name] if name else None))
    polish(command)
    return command


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


def _debug() -> bool:
    """LLMTK_DEBUG=1, or --debug (which sets it once the app has parsed it)."""
    return os.environ.get("LLMTK_DEBUG", "") not in ("", "0")


def _usage_line(e: typer.TyperException) -> str:
    """typer's boxed usage error as one `llmtk: error:` line, like every other error."""
    ctx = getattr(e, "ctx", None)
    if ctx is not None and isinstance(ctx.command, DefaultCommand) and ctx.parent is not None:
        ctx = ctx.parent  # `llmtk clean`, not its hidden default command `llmtk clean run`
    where = f" (see '{ctx.command_path} -h')" if ctx is not None else ""
    return f"llmtk: error: {e.format_message()}{where}"


def main() -> None:
    # Commands that need their own SIGTERM behaviour (train checkpoints) replace this.
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        # standalone_mode=False: usage errors come back to us as exceptions, so they
        # print as one line; the return value is the exit status of typer.Exit.
        status = build_command(sys.argv[1:]).main(prog_name="llmtk", standalone_mode=False)
        sys.exit(status if isinstance(status, int) else 0)
    except typer.TyperException as e:  # click's UsageError / BadParameter / NoSuchOption
        if _debug():
            raise
        # `llmtk` alone: the help has been shown already (typer names this class
        # only by its name too)
        if type(e).__name__ != "NoArgsIsHelpError":
            print(_usage_line(e), file=sys.stderr)
        sys.exit(getattr(e, "exit_code", 2))
    except typer.Abort:
        sys.exit(130)
    except PipeClosed:
        _quiet_stdout()
        sys.exit(0)
    except AlreadyDone as e:
        print(f"llmtk: {e}", file=sys.stderr)
        sys.exit(0)
    except BrokenPipeError:
        _quiet_stdout()
        sys.exit(0)
    except ConfigError as e:  # a key no command worded: its flag shares the key's name
        if _debug():
            raise
        from llmtk.commands.configs import dashed, word

        print(f"llmtk: error: {word(e, dashed)}", file=sys.stderr)
        sys.exit(e.exit_code)
    except LlmtkError as e:
        if _debug():
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
        if _debug():
            raise
        print(f"llmtk: error: internal error ({type(e).__name__}: {e}); "
              "set LLMTK_DEBUG=1 for the traceback", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
