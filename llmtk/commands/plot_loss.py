"""`llmtk plot-loss`: Draw loss, learning-rate and grad-norm curves of one or more runs."""

import typer

from llmtk.commands._stub import register_stub

SUMMARY = "Draw loss, learning-rate and grad-norm curves of one or more runs."


def register(app: typer.Typer) -> None:
    register_stub(app, "plot-loss", SUMMARY, "llmtk plot-loss runs/*/metrics.jsonl -o loss.png")
