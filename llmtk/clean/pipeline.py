"""`Cleaner`: the per-document function behind `llmtk clean`.

    cleaner = Cleaner(CleanConfig())
    reason = cleaner(doc)        # None: keep (doc may be modified); else the drop reason

Stages run in this order: URL filter -> main-content extraction (HTML records) -> normalise ->
language ID (+ --lang filter) -> Gopher quality -> Gopher repetition -> C4 -> FineWeb ->
classifier -> perplexity -> secrets -> PII. The scrubbers run last so that placeholders do not
change what the filters measure; secrets go before PII so that a password in `user:pw@host` is
not taken for an e-mail address. A record that `--profile code|auto` finds to be source code
takes another road after the URL filter: no extraction or normalisation (code's bytes are its
meaning), the code rules (llmtk.clean.code), secrets, PII. A `Cleaner` is picklable and loads
its models lazily in each worker process, so `StreamRun.apply(cleaner)` works with any
--workers.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial

from llmtk.clean.code import CodeRules
from llmtk.clean.config import CleanConfig
from llmtk.clean.filters import DocText, Profile
from llmtk.clean.urls import UrlRules, host_of
from llmtk.errors import ConfigError
from llmtk.io import Doc, ordered_map
from llmtk.io.record import repeats_key
from llmtk.text.langid import LanguageId
from llmtk.text.pii import scrub
from llmtk.text.secrets import scrub_secrets
from llmtk.text.segment import is_cjk


class Cleaner:
    def __init__(self, config: CleanConfig, annotate: bool = False, dry_run: bool = False) -> None:
        self.cfg = config
        self.annotate = annotate
        self.dry_run = dry_run
        # --profile code never asks for a natural language: no model to load
        self.langid = (LanguageId() if config.langid.enabled and config.code.profile != "code"
                       else None)
        self.keep_langs = frozenset(config.langid.keep)
        # language -> (filters, stop words), built on first sight of each language
        self._plans: dict[str | None, tuple[list, list[str] | None]] = {}
        self.quality = None
        if config.quality.model:
            from llmtk.clean.quality import QualityModel

            self.quality = QualityModel(config.quality.model, config.quality.label)
        self.ppl = None
        if config.perplexity.model:
            from llmtk.clean.perplexity import PerplexityModel

            self.ppl = PerplexityModel(config.perplexity.model, config.perplexity.max_tokens)
        self.max_ppl = config.perplexity.max_ppl  # set from the quantile by the caller
        self.pii_kinds = frozenset(config.pii.kinds) if config.pii.enabled else None
        self.urls = UrlRules(config.url) if config.url.enabled else None
        self.code = CodeRules(config.code) if config.code.profile != "web" else None
        sec = config.secrets
        self.secret_kinds = frozenset(sec.kinds) if sec.kinds else None

    def plan(self, lang: str | None) -> tuple[list, list[str] | None]:
        """The enabled filters, with the thresholds for `lang`, and its stop words."""
        if lang not in self._plans:
            stages, words = self.cfg.for_lang(lang)
            # Quality before repetition (datatrove's FineWeb pipeline has it the other way
            # round): the same keep/drop decisions, but short documents are named
            # gopher.short_doc and leave before the costlier n-gram rules run.
            order = ("gopher_quality", "gopher_repetition", "c4", "fineweb")
            filters = [(name, stages[name]) for name in order if stages[name].enabled]
            self._plans[lang] = (filters, words)
        return self._plans[lang]

    def load(self) -> None:
        """Load the models now (to fail early on a bad path, before reading any input)."""
        if self.cfg.extract.method == "trafilatura":
            try:
                import trafilatura  # noqa: F401
            except ImportError as e:
                raise ConfigError("extract.method", "trafilatura is not installed "
                                  f"(pip install 'llmtk[trafilatura]'; {e})") from None
        if self.quality is not None:
            self.quality.load()
        if self.ppl is not None:
            self.ppl.load()
        if self.langid is not None:
            self.langid.load()  # before --workers forks, so the workers share it
            # A code the model never answers would drop every document as lang.unwanted.
            unknown = self.langid.check_codes(sorted(self.keep_langs))
            if unknown:
                raise ConfigError("langid.keep", f"unknown language code(s) {', '.join(unknown)}"
                                  "; the language ID model's codes (ISO 639, e.g. en,de,zh) "
                                  "are listed in docs/clean.md")

    def __call__(self, doc: Doc) -> str | None:
        notes: dict | None = {} if self.annotate else None
        reason = self._run(doc, notes)
        if self.dry_run and reason is not None:
            doc.count(f"would_drop.{reason}")
            if notes is not None:
                notes["reason"] = reason
            reason = None
        if notes:
            doc.annotate(**notes)  # on a dropped record too: --rejects then shows the values
        return reason

    def _run(self, doc: Doc, notes: dict | None) -> str | None:
        cfg = self.cfg
        data = doc.data
        if self.urls is not None:
            url = data.get(cfg.url.field)
            if isinstance(url, str) and url:
                reason = self.urls.check(url)
                if reason is not None:
                    doc.count(f"url_dropped.{host_of(url)}")  # per domain, in --stats
                    return reason
        if self.code is not None:
            lang = self.code.language(data, doc.text)
            if lang is not None:
                return self._run_code(doc, lang, notes)
        original = text = doc.text
        html = cfg.extract.applies(data, text)
        if html:
            text = cfg.extract(text)
            if not text.strip():
                return "extract.empty"
        if cfg.normalize.enabled:
            text = cfg.normalize(text)
        if not text.strip():
            return "normalize.empty"

        lang = None
        if self.langid is not None:
            lang, score = self.langid.predict(text)
            doc.count(f"lang.{lang}")
            if notes is not None:
                notes["lang"] = lang
                notes["lang_score"] = score
            if self.keep_langs:
                reason = None
                if lang not in self.keep_langs:
                    reason = "lang.unwanted"
                elif score < cfg.langid.min_score:
                    reason = "lang.low_score"
                if reason is not None:
                    if notes is None and not self.dry_run:
                        # the reject says what was found, with or without --annotate
                        doc.annotate(lang=lang, lang_score=score)
                    return reason
        filters, words = self.plan(lang)
        profile = Profile.for_lang(lang, cjk_text=lang is None and is_cjk(text), words=words)

        d = DocText(text, lang, profile.char_words)
        for name, stage in filters:
            vals: dict | None = {} if notes is not None else None
            reason = stage.check(d, profile, vals)
            if vals:
                notes[name] = vals  # type: ignore[index]
            if reason is not None:
                return reason
        text = d.text

        if self.quality is not None:
            score = self.quality.score(text)
            if notes is not None:
                notes["quality"] = score
            if score < cfg.quality.min_score:
                return "quality.low_score"

        if self.ppl is not None:
            ppl = self.ppl.score(text)
            if notes is not None:
                notes["perplexity"] = round(ppl, 4) if ppl != float("inf") else None
            if self.max_ppl is not None and ppl > self.max_ppl:
                return "perplexity.too_high"

        self._scrub(doc, original, text, self.cfg.secrets.scrub == "all")
        if html and not self.dry_run and "content_type" in data:
            data["content_type"] = "text/plain"  # extracted: a second clean leaves it be
        return None

    def _run_code(self, doc: Doc, lang: str, notes: dict | None) -> str | None:
        """A source file: the code rules, then the scrubbers (no normalisation, no prose
        rules, no classifier: those are made for prose)."""
        text = doc.text
        doc.count(f"code_lang.{lang}")
        vals: dict | None = {} if notes is not None else None
        if notes is not None:
            notes["code_lang"] = lang
        if not text.strip():
            return "code.empty"
        reason = self.code.check(text, lang, doc.data.get(self.cfg.code.path_field), vals)
        if vals:
            notes["code"] = vals  # type: ignore[index]
        if reason is not None:
            return reason
        return self._scrub(doc, text, text, self.cfg.secrets.scrub != "off")

    def _scrub(self, doc: Doc, original: str, text: str, secrets: bool) -> None:
        """Secrets, then PII, replaced in `text`; the record gets the result."""
        scrubbed = False
        if secrets:
            text, counts = scrub_secrets(text, self.secret_kinds)
            for kind, n in counts.items():
                doc.count(f"secrets.{kind}", n)
            scrubbed = True
        if self.pii_kinds is not None:
            text, counts = scrub(text, self.pii_kinds)
            for kind, n in counts.items():
                doc.count(f"pii.{kind}", n)
            scrubbed = True
        if scrubbed and not self.dry_run and doc.raw is not None and repeats_key(
                doc.raw, doc.field):
            # A line with two text keys parses to the last one; the other, unscrubbed,
            # must not pass through in the original bytes: write the parsed record.
            doc.raw = None

        if not self.dry_run and text != original:
            doc.set_text(text)
        return None


def perplexity_threshold(
    cleaner: Cleaner, docs: Iterable[Doc], q: float, workers: int = 1
) -> float:
    """The q-quantile of the (normalised) documents' perplexities: a first pass for
    `--ppl-quantile`, run over the same input before the real one."""
    from llmtk.clean.perplexity import quantile

    values = list(ordered_map(partial(_ppl_chunk, cleaner), docs, workers))
    return quantile(values, q)


def _ppl_chunk(cleaner: Cleaner, chunk: list[Doc]) -> list[float]:
    norm = cleaner.cfg.normalize
    return [cleaner.ppl.score(norm(d.text) if norm.enabled else d.text) for d in chunk]
