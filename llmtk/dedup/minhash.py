"""Shingles and MinHash signatures, computed for a whole batch of documents at once.

Shingle hashes: each token is hashed once with xxh3-64 (a CJK character's code
point goes through a 64-bit mixer instead), and the n tokens of an n-gram are
combined with a polynomial over uint64 plus a final avalanche mix, all in
numpy. That gives the same stable 64-bit shingle hashes as hashing every
joined n-gram string, without building the strings.

Permutations: h_i(x) = a_i * x + b_i (mod 2^64) with a_i odd, a bijection on
64-bit values (datatrove uses the same form, modulo 2^61 - 1). The shingle
hashes are already uniformly mixed, so the minimum of h_i over a document's
shingles behaves as a min-wise hash; the Jaccard estimates are checked against
datasketch and exact Jaccard in tests and benchmarks/dedup_quality.py.

A batch's shingles are laid out as one (S,) array; the (P, S) matrix of
permuted values is built in blocks that fit in cache and reduced per document
with np.minimum.reduceat along its rows.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import xxhash

from llmtk.dedup.config import DedupConfig
from llmtk.dedup.normalise import Normaliser, text_key
from llmtk.text.segment import is_cjk, words

if TYPE_CHECKING:
    import numpy as np

_NGRAM_MUL = 0x9E3779B97F4A7C15  # odd 64-bit constant (golden ratio) for the n-gram polynomial
_ROW_MUL = 0xBF58476D1CE4E5B9
BLOCK_SHINGLES = 4096  # columns of the (P, S) block: 112 x 4096 x 8 B = 3.7 MB, cache-sized


def fmix64(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser: every input bit affects every output bit. In place."""
    import numpy as np

    x ^= x >> np.uint64(33)
    x *= np.uint64(0xFF51AFD7ED558CCD)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xC4CEB9FE1A85EC53)
    x ^= x >> np.uint64(33)
    return x


def _stable_u64(seed: int, label: str, count: int) -> np.ndarray:
    """count stable pseudo-random uint64s from xxhash (independent of numpy's RNG versions)."""
    import numpy as np

    return np.array(
        [xxhash.xxh3_64_intdigest(f"{label}:{i}".encode(), seed=seed) for i in range(count)],
        dtype=np.uint64,
    )


# Code tokens (--unit code): identifiers and keywords, numbers, and each operator or
# bracket character, so that a renamed variable changes one token and a reformatted line
# none (whitespace is not a token).
_CODE_TOKEN = re.compile(r"[^\W\d]\w*|\d\w*|[^\w\s]")


def code_tokens(text: str) -> list[str]:
    return _CODE_TOKEN.findall(text)


class _TokenHashes(dict):
    """token -> xxh3-64, computed on first sight (words are Zipf-distributed: most repeat)."""

    def __missing__(self, token: str) -> int:
        h = self[token] = xxhash.xxh3_64_intdigest(token.encode("utf-8", "surrogatepass"))
        return h


TOKEN_CACHE_MAX = 1 << 20


