"""`llmtk estimate`: FLOPs, memory per GPU, time, GPU-hours, cost and Chinchilla tokens for a run."""

import typer

from llmtk.commands._stub import register_stub

SUMMARY = "FLOPs, memory per GPU, time, GPU-hours, cost and Chinchilla tokens for a run."


def register(app: typer.Typer) -> None:
    register_stub(app, "estimate", SUMMARY, "llmtk estimate --model llama3-8b --tokens 15e12 --gpus 1024xH100")
