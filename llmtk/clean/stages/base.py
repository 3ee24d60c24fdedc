"""What a clean stage is: the base class every stage of `llmtk.clean.stages.PIPELINE` extends.

A stage is one step of `llmtk clean` (URL filter, extraction, language ID, a filter, a
scrubber, ...), declared once in its own module:

- `name`: its TOML section, its attribute of `CleanConfig` and the prefix of its keys;
- `config`: a frozen dataclass whose defaults are the stage's defaults;
- `flags`: the command-line options that set its fields (`llmtk clean`'s options are made
  from them, with each field's type and default);
- `help`, `reasons`: one line (above its table in --print-config) and the drop reasons it
  can give;
- `validate(cfg)`: raise ConfigError for a value that cannot run;
- `on(cfg, whole)`: whether it runs at all (a stage that is off costs nothing per document);
- `reads(cfg)`: its model files (no output may be one); `load()`: load them before any
  input is read; `fit(docs, workers)`, for a stage with `fits()`: a first pass over the
  input (the perplexity quantile, the host lines);
- `check(work) -> reason | None`: the per-document step (datatrove's filter shape).

`Work` is one document on its way through the stages: the text as the stages change it,
the language found, the road (prose, or source code: another set of stages), the notes
--annotate writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from llmtk.errors import ConfigError
from llmtk.io import Doc

WEB, CODE = "web", "code"  # the two roads a record takes (llmtk.clean.code decides)


@dataclass(frozen=True)
class Flag:
    """How `llmtk clean` shows one field of a stage's config as an option. Its type and
    default are the field's; `kind` names the option's type where it differs (a comma list
    for a list), `value` turns the option's value into the field's."""

    key: str  # the field
    flags: tuple[str, ...]  # e.g. ("--min-quality",) or ("--pii/--no-pii",)
    help: str
    kind: type | None = None
    value: Callable[[Any], Any] | None = None
    off: bool = False  # a lone `--no-X` switch: given, it sets the field to false
    show_default: bool = True  # help ends with `[default: X]` (the field's default)

    @property
    def flag(self) -> str:
        return self.flags[0].split("/")[0]


def split_list(value: str) -> list[str]:
    """`en, zh` -> ["en", "zh"]: a comma-separated option for a list field."""
    return [x.strip() for x in value.split(",") if x.strip()]


def one_of(key: str, value: str, allowed: Iterable[str], words: str | None = None) -> None:
    """Refuse `value` unless it is one of `allowed` (ConfigError naming `key`)."""
    allowed = tuple(allowed)
    if value not in allowed:
        raise ConfigError(key, f"expected {words or ', '.join(allowed)}, got {value!r}")


def share(key: str, value: float) -> None:
    """Refuse a number outside [0, 1]."""
    if not 0.0 <= value <= 1.0:
        raise ConfigError(key, "expected a number between 0 and 1")


class Stage:
    """One step of clean. Subclasses set the class attributes and override what they use;
    an instance is the stage of one run (picklable: models load lazily per process)."""

    name: ClassVar[str]
    config: ClassVar[type]
    help: ClassVar[str]
    reasons: ClassVar[tuple[str, ...]] = ()
    flags: ClassVar[tuple[Flag, ...]] = ()
    roads: ClassVar[tuple[str, ...]] = (WEB,)  # the roads whose records it sees
    per_lang: ClassVar[bool] = False  # a heuristic filter: thresholds per language, --filters
    canonical: ClassVar[dict[str, Callable]] = {}  # field -> its value's one spelling

    def __init__(self, cfg: Any, whole: Any) -> None:
        self.cfg = cfg

    @classmethod
    def validate(cls, cfg: Any) -> None:
        """Raise ConfigError for the first value that cannot run."""

    @classmethod
    def on(cls, cfg: Any, whole: Any) -> bool:
        """Whether the stage runs (`whole`: the CleanConfig, for a stage that another's
        setting switches off)."""
        return True

    @classmethod
    def reads(cls, cfg: Any) -> list[str]:
        """The files it reads besides the input (models): no output may be one of them."""
        return []

    def load(self) -> None:
        """Load models now, to fail on a bad path before any input is read."""

    def fits(self) -> str | None:
        """The config key that asks for a first pass over the input (None: no first pass)."""
        return None

    def fit(self, docs: Iterable[Doc], workers: int, before: Callable[[Doc], Work | None]) -> str:
        """Learn from a first pass over the input; returns a line for the user. `before(doc)`
        runs the stages before this one on a record: its Work, or None if one dropped it."""
        raise NotImplementedError

    def check(self, work: Work) -> str | None:
        raise NotImplementedError


class ModelStage(Stage):
    """A stage that scores with the model file its config's `model` names (empty: off);
    `__init__` sets `self.model` (loaded lazily, per process)."""

    model: Any

    @classmethod
    def on(cls, cfg: Any, whole: Any) -> bool:
        return bool(cfg.model)

    @classmethod
    def reads(cls, cfg: Any) -> list[str]:
        return [cfg.model] if cfg.model else []

    def load(self) -> None:
        self.model.load()


class Work:
    """One document on its way through the stages (a fresh one per document)."""

    __slots__ = ("doc", "data", "notes", "dry_run", "text", "original", "road", "html",
                 "lang", "scrubbed", "_plan", "_prose")

    def __init__(self, doc: Doc, notes: dict | None, dry_run: bool,
                 plan: Callable[[str | None], tuple[dict, list[str] | None]]) -> None:
        self.doc = doc
        self.data = doc.data
        self.notes = notes  # a dict with --annotate (what it writes under `llmtk`), else None
        self.dry_run = dry_run
        self.text = self.original = doc.text
        self.road = WEB
        self.html = False  # extracted from HTML: the record's content_type becomes text/plain
        self.lang: str | None = None  # the language ID's answer (None: not asked)
        self.scrubbed = False  # a scrubber ran: the record is written from its parsed form
        self._plan = plan
        self._prose = None

    def note(self, key: str, value: Any) -> None:
        if self.notes is not None:
            self.notes[key] = value

    def values(self) -> dict | None:
        """A dict for a rule's measured values when --annotate wants them, else None."""
        return {} if self.notes is not None else None

    def filters(self) -> dict:
        """The heuristic filters that apply to the document's language, by name."""
        return self._plan(self.lang)[0]

    def prose(self):
        """(the heuristic filters' configs for the document's language, its DocText,
        its Profile), made once, when the first filter asks."""
        if self._prose is None:
            from llmtk.clean.filters import DocText, Profile
            from llmtk.text.segment import is_cjk

            filters, words = self._plan(self.lang)
            lang, text = self.lang, self.text
            profile = Profile.for_lang(lang, cjk_text=lang is None and is_cjk(text), words=words)
            self._prose = (filters, DocText(text, lang, profile.char_words), profile)
        return self._prose
