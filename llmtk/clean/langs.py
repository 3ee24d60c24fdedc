"""Per-language thresholds: the built-in table and the user's `[lang.XX]` overrides.

The built-in table is `thresholds.toml` next to this file (FineWeb-2's per-language figures,
its header names the source). A language's table holds a few facts (`source`,
`glotlid_score`, `stop_words`) and one sub-table per filter stage whose keys are the stage's
config keys, e.g.

    [de.gopher_quality]
    min_alpha_words_ratio = 0.774

`resolve(lang, ...)` merges the built-in table (unless switched off) with the user's, key by
key, the user's last. English has no entry and uses the global sections.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import fields, replace
from importlib import resources

from llmtk.clean.stages import PER_LANG
from llmtk.errors import ConfigError

FACTS = ("source", "glotlid_score", "stop_words")


@functools.cache
def builtin() -> dict[str, dict]:
    """The package's per-language table (read once per process)."""
    data = resources.files("llmtk.clean").joinpath("thresholds.toml").read_bytes()
    return tomllib.loads(data.decode("utf-8"))


def check_table(lang: str, table: object, stages: dict, source: str | None) -> None:
    """Refuse unknown keys and wrongly typed values in one language's table (exit 2)."""
    if not isinstance(table, dict):
        raise ConfigError(f"lang.{lang}", "must be a table", source=source)
    for key, value in table.items():
        if key in FACTS:
            if key == "stop_words" and not (
                isinstance(value, list) and all(isinstance(w, str) for w in value)
            ):
                raise ConfigError(f"lang.{lang}.stop_words", "must be a list of strings",
                                  source=source)
            continue
        if key not in PER_LANG:
            raise ConfigError(f"lang.{lang}.{key}", "unknown key (expected one of "
                              f"{', '.join(PER_LANG + FACTS)})", source=source)
        if not isinstance(value, dict):
            raise ConfigError(f"lang.{lang}.{key}", "must be a table", source=source)
        names = {f.name for f in fields(stages[key])}
        for k, v in value.items():
            if k not in names:
                raise ConfigError(f"lang.{lang}.{key}.{k}", "unknown key", source=source)
            coerce(v, getattr(stages[key], k), f"lang.{lang}.{key}.{k}", source)


def merge(*tables: dict) -> dict:
    """Tables merged key by key (one level of sub-tables), later ones winning."""
    out: dict = {}
    for t in tables:
        for key, value in t.items():
            if isinstance(value, dict):
                out[key] = {**out.get(key, {}), **value}
            else:
                out[key] = value
    return out


def resolve(lang: str | None, stages: dict, user: dict[str, dict], use_builtin: bool = True
            ) -> tuple[dict, list[str] | None]:
    """The stage objects for `lang` and its stop words (None: the default list).

    `stages` maps a stage name to its global config object; the result has new objects for
    the stages a language table changes and the same objects otherwise.
    """
    if lang is None:
        return dict(stages), None
    table = merge(builtin().get(lang, {}) if use_builtin else {}, user.get(lang, {}))
    out = dict(stages)
    for name in PER_LANG:
        changes = table.get(name)
        if changes:
            out[name] = replace(stages[name], **{
                k: coerce(v, getattr(stages[name], k), f"lang.{lang}.{name}.{k}")
                for k, v in changes.items()
            })
    return out, table.get("stop_words")


# The Gopher limits whose rule reads 0 as "off" (datatrove's falsy tests): 0 there is refused,
# so that a number is always a limit and `false` the one way to switch a rule off.
ZERO_WAS_OFF = {
    "gopher_quality": ("max_doc_words", "max_avg_word_length", "max_symbol_word_ratio",
                       "max_bullet_lines_ratio", "max_ellipsis_lines_ratio"),
    "gopher_repetition": ("dup_line_frac", "dup_para_frac", "dup_line_char_frac",
                          "dup_para_char_frac"),
}


def coerce(value, default, key: str, source: str | None = None):
    """Check a TOML value against the default's type (None defaults accept numbers/false).

    Switching a filter threshold off (docs/clean.md, "Switching a rule off"): `false` (None
    in Python), for a number or a list alike; -1, datatrove's spelling, reads as `false`."""
    def fail(message: str):
        raise ConfigError(key, message, source=source)

    stage, _, name = key.rpartition(".")
    stage = stage.rpartition(".")[2]
    if isinstance(default, bool):
        if not isinstance(value, bool):
            fail("must be true or false")
        return value
    if default is None or isinstance(default, int | float):
        if value is False:
            return None  # `false` switches a numeric threshold off
        if isinstance(value, bool) or not isinstance(value, int | float):
            fail("must be a number (or false)")
        if stage in PER_LANG and value == -1:
            return None  # datatrove's C4/FineWeb spelling of "off"
        if value == 0 and name in ZERO_WAS_OFF.get(stage, ()):
            fail("0 does not switch a rule off: write false (or give a positive limit)")
        return value
    if isinstance(default, str):
        if not isinstance(value, str):
            fail("must be a string")
        return value
    if isinstance(default, list):
        if value is False:
            return []  # an empty list of n-gram rules: off
        if not isinstance(value, list):
            fail("must be a list (or false)")
        return value
    return value
