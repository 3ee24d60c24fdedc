"""Tokenizers shared by train, mix and contam-check: byte-level UTF-8 by default,
or a Hugging Face `tokenizer.json` file (loaded and trained with the `tokenizers`
library).

Every tokenizer has the same small surface: `name`, `vocab_size`, `eos_id`,
`encode(text) -> list[int]` (no special tokens added), `decode(ids) -> str`
and `fingerprint()` (a stable string that changes when the vocabulary does, so
token caches know when they are stale).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator

from llmtk.errors import ConfigError, DataError
from llmtk.io.atomic import atomic_name

# Special tokens we recognise as "end of document" in a tokenizer.json, in order.
EOS_CANDIDATES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eos|>", "[SEP]")


class ByteTokenizer:
    """UTF-8 bytes are the tokens 0..255; 256 is EOS. Any language, nothing to download."""

    name = "bytes"
    vocab_size = 257
    eos_id = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8", "surrogatepass"))

    def encode_batch(self, texts: list[str]) -> list:
        """encode's ids as one uint8 array per text (its UTF-8 bytes), no int lists."""
        import numpy as np

        return [np.frombuffer(t.encode("utf-8", "surrogatepass"), np.uint8) for t in texts]

    def decode(self, ids: Iterable[int]) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", "replace")

    def fingerprint(self) -> str:
        return "bytes-v1"


class HFTokenizer:
    """A `tokenizers` tokenizer.json (BPE, Unigram, WordPiece ...)."""

    def __init__(self, path: str):
        from tokenizers import Tokenizer

        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as e:
            raise ConfigError("tokenizer", f"cannot read: {e.strerror or e}", value=path) from None
        try:
            self._tok = Tokenizer.from_str(raw.decode("utf-8"))
        except Exception as e:  # the library raises a plain Exception for bad files
            raise DataError(f"{path}: not a tokenizer.json file ({e})") from None
        self.path = path
        self.name = os.path.basename(path)
        self._sha1 = hashlib.sha1(raw).hexdigest()
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        eos = next((t for t in EOS_CANDIDATES if self._tok.token_to_id(t) is not None), None)
        if eos is None:
            raise DataError(f"{path}: no end-of-document token (looked for "
                            f"{', '.join(EOS_CANDIDATES)})")
        self.eos_token = eos
        self.eos_id = self._tok.token_to_id(eos)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        # encode_batch_fast (tokenizers >= 0.20): the same ids, without the character
        # offsets that encode_batch also computes and nothing here reads.
        encode = getattr(self._tok, "encode_batch_fast", self._tok.encode_batch)
        return [e.ids for e in encode(texts, add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=False)

    def fingerprint(self) -> str:
        return f"hf-{self._sha1}"


Tokenizer = ByteTokenizer | HFTokenizer


def load_tokenizer(spec: str | None) -> Tokenizer:
    """None or "bytes": the byte-level tokenizer; otherwise a tokenizer.json path."""
    if spec in (None, "", "bytes", "byte"):
        return ByteTokenizer()
    return HFTokenizer(spec)


def encode_batch(tok: Tokenizer, texts: list[str]) -> list:
    """Encode many texts at once (the `tokenizers` library parallelises batches; the byte
    tokenizer gives arrays): a sequence of ids per text."""
    if isinstance(tok, HFTokenizer | ByteTokenizer):
        return tok.encode_batch(texts)
    return [tok.encode(t) for t in texts]


def sample_texts(texts: Iterable[str], max_bytes: int) -> list[str]:
    """A bounded, deterministic sample of texts: the documents with the smallest xxh64 of
    their UTF-8 text, as many as fit in max_bytes (the longest such run: a document that
    does not fit ends it), in hash order. One pass, holding at most max_bytes of text plus
    one document; the same documents whatever the input order or the files' split."""
    import heapq

    import xxhash

    heap: list[tuple[int, str, int]] = []  # (-hash, text, bytes): the largest hash on top
    total, cut = 0, 1 << 64  # cut: the smallest hash left out so far; nothing at or above it
    for text in texts:
        data = text.encode("utf-8", "surrogatepass")
        h = xxhash.xxh64_intdigest(data)
        if h >= cut:
            continue
        heapq.heappush(heap, (-h, text, len(data)))
        total += len(data)
        while total > max_bytes:
            neg, _, size = heapq.heappop(heap)
            total, cut = total - size, -neg
    return [t for _, t, _ in sorted(heap, reverse=True)]


def train_bpe(texts: Iterator[str], vocab_size: int, out_path: str, min_frequency: int = 2,
              eos_token: str = "<|endoftext|>") -> int:
    """Train a byte-level BPE tokenizer (GPT-2 style: any UTF-8 text, no unknown tokens)
    on texts and save it as tokenizer.json at out_path (atomically). Returns its vocab size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab_size < 257:
        raise ConfigError("vocab_size", f"must be at least 257 (256 bytes + EOS), got {vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[eos_token],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    with atomic_name(out_path) as tmp:
        tok.save(tmp)
    return tok.get_vocab_size(with_added_tokens=True)
