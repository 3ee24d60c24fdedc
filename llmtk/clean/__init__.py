"""Cleaning: normalisation, language ID, heuristic and classifier filters, PII scrubbing.

`Cleaner(CleanConfig())` is the per-document function (`fn(doc) -> reason | None`) that
`llmtk clean` applies; its stages are `llmtk.clean.stages.PIPELINE`, one module each, and
the rules, config and classifier live in the modules beside them. Both names load on first
use, so that `llmtk clean --help` reads the stages' options without building a Cleaner.
"""

__all__ = ["CleanConfig", "Cleaner"]


def __getattr__(name: str):
    if name == "CleanConfig":
        from llmtk.clean.config import CleanConfig

        return CleanConfig
    if name == "Cleaner":
        from llmtk.clean.pipeline import Cleaner

        return Cleaner
    raise AttributeError(f"module 'llmtk.clean' has no attribute {name!r}")
