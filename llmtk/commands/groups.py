"""The one pattern for a command that also has subcommands (`clean`, `dedup`, `train`).

`llmtk dedup in.jsonl` runs the command itself; `llmtk dedup signatures …` a named
subcommand. The command itself is registered as a hidden subcommand named DEFAULT, and
`DefaultGroup` routes to it whenever the first argument names no other subcommand, so
options, positional inputs and --help of the main command work as for any command,
with nothing of click's private parsing state touched.
"""

from __future__ import annotations

import typer
from typer.core import TyperCommand, TyperGroup

DEFAULT = "run"
LINE = 78  # an 80-column terminal less the help's margins


class DefaultGroup(TyperGroup):
    """A subcommand name first picks the subcommand; anything else goes to DEFAULT."""

    def parse_args(self, ctx, args):
        if not args or args[0] not in self.commands or args[0] == DEFAULT:
            args = [DEFAULT, *(args[1:] if args and args[0] == DEFAULT else args)]
        return super().parse_args(ctx, args)


class DefaultCommand(TyperCommand):
    """The hidden default command: its usage line reads `llmtk TOOL [OPTIONS] ...`."""

    def format_usage(self, ctx, formatter):
        path = ctx.parent.command_path if ctx.parent else ctx.command_path
        formatter.write_usage(path, " ".join(self.collect_usage_pieces(ctx)))

    def format_help(self, ctx, formatter):
        """The command's help, ending with the subcommands it also has, one line each
        with its summary (so two with similar names are told apart at a glance)."""
        if ctx.parent is not None and not hasattr(self, "_own_epilog"):
            self._own_epilog = self.epilog or ""
            group = ctx.parent.command
            subs = [(n, group.get_command(ctx, n)) for n in group.list_commands(ctx)
                    if n != DEFAULT and not group.get_command(ctx, n).hidden]
            if subs:
                path = ctx.parent.command_path
                width = max(len(n) for n, _ in subs)
                room = LINE - len(path) - width - 3  # each on one line of an 80-column help
                lines = [f"[bold]{path} {n}[/bold]{' ' * (width - len(n))}  "
                         f"{summary(sub, room)}" for n, sub in subs]
                self.epilog = (self._own_epilog + "\n\n" if self._own_epilog else "") + \
                    "Also (each with -h):\n" + "\n".join(lines)
        super().format_help(ctx, formatter)


def summary(command, limit: int = 50) -> str:
    """A subcommand's one-line summary: its short help, else the first sentence of its help
    (cut at a word, under `limit` characters, for the list at the end of the main help)."""
    text = command.short_help or (command.help or "").split("\n\n")[0]
    text = " ".join(text.split())
    first = text.split(". ")[0].rstrip(".")
    if len(first) <= limit:
        return first
    return first[:limit - 4].rsplit(" ", 1)[0].rstrip(",;:") + " ..."


def group(**kw) -> typer.Typer:
    """A typer app for a command with subcommands; add the command itself with `main`."""
    return typer.Typer(cls=DefaultGroup, add_completion=False, rich_markup_mode="rich",
                       context_settings={"help_option_names": ["-h", "--help"]}, **kw)


def main(app: typer.Typer, **kw):
    """Decorator: the command itself (what runs when no subcommand is named)."""
    return app.command(DEFAULT, hidden=True, cls=DefaultCommand, **kw)
