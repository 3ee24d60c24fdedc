"""Cleaning: normalisation, language ID, heuristic and classifier filters, PII scrubbing.

`Cleaner(CleanConfig())` is the per-document function (`fn(doc) -> reason | None`) that
`llmtk clean` applies; the filters, config and classifier live in the modules beside it.
"""

from llmtk.clean.config import CleanConfig
from llmtk.clean.pipeline import Cleaner

__all__ = ["CleanConfig", "Cleaner"]
