"""Text normalisation before hashing: the same text up to case, spacing, punctuation, digits.

Used for the exact-duplicate key, for MinHash shingles and for paragraph keys,
so "Hello, World!" and "hello world" are the same document by default.
"""

from __future__ import annotations

import re

import xxhash

_PUNCT = re.compile(r"[^\w\s]+")  # punctuation and symbols, in any script
_DIGIT = re.compile(r"\d")


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


def text_key(normalised: str) -> int:
    """A stable non-zero 64-bit key of normalised text (0 marks an empty slot in tables)."""
    return xxhash.xxh3_64_intdigest(normalised.encode("utf-8", "surrogatepass")) or 1
