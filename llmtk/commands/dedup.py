"""`llmtk dedup`: Drop exact and MinHash near-duplicate documents."""

import typer

from llmtk.commands._stub import register_stub

SUMMARY = "Drop exact and MinHash near-duplicate documents."


def register(app: typer.Typer) -> None:
    register_stub(app, "dedup", SUMMARY, "llmtk dedup clean.jsonl -o dedup.jsonl.zst --rejects dups.jsonl")
