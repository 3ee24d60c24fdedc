"""`llmtk clean` configuration: one dataclass per stage, read from and printed as TOML.

`llmtk clean --print-config` prints `CleanConfig()` as TOML; `--config FILE` reads such a
file (any subset of sections and keys); command-line flags then override single values.
Unknown sections or keys are an error, so a typo never silently keeps a default.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from llmtk.clean.code import PROFILES, Code
from llmtk.clean.extract import METHODS, Extract
from llmtk.clean.filters import C4, FineWeb, GopherQuality, GopherRepetition
from llmtk.clean.langs import STAGES, check_table, coerce, merge, resolve
from llmtk.clean.normalize import Normalize
from llmtk.clean.urls import UrlFilter
from llmtk.errors import ConfigError
from llmtk.io import tomlfile

PII_KINDS = ("EMAIL", "PHONE", "ID_NUMBER", "CARD", "IP")


@dataclass(frozen=True)
class LangId:
    enabled: bool = True
    keep: list[str] = field(default_factory=list)  # empty: keep every language
    min_score: float = 0.65  # datatrove's LanguageFilter default; applies when `keep` is set
    # Apply the built-in per-language thresholds (llmtk/clean/thresholds.toml, FineWeb-2's
    # figures) to documents identified as one of its languages.
    lang_thresholds: bool = True


@dataclass(frozen=True)
class Quality:
    model: str = ""  # a fastText classifier (.bin/.ftz); empty: stage off
    min_score: float = 0.5
    label: str = "hq"  # the positive label (DCLM's classifier: hq vs cc)


@dataclass(frozen=True)
class Perplexity:
    model: str = ""  # an llmtk train checkpoint (run dir or step dir); empty: stage off
    max_ppl: float | None = None  # drop documents above this perplexity
    quantile: float | None = None  # or: drop those above this quantile of the input's
    max_tokens: int = 4096  # score at most this many tokens of a document


@dataclass(frozen=True)
class Pii:
    enabled: bool = True
    kinds: list[str] = field(default_factory=lambda: list(PII_KINDS))


SECRET_SCRUB = ("code", "all", "off")


@dataclass(frozen=True)
class Secrets:
    # Which records lose their secrets (llmtk.text.secrets): code records only (the
    # default: prose rarely holds keys, and the rules then cost nothing), every record, none.
    scrub: str = "code"
    kinds: list[str] = field(default_factory=list)  # empty: every kind of secrets.toml


@dataclass(frozen=True)
class CleanConfig:
    url: UrlFilter = field(default_factory=UrlFilter)
    extract: Extract = field(default_factory=Extract)
    normalize: Normalize = field(default_factory=Normalize)
    langid: LangId = field(default_factory=LangId)
    gopher_repetition: GopherRepetition = field(default_factory=GopherRepetition)
    gopher_quality: GopherQuality = field(default_factory=GopherQuality)
    c4: C4 = field(default_factory=C4)
    fineweb: FineWeb = field(default_factory=FineWeb)
    quality: Quality = field(default_factory=Quality)
    perplexity: Perplexity = field(default_factory=Perplexity)
    pii: Pii = field(default_factory=Pii)
    code: Code = field(default_factory=Code)
    secrets: Secrets = field(default_factory=Secrets)
    # [lang.XX.STAGE] tables: per-language overrides, on top of the built-in ones (langs.py)
    lang: dict[str, dict] = field(default_factory=dict)

    def stages(self) -> dict:
        return {name: getattr(self, name) for name in STAGES}

    def for_lang(self, lang: str | None) -> tuple[dict, list[str] | None]:
        """The filter stages (and stop words) that apply to a document in `lang`."""
        return resolve(lang, self.stages(), self.lang, self.langid.lang_thresholds)

    # -- building and checking -------------------------------------------------------------
    # A config is built once (defaults, then a TOML file, then flags) and never changed:
    # every step is `dataclasses.replace`, and `validate()` checks the result (exit 2).

    @classmethod
    def from_toml(cls, path: str) -> CleanConfig:
        return cls.from_dict(tomlfile.load(path), path)

    @classmethod
    def from_dict(cls, data: dict, source: str | None = None) -> CleanConfig:
        """The defaults with a TOML document's sections on top (not yet validated: flags may
        still change it). Errors name the key, after `source` (the file): `FILE: KEY: ...`."""
        values: dict[str, object] = {}
        lang: dict[str, dict] = {}
        stages = cls().stages()
        for section, table in data.items():
            if section == "lang":
                if not isinstance(table, dict):
                    raise ConfigError("lang", "must be a table", source=source)
                for code, sub in table.items():
                    check_table(code, sub, stages, source)
                    lang[code] = merge(lang.get(code, {}), sub)
                continue
            if section not in _SECTIONS:
                raise ConfigError(section, "unknown section", source=source)
            if not isinstance(table, dict):
                raise ConfigError(section, "must be a table", source=source)
            values.update({f"{section}.{key}": value for key, value in table.items()})
        return replace(cls(), lang=lang).with_values(values, source)

    def with_values(self, values: dict[str, object], source: str | None = None) -> CleanConfig:
        """A copy with these `section.key` values (each checked against its field's type)."""
        changes: dict[str, dict] = {}
        for dotted, value in values.items():
            section, _, key = dotted.partition(".")
            stage = getattr(self, section) if section in _SECTIONS and section != "lang" else None
            if stage is None or key not in {f.name for f in fields(stage)}:
                raise ConfigError(dotted, "unknown key", source=source)
            value = coerce(value, getattr(stage, key), dotted, source)
            changes.setdefault(section, {})[key] = _CANONICAL.get(dotted, _same)(value)
        return replace(self, **{s: replace(getattr(self, s), **c) for s, c in changes.items()})

    def validate(self) -> None:
        """Raise ConfigError for the first value or combination that cannot run."""
        def fail(key: str, message: str, *also: str) -> None:
            raise ConfigError(key, message, also=also)

        n = self.normalize
        if n.unicode not in ("NFC", "NFKC", "none"):
            fail("normalize.unicode", f"expected nfc, nfkc or none, got {n.unicode!r}")
        if n.fold_width not in ("none", "alnum", "all"):
            fail("normalize.fold_width", f"expected none, alnum or all, got {n.fold_width!r}")
        if n.zh_convert not in ("none", "t2s", "s2t", "tw2s", "s2tw", "hk2s", "s2hk"):
            fail("normalize.zh_convert", f"expected none, t2s or s2t, got {n.zh_convert!r}")
        if self.extract.method not in METHODS:
            fail("extract.method", f"expected {', '.join(METHODS)}, got {self.extract.method!r}")
        bad = set(self.pii.kinds) - set(PII_KINDS)
        if bad:
            fail("pii.kinds", f"unknown kind(s) {sorted(bad)} (expected {', '.join(PII_KINDS)})")
        if self.code.profile not in PROFILES:
            fail("code.profile", f"expected {', '.join(PROFILES)}, got {self.code.profile!r}")
        if self.secrets.scrub not in SECRET_SCRUB:
            fail("secrets.scrub", f"expected {', '.join(SECRET_SCRUB)}, "
                 f"got {self.secrets.scrub!r}")
        if self.secrets.kinds:
            from llmtk.text.secrets import kinds

            bad = set(self.secrets.kinds) - set(kinds())
            if bad:
                fail("secrets.kinds", f"unknown kind(s) {sorted(bad)} "
                     f"(expected {', '.join(kinds())})")
        if self.langid.keep and not self.langid.enabled:
            fail("langid.keep", "needs language ID, which {0} switches off", "langid.enabled")
        if not 0.0 <= self.langid.min_score <= 1.0:
            fail("langid.min_score", "expected a number between 0 and 1")
        if not 0.0 <= self.quality.min_score <= 1.0:
            fail("quality.min_score", "expected a number between 0 and 1")
        ppl = self.perplexity
        if ppl.quantile is not None and not 0.0 < ppl.quantile < 1.0:
            fail("perplexity.quantile", "expected a number between 0 and 1")
        if ppl.max_ppl is not None and ppl.quantile is not None:
            fail("perplexity.max_ppl", "give this or {0}, not both", "perplexity.quantile")
        if ppl.model and ppl.max_ppl is None and ppl.quantile is None:
            fail("perplexity.model", "needs {0} or {1}", "perplexity.max_ppl",
                 "perplexity.quantile")
        if ppl.max_ppl is not None and not ppl.model:
            fail("perplexity.max_ppl", "needs {0}", "perplexity.model")
        if ppl.quantile is not None and not ppl.model:
            fail("perplexity.quantile", "needs {0}", "perplexity.model")

    def to_toml(self) -> str:
        out = [
            "# llmtk clean configuration (llmtk clean --print-config). Thresholds are datatrove's",
            "# defaults for the Gopher, C4 and FineWeb rules. A threshold set to false (-1 reads",
            "# as false) or a section with enabled = false switches a rule or stage off.",
            "# Documents in a language of llmtk/clean/thresholds.toml get its thresholds instead",
            "# (langid.lang_thresholds); [lang.XX.STAGE] tables override them per language.",
        ]
        for section in _SECTIONS:
            if section == "lang":
                continue
            out.append(f"\n[{section}]")
            stage = getattr(self, section)
            for f in fields(stage):
                out.append(f"{f.name} = {_toml_value(getattr(stage, f.name))}")
        out.extend(lang_tables_toml(self.lang))
        return "\n".join(out) + "\n"


_SECTIONS = [f.name for f in fields(CleanConfig)]  # the stage sections, then "lang"


def _same(value):
    return value


def _unicode_form(value: str) -> str:
    """`nfc`, `NFKC`, `None` -> the spelling unicodedata and the output of --print-config use."""
    return "none" if value.lower() == "none" else value.upper()


_CANONICAL = {"normalize.unicode": _unicode_form}


def lang_tables_toml(tables: dict[str, dict], prefix: str = "lang.") -> list[str]:
    """[lang.XX] facts and [lang.XX.STAGE] tables as TOML lines."""
    out: list[str] = []
    for lang, table in tables.items():
        facts = {k: v for k, v in table.items() if not isinstance(v, dict)}
        if facts:
            out.append(f"\n[{prefix}{lang}]")
            out.extend(f"{k} = {_toml_value(v)}" for k, v in facts.items())
        for stage, values in table.items():
            if isinstance(values, dict):
                out.append(f"\n[{prefix}{lang}.{stage}]")
                out.extend(f"{k} = {_toml_value(v)}" for k, v in values.items())
    return out


def _toml_value(v) -> str:
    if v is None:
        return "false"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {v!r} as TOML")
