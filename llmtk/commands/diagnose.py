"""`llmtk diagnose`: Find NaNs, spikes, divergence, plateaus and overfitting in a training log."""

import typer

from llmtk.commands._stub import register_stub

SUMMARY = "Find NaNs, spikes, divergence, plateaus and overfitting in a training log."


def register(app: typer.Typer) -> None:
    register_stub(app, "diagnose", SUMMARY, "llmtk diagnose runs/a/metrics.jsonl")
