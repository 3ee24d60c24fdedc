"""`llmtk mix`: Blend several sources by weight to a token budget."""

import typer

from llmtk.commands._stub import register_stub

SUMMARY = "Blend several sources by weight to a token budget."


def register(app: typer.Typer) -> None:
    register_stub(
        app,
        "mix",
        SUMMARY,
        "llmtk mix --source web=web.jsonl.zst:0.7 --source code=code.jsonl.zst:0.3 "
        "--tokens 2e9 -o train.jsonl.zst",
    )
