"""Stage: source code takes its own road (llmtk.clean.code: languages and code rules).

With --profile code or auto, a record found to be a source file leaves the prose road here:
no extraction, normalisation, language ID, prose rules or classifier (code's bytes are its
meaning); the code rules judge it now, and only the stages whose `roads` include CODE (the
scrubbers) see it after this.
"""

from __future__ import annotations

from llmtk.clean.code import PROFILES, Code, CodeRules
from llmtk.clean.stages.base import CODE, Flag, Stage, Work, one_of


class CodeStage(Stage):
    name = "code"
    config = Code
    help = "route source files to the code rules (StarCoder / The Stack) instead of the prose ones"
    reasons = ("code.empty", "code.too_small", "code.too_large", "code.max_line_length",
               "code.mean_line_length", "code.alpha", "code.alphanum", "code.comment_share",
               "code.generated", "code.lock_file", "code.minified", "code.html_text",
               "code.xml_header", "code.xml_data", "code.encoded_data", "code.data_array",
               "code.numeric_table", "code.LANG_data")
    flags = (
        Flag("profile", ("--profile",), "What the records are: web (prose), code (source "
             "files: language from the lang field, the path's extension or a #! line; code "
             "rules instead of the prose ones) or auto (code when lang or path names a "
             "programming language)."),
    )

    def __init__(self, cfg: Code, whole) -> None:
        super().__init__(cfg, whole)
        self.rules = CodeRules(cfg)

    @classmethod
    def validate(cls, cfg: Code) -> None:
        one_of("code.profile", cfg.profile, PROFILES)

    @classmethod
    def on(cls, cfg: Code, whole) -> bool:
        return cfg.profile != "web"

    def check(self, work: Work) -> str | None:
        lang = self.rules.language(work.data, work.text)
        if lang is None:
            return None  # prose: the web road goes on
        work.road = CODE
        work.doc.count(f"code_lang.{lang}")
        work.note("code_lang", lang)
        vals = work.values()
        if not work.text.strip():
            return "code.empty"
        reason = self.rules.check(work.text, lang, work.data.get(self.cfg.path_field), vals)
        if vals:
            work.note("code", vals)
        return reason