class MinHasher:
    """Turns texts into exact keys, MinHash signatures and LSH band keys."""

    def __init__(self, config: DedupConfig) -> None:
        import numpy as np

        self.config = config
        steps = config.normalise
        if config.unit == "code":
            # Operators are code tokens: with punctuation normalised away `a - b` and
            # `a + b` would be one text.
            steps = tuple(s for s in steps if s != "punctuation")
        self.normalise = Normaliser(steps)
        p = config.permutations
        self.a = _stable_u64(config.seed, "a", p) | np.uint64(1)  # odd: a bijection mod 2^64
        self.b = _stable_u64(config.seed, "b", p)
        self.band_salt = _stable_u64(config.seed, "band", config.bands)
        self._tokens = _TokenHashes()

    # -- shingles ------------------------------------------------------------

    def unit_for(self, text: str, cjk_chars: int | None = None) -> str:
        """--unit, or for auto: char for CJK text (cjk_chars: its CJK count, if known)."""
        unit = self.config.unit
        if unit == "auto":
            return "char" if is_cjk(text, cjk_chars=cjk_chars) else "word"
        return unit

    def token_hashes(self, normalised: str, unit: str) -> np.ndarray:
        """(T,) uint64: one hash per word, or per non-space character."""
        import numpy as np

        if unit == "char":
            chars = "".join(normalised.split())
            codes = np.frombuffer(chars.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
            return fmix64(codes.astype(np.uint64) + np.uint64(0x632BE59BD9B4E019))
        if unit == "code":
            return self._word_hashes(code_tokens(normalised))
        return self._word_hashes(words(normalised))

    def _word_hashes(self, toks: list[str]) -> np.ndarray:
        import numpy as np

        if len(self._tokens) > TOKEN_CACHE_MAX:
            self._tokens.clear()
        return np.fromiter(map(self._tokens.__getitem__, toks), dtype=np.uint64, count=len(toks))

    def shingles(self, text: str, normalised: str | None = None) -> np.ndarray:
        """(S,) uint64 hashes of the document's n-grams (a document shorter than n is one
        shingle; an empty one has none)."""

        if normalised is None:
            normalised = self.normalise(text)
        return self._ngrams(self.token_hashes(normalised, self.unit_for(text)))

    # -- signatures ----------------------------------------------------------

    def signatures(self, shingle_sets: list[np.ndarray]) -> np.ndarray:
        """(D, P) uint64 MinHash signatures; rows of documents without shingles are all-max."""
        import numpy as np

        counts = np.array([len(x) for x in shingle_sets], dtype=np.int64)
        x = np.concatenate(shingle_sets) if shingle_sets else np.zeros(0, np.uint64)
        return self.signatures_flat(x.astype(np.uint64, copy=False), counts)

    def signatures_flat(self, x: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Signatures of D documents whose shingles lie back to back in x (S,); counts (D,).

        The permuted values are laid out permutation-major, (P, s) per block: the
        multiply, add and per-document minimum then run along contiguous rows, which
        numpy vectorises (about twice as fast as the (s, P) layout).
        """
        import numpy as np

        d, p = len(counts), self.config.permutations
        sig = np.full((p, d), np.iinfo(np.uint64).max, dtype=np.uint64)  # transposed
        starts = np.concatenate(([0], np.cumsum(counts)))  # (D + 1,)
        a, b = self.a[:, None], self.b[:, None]  # (P, 1)
        buf = np.empty(p * min(int(starts[-1]), BLOCK_SHINGLES), dtype=np.uint64)
        i = 0
        while i < d:
            # Whole documents, at most BLOCK_SHINGLES shingles (or one bigger document).
            j = max(i + 1, int(np.searchsorted(starts, starts[i] + BLOCK_SHINGLES, "right")) - 1)
            j = min(j, d)
            if j == i + 1 and counts[i] > BLOCK_SHINGLES:
                for lo in range(starts[i], starts[i + 1], BLOCK_SHINGLES):
                    hi = min(lo + BLOCK_SHINGLES, starts[i + 1])
                    block = _permuted(x[lo:hi], a, b, buf)  # (P, s)
                    np.minimum(sig[:, i], block.min(axis=1), out=sig[:, i])
            else:
                docs = i + np.flatnonzero(counts[i:j])
                if len(docs):
                    block = _permuted(x[starts[i] : starts[j]], a, b, buf)  # (P, S)
                    sig[:, docs] = np.minimum.reduceat(block, starts[docs] - starts[i], axis=1)
            i = j
        return np.ascontiguousarray(sig.T)  # (D, P)

    def band_keys(self, sig: np.ndarray) -> np.ndarray:
        """(D, P) signatures -> (D, bands) uint64 keys, one per band of `rows` values."""
        import numpy as np

        d = sig.shape[0]
        rows = sig.reshape(d, self.config.bands, self.config.rows)  # (D, B, R)
        key = rows[:, :, 0].copy()  # (D, B)
        mul = np.uint64(_ROW_MUL)
        for r in range(1, self.config.rows):
            key *= mul
            key += rows[:, :, r]
        key ^= self.band_salt  # the same rows in different bands are different keys
        fmix64(key)
        key[key == 0] = 1  # 0 marks an empty slot in the hash tables
        return key

    # -- one batch -----------------------------------------------------------

    def batch(self, texts: list[str]) -> Batch:
        """Exact keys, band keys and shingle counts for a batch of texts."""
        import numpy as np

        normalised, cjk_chars = self.normalise.batch(texts)
        exact = np.fromiter(map(text_key, normalised), dtype=np.uint64, count=len(texts))
        x, counts = self.batch_shingles(texts, normalised, cjk_chars)
        sig = self.signatures_flat(x, counts)  # (D, P)
        bands = self.band_keys(sig)
        bands[counts == 0] = 0  # no shingles, no band keys
        # --verify keeps the low byte of every value (b-bit MinHash, 1 byte per permutation).
        low = (sig & np.uint64(0xFF)).astype(np.uint8) if self.config.verify else None
        return Batch(exact, bands, counts, low, sig[:, 0].copy())

    def batch_shingles(
        self, texts: list[str], normalised: list[str], cjk_chars: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """All shingles of a batch back to back (S,), and per-document counts (D,).

        cjk_chars: (D,) the CJK characters of each text (Normaliser.batch), so that the
        unit needs no second scan; a text without any is not CJK, and, with punctuation
        removed, the words of its normalised form are its str.split(), 5x faster than
        the token regex.

        Word documents are hashed together: one pass over all their tokens and one
        n-gram polynomial over the concatenation, keeping the n-grams that do not
        cross a document boundary. Char-unit and short documents go one by one.
        """
        import numpy as np

        n = self.config.ngram
        others: dict[int, np.ndarray] = {}  # char-unit and short documents: their shingles
        word_docs, word_tokens, lengths = [], [], []
        split_ok = self.normalise.only_words_remain
        counted = None if cjk_chars is None else cjk_chars.tolist()
        for k, (text, normed) in enumerate(zip(texts, normalised, strict=True)):
            cjk = None if counted is None else counted[k]
            unit = self.unit_for(text, cjk)
            if unit == "char":
                others[k] = self._ngrams(self.token_hashes(normed, "char"))
                continue
            if unit == "code":
                toks = code_tokens(normed)
            else:
                toks = normed.split() if split_ok and cjk == 0 else words(normed)
            if len(toks) < n:
                others[k] = self._ngrams(self._word_hashes(toks))
                continue
            word_docs.append(k)
            word_tokens.extend(toks)
            lengths.append(len(toks))
        counts = np.zeros(len(texts), dtype=np.int64)
        word_x = np.zeros(0, np.uint64)
        if word_docs:
            t = self._word_hashes(word_tokens)  # (T,)
            grams = self._ngrams(t)  # (T - n + 1,): n-grams starting at every position
            lens = np.array(lengths)
            ends = np.cumsum(lens)
            valid = np.ones(len(grams), dtype=bool)
            for j in range(1, n):  # n-grams starting in the last n-1 tokens of a document
                cross = ends[:-1] - j
                valid[cross] = False
            word_x = grams[valid]  # the word documents' shingles, back to back
            counts[word_docs] = lens - n + 1
        if not others:
            return word_x, counts
        for k, part in others.items():
            counts[k] = len(part)
        # In document order: the word documents between two others are one slice of word_x.
        word_counts = counts.copy()
        word_counts[list(others)] = 0
        at = np.concatenate(([0], np.cumsum(word_counts))).tolist()  # word_x offset per doc
        pieces, prev = [], 0
        for k in sorted(others):
            pieces += [word_x[at[prev] : at[k]], others[k]]
            prev = k + 1
        pieces.append(word_x[at[prev] :])
        return np.concatenate(pieces).astype(np.uint64, copy=False), counts

    def _ngrams(self, t: np.ndarray) -> np.ndarray:
        """(T,) token hashes -> (max(T - n + 1, 1 if T else 0),) n-gram hashes."""
        import numpy as np

        n = min(self.config.ngram, len(t))
        if n == 0:
            return np.empty(0, dtype=np.uint64)
        s = len(t) - n + 1
        h = t[:s].copy()  # (S,)
        mul = np.uint64(_NGRAM_MUL)
        for j in range(1, n):
            h *= mul
            h += t[j : j + s]
        return fmix64(h)


def _permuted(x: np.ndarray, a: np.ndarray, b: np.ndarray, buf: np.ndarray) -> np.ndarray:
    """(P, s) values a_i * x + b_i (mod 2^64) of the s shingles x, written into buf."""
    import numpy as np

    block = buf[: len(a) * len(x)].reshape(len(a), len(x))
    np.multiply(a, x, out=block)
    block += b
    return block


class Batch:
    """What the signature pass computes for a batch of documents (picklable, for --workers)."""

    __slots__ = ("exact", "bands", "shingles", "low", "first")

    def __init__(self, exact: np.ndarray, bands: np.ndarray, shingles: np.ndarray,
                 low: np.ndarray | None = None, first: np.ndarray | None = None) -> None:
        self.exact = exact  # (D,) uint64, never 0
        self.bands = bands  # (D, B) uint64, rows of 0 for documents without shingles
        self.shingles = shingles  # (D,) int64 shingle counts
        self.low = low  # (D, P) uint8 low bytes of the signature, with --verify
        # (D,) uint64 first MinHash value: two documents share it with probability equal to
        # their Jaccard similarity, so `inspect` samples near-duplicates together by it.
        self.first = first

    def __len__(self) -> int:
        return len(self.exact)
