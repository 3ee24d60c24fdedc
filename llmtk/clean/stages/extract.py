"""Stage: main-content extraction of HTML records (llmtk.clean.extract does the work)."""

from __future__ import annotations

from llmtk.clean.extract import METHODS, Extract
from llmtk.clean.stages.base import Flag, Stage, Work, one_of
from llmtk.errors import ConfigError


class ExtractStage(Stage):
    name = "extract"
    config = Extract
    help = "turn an HTML record (WARC response, HTML page) into its main text"
    reasons = ("extract.empty",)
    flags = (
        Flag("method", ("--extract",), "Main-content extractor for HTML records (WARC "
             "responses, documents that are HTML pages): resiliparse, trafilatura or none."),
    )

    @classmethod
    def validate(cls, cfg: Extract) -> None:
        one_of("extract.method", cfg.method, METHODS)

    @classmethod
    def on(cls, cfg: Extract, whole) -> bool:
        return cfg.method != "none"

    def load(self) -> None:
        if self.cfg.method == "trafilatura":
            try:
                import trafilatura  # noqa: F401
            except ImportError as e:
                raise ConfigError("extract.method", "trafilatura is not installed "
                                  f"(pip install 'llmtk[trafilatura]'; {e})") from None

    def check(self, work: Work) -> str | None:
        if not self.cfg.applies(work.data, work.text):
            return None
        work.html = True
        work.text = self.cfg(work.text)
        if not work.text.strip():
            return "extract.empty"
        return None
