"""`llmtk clean`: Normalise, language-ID, quality-filter and PII-scrub a document stream."""

import typer

from llmtk.commands._stub import register_stub

SUMMARY = "Normalise, language-ID, quality-filter and PII-scrub a document stream."


def register(app: typer.Typer) -> None:
    register_stub(app, "clean", SUMMARY, "zstdcat crawl.jsonl.zst | llmtk clean --lang en,zh > clean.jsonl")
