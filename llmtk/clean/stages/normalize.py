"""Stage: text normalisation (llmtk.clean.normalize does the work)."""

from __future__ import annotations

from llmtk.clean.normalize import Normalize
from llmtk.clean.stages.base import Flag, Stage, Work, one_of


def unicode_form(value: str) -> str:
    """`nfc`, `NFKC`, `None` -> the spelling unicodedata and the output of --print-config use."""
    return "none" if value.lower() == "none" else value.upper()


class NormalizeStage(Stage):
    name = "normalize"
    config = Normalize
    help = "normalise Unicode form, mojibake, ANSI/control characters, whitespace, width"
    reasons = ("normalize.empty",)
    canonical = {"unicode": unicode_form}
    flags = (
        Flag("enabled", ("--no-normalize",), "Skip normalisation entirely.", off=True),
        Flag("unicode", ("--unicode",), "Unicode normal form: nfc, nfkc or none."),
        Flag("zh_convert", ("--zh-convert",), "Convert Chinese script with OpenCC: t2s or s2t.",
             show_default=False),
    )

    @classmethod
    def validate(cls, cfg: Normalize) -> None:
        one_of("normalize.unicode", cfg.unicode, ("NFC", "NFKC", "none"), "nfc, nfkc or none")
        one_of("normalize.fold_width", cfg.fold_width, ("none", "alnum", "all"),
               "none, alnum or all")
        one_of("normalize.zh_convert", cfg.zh_convert,
               ("none", "t2s", "s2t", "tw2s", "s2tw", "hk2s", "s2hk"), "none, t2s or s2t")

    def check(self, work: Work) -> str | None:
        # runs when switched off too: an empty text leaves here either way
        if self.cfg.enabled:
            work.text = self.cfg(work.text, inner_spaces=not work.html)
        if not work.text.strip():
            return "normalize.empty"
        return None
