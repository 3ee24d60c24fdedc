"""`llmtk contam-check`: Find evaluation-set n-grams in training data; report, drop or mask."""

import typer

from llmtk.commands._stub import register_stub

SUMMARY = "Find evaluation-set n-grams in training data; report, drop or mask."


def register(app: typer.Typer) -> None:
    register_stub(
        app,
        "contam-check",
        SUMMARY,
        "llmtk contam-check train.jsonl.zst --eval evals/ --drop > clean.jsonl",
    )
