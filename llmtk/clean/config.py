"""`llmtk clean` configuration: one dataclass per stage, read from and printed as TOML.

`llmtk clean --print-config` prints `CleanConfig()` as TOML; `--config FILE` reads such a
file (any subset of sections and keys); command-line flags then override single values.
Unknown sections or keys are an error, so a typo never silently keeps a default.
"""

from __future__ import annotations

from dataclasses import field, fields, make_dataclass, replace

from llmtk.clean.langs import check_table, coerce, merge, resolve
from llmtk.clean.stages import PER_LANG, PIPELINE
from llmtk.errors import ConfigError
from llmtk.io import tomlfile


class _CleanConfig:
    """CleanConfig's methods; its fields, one per stage of PIPELINE in its order (each the
    stage's frozen config), then `lang`, are made below."""

    def stages(self) -> dict:
        return {name: getattr(self, name) for name in PER_LANG}

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
            canonical = _CANONICAL[section].get(key)
            changes.setdefault(section, {})[key] = canonical(value) if canonical else value
        return replace(self, **{s: replace(getattr(self, s), **c) for s, c in changes.items()})

    def validate(self) -> None:
        """Raise ConfigError for the first value that cannot run, stage by stage."""
        for stage in PIPELINE:
            stage.validate(getattr(self, stage.name))

    def to_toml(self) -> str:
        out = [
            "# llmtk clean configuration (llmtk clean --print-config). Thresholds are datatrove's",
            "# defaults for the Gopher, C4 and FineWeb rules. A threshold set to false (-1 reads",
            "# as false) or a section with enabled = false switches a rule or stage off.",
            "# Documents in a language of llmtk/clean/thresholds.toml get its thresholds instead",
            "# (langid.lang_thresholds); [lang.XX.STAGE] tables override them per language.",
        ]
        for stage in PIPELINE:  # in the order they run, each under its one line of help
            out.append(f"\n# {stage.help}\n[{stage.name}]")
            cfg = getattr(self, stage.name)
            for f in fields(cfg):
                out.append(f"{f.name} = {_toml_value(getattr(cfg, f.name))}")
        out.extend(lang_tables_toml(self.lang))
        return "\n".join(out) + "\n"


# frozen: built once (defaults, then a TOML file, then flags), each step a `replace`
CleanConfig = make_dataclass(
    "CleanConfig",
    [*((s.name, s.config, field(default_factory=s.config)) for s in PIPELINE),
     # [lang.XX.STAGE] tables: per-language overrides, on top of the built-in ones (langs.py)
     ("lang", dict, field(default_factory=dict))],
    bases=(_CleanConfig,), frozen=True)
CleanConfig.__module__ = __name__  # pickled to --workers processes by this name
_SECTIONS = [f.name for f in fields(CleanConfig)]  # the stage sections, then "lang"
_CANONICAL = {s.name: s.canonical for s in PIPELINE}  # key -> the value's one spelling


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
