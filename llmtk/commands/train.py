"""`llmtk train`: Train a GPT-style model, one CPU process to many GPU nodes via torchrun."""

import typer

from llmtk.commands._stub import register_stub

SUMMARY = "Train a GPT-style model, one CPU process to many GPU nodes via torchrun."


def register(app: typer.Typer) -> None:
    register_stub(app, "train", SUMMARY, "llmtk train --data train.jsonl.zst --out runs/a --model tiny --steps 1000")
