"""The stages of `llmtk clean`, in the order they run: the one list a new stage joins.

A stage is a class in its own module (llmtk.clean.stages.base says what it declares). From
this list come `CleanConfig`'s sections (and `--print-config`'s order), `validate()`, the
`Cleaner`'s loop and `llmtk clean`'s stage options. A record found to be source code
(--profile code|auto) leaves the prose road at `CodeStage`: only stages whose `roads`
include CODE (the scrubbers) see it afterwards.
"""

from llmtk.clean.stages.base import Stage
from llmtk.clean.stages.code import CodeStage
from llmtk.clean.stages.extract import ExtractStage
from llmtk.clean.stages.heuristic import (
    C4Stage,
    FineWebStage,
    GopherQualityStage,
    GopherRepetitionStage,
)
from llmtk.clean.stages.hostlines import HostLinesStage
from llmtk.clean.stages.langid import LangIdStage
from llmtk.clean.stages.normalize import NormalizeStage
from llmtk.clean.stages.perplexity import PerplexityStage
from llmtk.clean.stages.quality import QualityStage
from llmtk.clean.stages.scrub import PiiStage, SecretsStage
from llmtk.clean.stages.url import UrlStage

PIPELINE: tuple[type[Stage], ...] = (
    UrlStage,
    CodeStage,
    ExtractStage,
    NormalizeStage,
    HostLinesStage,  # after normalising: the lines as the first pass counted them
    LangIdStage,
    GopherQualityStage,
    GopherRepetitionStage,
    C4Stage,
    FineWebStage,
    QualityStage,
    PerplexityStage,
    SecretsStage,  # secrets before PII: `user:pw@host` is not an e-mail address
    PiiStage,
)

# The heuristic filters, in run order: thresholds per language ([lang.XX.STAGE] tables,
# llmtk.clean.langs) and the names --filters chooses from.
PER_LANG: tuple[str, ...] = tuple(stage.name for stage in PIPELINE if stage.per_lang)

__all__ = ["PER_LANG", "PIPELINE", "Stage"]
