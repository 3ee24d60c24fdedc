"""Lines that repeat across a host's pages: site furniture that no single page gives away.

A documentation site's project header, a blog's tagline, a shop's footer survive a page's
own extraction when nothing in the page marks them; across the pages of one host they are
the lines found again and again at the top or bottom of the text. Two passes over a task's
input (`llmtk clean --host-lines SHARE`):

    counts = HostCounts()
    for host, text in first_pass:                     # the text as the stage will see it
        counts.add(host, line_keys(host, text))
    common = counts.common(share=0.3, min_pages=3)     # a set of (host, line) hashes
    text, top, bottom = strip(host, text, common)      # in the second pass, per page

Rules (chosen on the development half of benchmarks/doc_sites.py, docs/clean.md):
- a line counts once per page, keyed by its host and its text (stripped);
- it is *common* on a host with n pages in the task when it is on at least
  max(min_pages, share * n) of them;
- only the run of common (or blank) lines at the top of a page and the run at its bottom
  are removed: a repeated heading or sentence in the middle of a page ("OPTIONS",
  "Detailed Description") is content;
- code-shaped lines are never removed (indented, starting with a comment or preprocessor
  mark after an optional line number, holding `{ } ; =`), nor lines of fewer than two
  words: a licence header in a source listing, `#include <glib.h>`, a closing `}` or
  `end` repeat on many pages of a manual and are its content.

Memory: the first pass keeps one 64-bit hash and one host number per (page, removable
line), compacted to (hash, host, count) per distinct (host, line) -- 16 bytes each -- so it
grows with the distinct lines of the task's own input, not with the corpus. Counts are
sums, so the result does not depend on the order or the worker count.
"""

from __future__ import annotations

import math
import re
from array import array
from dataclasses import dataclass

import xxhash

from llmtk.clean.urls import host_of


@dataclass(frozen=True)
class HostLines:
    # Off unless set: remove lines found at the top or bottom of at least this share of a
    # host's pages in the task (a first pass over the input counts them).
    share: float | None = None
    min_pages: int = 3  # ... and of at least this many pages (a host with fewer: untouched)
    field: str = "url"  # the record field holding the page's URL (no URL: untouched)


# Code-shaped: indented (a listing keeps its indentation), or a comment / preprocessor mark
# after an optional line number (`002 * Licensed to ...`, `#include`, `// ...`, `-- ...`).
_CODE_START = re.compile(r"\s|\d*\s*(?:[*#;%]|//|/\*|--|<!--)")
_CODE_CHARS = re.compile(r"[{};=]")
_WORD = re.compile(r"[^\W\d_]{2,}")  # a word: two letters or more
COMPACT = 1 << 22  # hashes gathered before they are merged into the counts


def host(url: object) -> str | None:
    """The host a record's URL names (None: no URL, the stage leaves the record alone)."""
    if not isinstance(url, str) or "://" not in url:
        return None
    found = host_of(url)
    return None if found == "unknown" else found.lower()


def removable(line: str) -> bool:
    """A line that may be furniture: not code-shaped, at least two words."""
    if not line.strip() or _CODE_START.match(line) or _CODE_CHARS.search(line):
        return False
    return len(_WORD.findall(line)) >= 2


def key(seed: int, line: str) -> int:
    return xxhash.xxh3_64_intdigest(line.strip().encode(), seed)


def seed_of(host_name: str) -> int:
    return xxhash.xxh3_64_intdigest(host_name.encode())


def line_keys(host_name: str, text: str) -> list[int]:
    """The distinct keys of a page's removable lines (each counts once per page)."""
    seed = seed_of(host_name)
    return list({key(seed, line) for line in text.split("\n") if removable(line)})


class HostCounts:
    """Pages per host and pages per (host, line), from the first pass."""

    def __init__(self) -> None:
        self.pages: dict[str, int] = {}
        self._index: dict[str, int] = {}  # host -> its number
        self._keys = array("Q")  # gathered since the last compaction
        self._hosts = array("I")
        self._merged = None  # (keys, hosts, counts) numpy arrays, keys sorted and distinct

    def add(self, host_name: str, keys: list[int]) -> None:
        self.pages[host_name] = self.pages.get(host_name, 0) + 1
        number = self._index.setdefault(host_name, len(self._index))
        self._keys.extend(keys)
        self._hosts.extend([number] * len(keys))
        if len(self._keys) >= COMPACT:
            self._compact()

    def _compact(self) -> None:
        import numpy as np

        if not self._keys and self._merged is not None:
            return
        keys = np.frombuffer(self._keys, dtype=np.uint64)
        hosts = np.frombuffer(self._hosts, dtype=np.uint32)
        counts = np.ones(len(keys), dtype=np.uint32)
        if self._merged is not None:
            keys, hosts, counts = (np.concatenate([a, b]) for a, b in
                                   zip(self._merged, (keys, hosts, counts), strict=True))
        order = np.argsort(keys, kind="stable")
        keys, hosts, counts = keys[order], hosts[order], counts[order]
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        self._merged = (keys[starts], hosts[starts],
                        np.add.reduceat(counts, starts) if len(keys) else counts)
        self._keys, self._hosts = array("Q"), array("I")

    def nbytes(self) -> int:
        """Bytes held by the counts (the first pass's memory, beside the page counts)."""
        merged = sum(a.nbytes for a in self._merged) if self._merged is not None else 0
        return merged + self._keys.itemsize * len(self._keys) + 4 * len(self._hosts)

    def common(self, share: float, min_pages: int) -> frozenset[int]:
        """The keys of lines on at least max(min_pages, share * pages) of their host's pages."""
        import numpy as np

        self._compact()
        keys, hosts, counts = self._merged
        need = np.array([max(min_pages, math.ceil(share * self.pages[h] - 1e-9))
                         for h in self._index], dtype=np.uint32)
        if not len(keys):
            return frozenset()
        # a key is one (host, line): its host's threshold applies
        return frozenset(keys[counts >= need[hosts]].tolist())


def strip(host_name: str, text: str, common: frozenset[int]) -> tuple[str, int, int]:
    """The page without the common lines at its top and bottom (and the blank lines around
    them): (text, lines removed at the top, at the bottom). Unchanged when none is found."""
    if not common:
        return text, 0, 0
    seed = seed_of(host_name)

    def furniture(line: str) -> bool:
        return removable(line) and key(seed, line) in common

    lines = text.split("\n")
    top = _edge(lines, furniture)
    rest = lines[top:]
    bottom = _edge(rest[::-1], furniture)
    if not top and not bottom:
        return text, 0, 0
    kept = rest[:len(rest) - bottom]
    removed = lines[:top], rest[len(rest) - bottom:]
    return "\n".join(kept), *(sum(1 for x in part if x.strip()) for part in removed)


def _edge(lines: list[str], furniture) -> int:
    """How many lines at the start of `lines` go: the run of blank and furniture lines
    before the first other line, when it holds a furniture line (else none)."""
    found = False
    for i, line in enumerate(lines):
        if furniture(line):
            found = True
        elif line.strip():
            return i if found else 0
    return len(lines) if found else 0
