"""`llmtk clean` configuration: one dataclass per stage, read from and printed as TOML.

`llmtk clean --print-config` prints `CleanConfig()` as TOML; `--config FILE` reads such a
file (any subset of sections and keys); command-line flags then override single values.
Unknown sections or keys are an error, so a typo never silently keeps a default.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields

from llmtk.clean.filters import C4, FineWeb, GopherQuality, GopherRepetition
from llmtk.clean.normalize import Normalize
from llmtk.errors import UsageError


@dataclass
class LangId:
    enabled: bool = True
    keep: list[str] = field(default_factory=list)  # empty: keep every language
    min_score: float = 0.65  # datatrove's LanguageFilter default; applies when `keep` is set


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
                setattr(stage, key, _coerce(value, default, f"{section}.{key}", where))
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
            "# with enabled = false switches a rule or stage off.",
        ]
        for section in _SECTIONS:
            out.append(f"\n[{section}]")
            stage = getattr(self, section)
            for f in fields(stage):
                out.append(f"{f.name} = {_toml_value(getattr(stage, f.name))}")
        return "\n".join(out) + "\n"


_SECTIONS = [f.name for f in fields(CleanConfig)]


def _coerce(value, default, key: str, where: str):
    """Check a TOML value against the default's type (None defaults accept numbers/false)."""
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise UsageError(f"--config: {where}: {key} must be true or false")
        return value
    if default is None or isinstance(default, int | float):
        if value is False:
            return None  # `false` switches a numeric threshold off
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise UsageError(f"--config: {where}: {key} must be a number (or false)")
        return value
    if isinstance(default, str):
        if not isinstance(value, str):
            raise UsageError(f"--config: {where}: {key} must be a string")
        return value
    if isinstance(default, list):
        if not isinstance(value, list):
            raise UsageError(f"--config: {where}: {key} must be a list")
        return value
    return value


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
