"""Registration for commands whose own issue has not landed yet."""

import typer

from llmtk.errors import NotImplementedYet


def register_stub(app: typer.Typer, name: str, summary: str, example: str) -> None:
    def command(ctx: typer.Context) -> None:
        raise NotImplementedYet(name)

    app.command(
        name=name,
        help=f"{summary}\n\n[bold]Example[/bold]\n\n  {example}\n\n(not implemented yet)",
        short_help=summary,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(command)
