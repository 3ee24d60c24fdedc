"""Word n-gram hashes, the unit of every contamination rule here.

Text is normalised the way GPT-3's and PaLM's checks did (lowercase, words
only, punctuation ignored), segmented CJK-aware (`llmtk.text.segment.words`:
one unit per Chinese/Japanese character), each word hashed with xxh64, and an
n-gram's hash is a fixed polynomial combination of its words' hashes (64-bit
wrap-around), computed for a whole document at once with numpy. Exact
hashing, not a Bloom filter: with 64-bit hashes a false match needs a
collision among ~10^10 n-grams, which is negligible.
"""

from __future__ import annotations

import xxhash

from llmtk.text.segment import word_spans, words

# Odd 64-bit multipliers for the polynomial combination; fixed forever (the
# hashes of an index must not change between versions).
_BASE = 0x9E3779B97F4A7C15


def word_hashes(text: str):
    """uint64 array of the hashes of the text's lowercased words."""
    import numpy as np

    toks = words(text.lower())
    return np.fromiter((xxhash.xxh64_intdigest(t.encode()) for t in toks), dtype=np.uint64,
                       count=len(toks))


def mask_ngrams(text: str, n: int, matched, token: str) -> tuple[str, int]:
    """Replace every run of words covered by a matched n-gram with `token`.

    Returns the new text and the number of runs replaced. Works on the original
    text's word positions, so everything outside the matched runs (case,
    punctuation, spacing) is kept as it was. Returns 0 runs when lowercasing
    changed the word segmentation (a few exotic characters), so the caller can
    fall back to dropping the document.
    """
    import numpy as np

    spans = word_spans(text)
    hashes = word_hashes(text)
    if len(spans) != len(hashes):
        return text, 0
    grams = ngram_hashes(hashes, n)
    hit = np.flatnonzero(np.isin(grams, matched)).tolist()
    covered = [False] * len(spans)
    for i in hit:
        for k in range(i, i + n):
            covered[k] = True
    out, pos, runs, i = [], 0, 0, 0
    while i < len(spans):
        if not covered[i]:
            i += 1
            continue
        j = i
        while j + 1 < len(spans) and covered[j + 1]:
            j += 1
        out.append(text[pos:spans[i][0]])
        out.append(token)
        pos = spans[j][1]
        runs += 1
        i = j + 1
    out.append(text[pos:])
    return "".join(out), runs


def ngram_hashes(hashes, n: int):
    """uint64 hashes of all n-grams of a word-hash array (empty if fewer than n words)."""
    import numpy as np

    m = len(hashes) - n + 1
    if m <= 0:
        return np.empty(0, dtype=np.uint64)
    out = np.zeros(m, dtype=np.uint64)
    mult = np.uint64(1)
    with np.errstate(over="ignore"):
        for k in range(n):  # out = sum_k h[i+k] * BASE^k  (mod 2^64)
            out += hashes[k:k + m] * mult
            mult = mult * np.uint64(_BASE)
    return out
