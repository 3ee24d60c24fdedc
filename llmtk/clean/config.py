"""`llmtk clean` configuration: one dataclass per stage, read from and printed as TOML.

`llmtk clean --print-config` prints `CleanConfig()` as TOML; `--config FILE` reads such a
file (any subset of sections and keys); command-line flags then override single values.
Unknown sections or keys are an error, so a typo never silently keeps a default.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields

from llmtk.clean.filters import C4, FineWeb, GopherQuality, GopherRepetition
from llmtk.clean.langs import STAGES, check_table, coerce, merge, resolve
from llmtk.clean.normalize import Normalize
from llmtk.errors import UsageError


@dataclass
class LangId:
    enabled: bool = True
    keep: list[str] = field(default_factory=list)  # empty: keep every language
    min_score: float = 0.65  # datatrove's LanguageFilter default; applies when `keep` is set
    # Apply the built-in per-language thresholds (llmtk/clean/thresholds.toml, FineWeb-2's
    # figures) to documents identified as one of its languages.
    lang_thresholds: bool = True


@dataclass
class Quality:
    model: str = ""  # a fastText classifier (.bin/.ftz); empty: stage off
    min_score: float = 0.5
    label: str = "hq"  # the positive label (DCLM's classifier: hq vs cc)


@dataclass
class Perplexity:
    model: str = ""  # an llmtk train checkpoint (run dir or step dir); empty: stage off
    max_ppl: float | None = None  # drop documents above this perplexity
    quantile: float | None = None  # or: drop those above this quantile of the input's
    max_tokens: int = 4096  # score at most this many tokens of a document


@dataclass
class Pii:
    enabled: bool = True
    kinds: list[str] = field(default_factory=lambda: ["EMAIL", "PHONE", "ID_NUMBER", "CARD", "IP"])


@dataclass
class CleanConfig:
    normalize: Normalize = field(default_factory=Normalize)
    langid: LangId = field(default_factory=LangId)
    gopher_repetition: GopherRepetition = field(default_factory=GopherRepetition)
    gopher_quality: GopherQuality = field(default_factory=GopherQuality)
    c4: C4 = field(default_factory=C4)
    fineweb: FineWeb = field(default_factory=FineWeb)
    quality: Quality = field(default_factory=Quality)
    perplexity: Perplexity = field(default_factory=Perplexity)
    pii: Pii = field(default_factory=Pii)
    # [lang.XX.STAGE] tables: per-language overrides, on top of the built-in ones (langs.py)
    lang: dict[str, dict] = field(default_factory=dict)

    def stages(self) -> dict:
        return {name: getattr(self, name) for name in STAGES}

    def for_lang(self, lang: str | None) -> tuple[dict, list[str] | None]:
        """The filter stages (and stop words) that apply to a document in `lang`."""
        return resolve(lang, self.stages(), self.lang, self.langid.lang_thresholds)

    # -- TOML ------------------------------------------------------------------------------

    @classmethod
    def from_toml(cls, path: str) -> CleanConfig:
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except OSError as e:
            raise UsageError(f"--config: cannot read {path}: {e.strerror}") from None
        except tomllib.TOMLDecodeError as e:
            raise UsageError(f"--config: {path}: {e}") from None
        return cls.from_dict(data, path)

    @classmethod
    def from_dict(cls, data: dict, where: str = "config") -> CleanConfig:
        cfg = cls()
        for section, values in data.items():
            if section == "lang":
                if not isinstance(values, dict):
                    raise UsageError(f"--config: {where}: [lang] must be a table")
                for lang, table in values.items():
                    check_table(lang, table, cfg.stages(), where)
                    cfg.lang[lang] = merge(cfg.lang.get(lang, {}), table)
                continue
            if section not in _SECTIONS:
                raise UsageError(f"--config: {where}: unknown section [{section}]")
            if not isinstance(values, dict):
                raise UsageError(f"--config: {where}: [{section}] must be a table")
            stage = getattr(cfg, section)
            names = {f.name: f for f in fields(stage)}
            for key, value in values.items():
                if key not in names:
                    raise UsageError(f"--config: {where}: unknown key {section}.{key}")
                default = getattr(stage, key)
                setattr(stage, key, coerce(value, default, f"{section}.{key}", where))
        cfg.validate()
        return cfg

    def validate(self) -> None:
        n = self.normalize
        if n.unicode.upper() not in ("NFC", "NFKC", "NONE"):
            raise UsageError(f"normalize.unicode: expected NFC, NFKC or none, got {n.unicode!r}")
        n.unicode = "none" if n.unicode.lower() == "none" else n.unicode.upper()
        if n.fold_width not in ("none", "alnum", "all"):
            raise UsageError(
                f"normalize.fold_width: expected none, alnum or all, got {n.fold_width!r}"
            )
        if n.zh_convert not in ("none", "t2s", "s2t", "tw2s", "s2tw", "hk2s", "s2hk"):
            raise UsageError(
                f"normalize.zh_convert: expected none, t2s or s2t, got {n.zh_convert!r}"
            )
        if n.html not in ("off", "auto", "always"):
            raise UsageError(f"normalize.html: expected off, auto or always, got {n.html!r}")
        bad = set(self.pii.kinds) - {"EMAIL", "PHONE", "ID_NUMBER", "CARD", "IP"}
        if bad:
            raise UsageError(f"pii.kinds: unknown kind(s) {sorted(bad)}")
        if not 0.0 <= self.langid.min_score <= 1.0:
            raise UsageError("langid.min_score: expected a number between 0 and 1")
        if not 0.0 <= self.quality.min_score <= 1.0:
            raise UsageError("quality.min_score: expected a number between 0 and 1")
        ppl = self.perplexity
        if ppl.quantile is not None and not 0.0 < ppl.quantile < 1.0:
            raise UsageError("perplexity.quantile: expected a number between 0 and 1")
        if ppl.max_ppl is not None and ppl.quantile is not None:
            raise UsageError("perplexity.max_ppl and perplexity.quantile: give one, not both")
        if ppl.model and ppl.max_ppl is None and ppl.quantile is None:
            raise UsageError("perplexity.model needs perplexity.max_ppl or perplexity.quantile")
        if (ppl.max_ppl is not None or ppl.quantile is not None) and not ppl.model:
            raise UsageError("perplexity.max_ppl/quantile need perplexity.model")

    def to_toml(self) -> str:
        out = [
            "# llmtk clean configuration (llmtk clean --print-config). Thresholds are datatrove's",
            "# defaults for the Gopher, C4 and FineWeb rules. A key set to false/-1 or a section",
            "# with enabled = false switches a rule or stage off. Documents in a language of",
            "# llmtk/clean/thresholds.toml get its thresholds instead (langid.lang_thresholds);",
            "# [lang.XX.STAGE] tables override them per language.",
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


_SECTIONS = [f.name for f in fields(CleanConfig)]


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
