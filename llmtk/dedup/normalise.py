"""Text normalisation before hashing: the same text up to case, spacing, punctuation, digits.

Used for the exact-duplicate key, for MinHash shingles and for paragraph keys,
so "Hello, World!" and "hello world" are the same document by default.

`Normaliser(text)` is the definition. `Normaliser.batch(texts)` gives the same
strings for a whole batch at once: after lowercasing (str.lower, per document),
the other three steps act on each character alone (drop it, make it "0", treat
it as a space), so they become one table lookup per code point in numpy over
the batch's concatenated code points instead of three regex/str passes per
document (the profile's largest cost). The table is derived from the very regexes
that the definition uses (its \\s is str.isspace, which split() uses), so both
give identical strings (tests/test_dedup_speed.py checks it on all of Unicode).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import xxhash

from llmtk.text.segment import CJK_CHAR

if TYPE_CHECKING:
    import numpy as np

_PUNCT = re.compile(r"[^\w\s]+")  # punctuation and symbols, in any script
_DIGIT = re.compile(r"\d")
_SPACE = re.compile(r"\s")  # the same characters as str.isspace (checked in the tests)

# Bits of the per-code-point class table; KNOWN: the entry has been computed.
PUNCT, DIGIT, SPACE, CJK, KNOWN = 1, 2, 4, 8, 16
_PATTERNS = ((_PUNCT, PUNCT), (_DIGIT, DIGIT), (_SPACE, SPACE), (CJK_CHAR, CJK))
_TABLE: np.ndarray | None = None
BATCH_CHARS = 1 << 20  # characters normalised in one go (bounds the arrays of Normaliser.batch)


def code_point_classes(codes: np.ndarray) -> np.ndarray:
    """The class bits of each code point in `codes` (uint32). Entries are computed from the
    regexes on first sight of a code point (a whole table up front costs ~0.2 s, more than
    a small input takes), then looked up."""
    import numpy as np

    global _TABLE
    if _TABLE is None:
        _TABLE = np.zeros(0x110000, dtype=np.uint8)
    cls = _TABLE[codes]
    unknown = (cls & KNOWN) == 0
    if unknown.any():
        new = np.unique(codes[unknown])
        chars = new.tobytes().decode("utf-32-le", "surrogatepass")
        bits = np.full(len(new), KNOWN, dtype=np.uint8)
        for pattern, bit in _PATTERNS:  # each pattern is one character class: per character
            marked = np.zeros(len(new) + 1, dtype=np.int32)  # +1 at a match's start, -1 at end
            spans = np.array([m.span() for m in pattern.finditer(chars)], dtype=np.int64)
            if len(spans):
                np.add.at(marked, spans[:, 0], 1)
                np.add.at(marked, spans[:, 1], -1)
                bits[np.cumsum(marked[:-1]) > 0] |= bit
        _TABLE[new] = bits
        cls = _TABLE[codes]
    return cls


class Normaliser:
    def __init__(self, steps: tuple[str, ...]) -> None:
        self.lowercase = "lowercase" in steps
        self.whitespace = "whitespace" in steps
        self.punctuation = "punctuation" in steps
        self.digits = "digits" in steps

    def __call__(self, text: str) -> str:
        if self.lowercase:
            text = text.lower()
        if self.punctuation:
            text = _PUNCT.sub("", text)
        if self.digits:
            text = _DIGIT.sub("0", text)
        if self.whitespace:
            text = " ".join(text.split())
        return text

    @property
    def only_words_remain(self) -> bool:
        """After normalisation, is every character a word character (\\w) or whitespace?
        Then the word tokens of a text without CJK characters are its str.split()."""
        return self.punctuation

    def batch(self, texts: list[str]) -> tuple[list[str], np.ndarray]:
        """[self(t) for t in texts] (identical strings), and (D,) int64: how many CJK
        characters (segment's CJK class) each text holds before normalisation removes any
        (lowercasing neither adds nor removes one: the tests check every code point)."""
        import numpy as np

        if self.lowercase:
            texts = [t.lower() for t in texts]
        if sum(map(len, texts)) <= BATCH_CHARS:
            return self._batch_lowered(texts)
        # Memory: ~40 bytes per character for the arrays below; long documents go in groups.
        out: list[str] = []
        counts = []
        group: list[str] = []
        size = 0
        for t in [*texts, None]:
            if t is None or (group and size + len(t) > BATCH_CHARS):
                strings, chars = self._batch_lowered(group)
                out += strings
                counts.append(chars)
                group, size = [], 0
            if t is not None:
                group.append(t)
                size += len(t)
        return out, np.concatenate(counts)

    def _batch_lowered(self, texts: list[str]) -> tuple[list[str], np.ndarray]:
        import numpy as np

        n = len(texts)
        if not (self.punctuation or self.digits or self.whitespace) or n == 0:
            return texts, np.array([len(CJK_CHAR.findall(t)) for t in texts], dtype=np.int64)
        lengths = np.fromiter(map(len, texts), dtype=np.int64, count=n)
        bounds = np.zeros(n + 1, dtype=np.int64)  # document k is codes[bounds[k]:bounds[k+1]]
        np.cumsum(lengths, out=bounds[1:])
        codes = np.frombuffer("".join(texts).encode("utf-32-le", "surrogatepass"), np.uint32)
        cls = code_point_classes(codes)
        keep = np.ones(len(codes), dtype=bool)
        if self.punctuation:
            keep = (cls & PUNCT) == 0
        if self.digits or self.whitespace:
            codes = codes.copy()
        if self.digits:
            codes[keep & ((cls & DIGIT) != 0)] = ord("0")
        if self.whitespace:
            # " ".join(t.split()): a run of spaces becomes one " " if a kept character comes
            # before it in the same document; one left at a document's end is cut below.
            space = keep & ((cls & SPACE) != 0)
            kept = np.flatnonzero(keep)
            sp = space[kept]
            prev_word = np.empty(len(kept), dtype=bool)
            prev_word[1:] = ~sp[:-1]
            prev_word[:1] = False
            # A document's first kept character has nothing before it in its document (a
            # document with none points at a later one's first, which is that one's first).
            first = np.searchsorted(kept, bounds[:-1])
            prev_word[first[first < len(kept)]] = False
            keep[kept[sp & ~prev_word]] = False
            codes[space] = ord(" ")
        kept = np.flatnonzero(keep)
        per_doc = np.diff(np.searchsorted(kept, bounds))  # kept characters per document
        cjk_chars = np.diff(np.searchsorted(np.flatnonzero(cls & CJK), bounds))
        joined = codes[kept].tobytes().decode("utf-32-le", "surrogatepass")
        out, pos = [], 0
        for k in per_doc.tolist():
            t = joined[pos : pos + k]
            pos += k
            if self.whitespace and t.endswith(" "):
                t = t[:-1]
            out.append(t)
        return out, cjk_chars


def text_key(normalised: str) -> int:
    """A stable non-zero 64-bit key of normalised text (0 marks an empty slot in tables)."""
    return xxhash.xxh3_64_intdigest(normalised.encode("utf-8", "surrogatepass")) or 1
