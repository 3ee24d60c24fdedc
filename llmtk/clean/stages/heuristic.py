"""Stages: the Gopher quality, Gopher repetition, C4 and FineWeb rules (llmtk.clean.filters).

Their thresholds are per language (llmtk.clean.langs: the built-in table and [lang.XX.STAGE]
overrides), so each asks the document's Work for its language's config; `--filters` picks
which run. Quality before repetition (datatrove's FineWeb pipeline has it the other way
round): the same keep/drop decisions, but short documents are named gopher.short_doc and
leave before the costlier n-gram rules run.
"""

from __future__ import annotations

from llmtk.clean.filters import C4, FineWeb, GopherQuality, GopherRepetition
from llmtk.clean.stages.base import Stage, Work


class Heuristic(Stage):
    per_lang = True

    def check(self, work: Work) -> str | None:
        # (asked before the document's words and profile are made: with every filter off,
        # `--filters none`, nothing is made)
        if self.name not in work.filters():  # switched off for this language
            return None
        filters, d, profile = work.prose()
        rule = filters[self.name]
        vals = work.values()
        reason = rule.check(d, profile, vals)
        if vals:
            work.note(self.name, vals)
        work.text = d.text  # C4 may have removed lines
        return reason


class GopherQualityStage(Heuristic):
    name = "gopher_quality"
    config = GopherQuality
    help = "Gopher quality rules: length, word length, symbols, bullets, stop words"
    reasons = ("gopher.short_doc", "gopher.long_doc", "gopher.mean_word_length",
               "gopher.hash_ratio", "gopher.ellipsis_ratio", "gopher.bullet_lines",
               "gopher.ellipsis_lines", "gopher.alpha_words", "gopher.stop_words")


class GopherRepetitionStage(Heuristic):
    name = "gopher_repetition"
    config = GopherRepetition
    help = "Gopher repetition rules: duplicate lines, paragraphs and n-grams"
    reasons = ("gopher.empty", "gopher.dup_para_frac", "gopher.dup_para_char_frac",
               "gopher.dup_line_frac", "gopher.dup_line_char_frac", "gopher.top_N_gram",
               "gopher.dup_N_gram")


class C4Stage(Heuristic):
    name = "c4"
    config = C4
    help = "C4 rules: lorem ipsum, curly brackets, sentences; drops boilerplate lines"
    reasons = ("c4.lorem_ipsum", "c4.curly_bracket", "c4.too_few_sentences")


class FineWebStage(Heuristic):
    name = "fineweb"
    config = FineWeb
    help = "FineWeb rules: line punctuation, short lines, duplicated characters, lists"
    reasons = ("fineweb.empty", "fineweb.line_punct_ratio", "fineweb.short_line_ratio",
               "fineweb.char_dup_ratio", "fineweb.list_ratio")
