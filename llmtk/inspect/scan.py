"""One streaming pass over a corpus into a `Profile`, and a profile into the answer.

A `Profile` holds only mergeable summaries (llmtk.inspect.sketch, llmtk.inspect.dups), so
`--shard K/N` parts merge into the profile of one pass (`merge`). `result()` turns it into
the JSON that `--json` prints: stable keys, shares rounded to 6 digits.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from llmtk.clean.extract import Extract
from llmtk.dedup.config import DedupConfig
from llmtk.errors import DataError
from llmtk.inspect import checks
from llmtk.inspect.dups import NearSample, Signer
from llmtk.inspect.sketch import Capped, Distinct, Examples, Histogram
from llmtk.io.record import Doc as Record
from llmtk.io.shard import RECORD_BITS, RECORD_MASK
from llmtk.text.pii import scrub
from llmtk.text.secrets import scrub_secrets

if TYPE_CHECKING:
    from llmtk.io import Doc, StreamRun

KIND = "llmtk.inspect.part"
VERSION = 1
BATCH = 512
MAX_SOURCES = 10_000  # distinct --by values kept exactly; later ones count as "(other)"
NONE = "(none)"
EXTRACT = Extract()  # clean's default main-content extraction
_URL_HOST = re.compile(r"^[a-z][a-z0-9+.-]*://(?:[^/?#@]*@)?([^/?#:]+)", re.I)


@dataclass(frozen=True)
class Settings:
    """What changes the numbers; parts merge only when theirs are equal."""

    by: str | None = None
    tokenizer: str = "bytes"  # a tokenizer.json path's fingerprint, or bytes
    sample: float | None = None  # a fraction of documents (by identity hash), or a count
    quality: bool = False  # also run clean's default rules, dry: the share each would drop
    dedup: dict = field(default_factory=lambda: DedupConfig().to_dict())


class Profile:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.config = DedupConfig.from_dict(settings.dedup)
        self.documents = 0
        self.web_pages = 0  # records that declare HTML (web archives): read extracted
        self.bad_records = 0
        self.lengths = {"characters": Histogram(), "words": Histogram(), "tokens": Histogram()}
        self.exact = Distinct()
        self.near = NearSample(self.config)
        self.languages: dict[str, list[int]] = {}  # code -> [documents, characters]
        self.broken = Examples()  # reason -> count, first example
        self.scripts = Examples()  # "several" -> documents with several scripts
        self.pii: Counter[str] = Counter()  # kind -> matches
        self.pii_docs: Counter[str] = Counter()  # kind -> documents with one
        self.secrets: Counter[str] = Counter()
        self.sources = Capped(MAX_SOURCES)
        self.would_drop: Counter[str] = Counter()  # clean's reason -> documents (--quality)
        self.inputs: list[str] = []  # the whole input list (identities refer to it)
        self.shard = (0, 1)
        self._signer: Signer | None = None  # made on the first batch (merges need none)

    # -- one batch of documents ---------------------------------------------

    def add(self, docs: list[Doc], identity, langid, tokenizer, cleaner=None) -> None:
        """identity: (D,) uint64 document identities (llmtk.io.shard); cleaner: clean's
        Cleaner in dry-run mode, for the share each of its rules would drop."""
        import numpy as np

        stored = [d.text for d in docs]
        ids = [d.id for d in docs]
        # HTML pages are read as clean reads them: its main text, extracted (web archives'
        # responses, and pages left in a text field). dedup hashes the stored text.
        pages = [EXTRACT.applies(d.data, t) for d, t in zip(docs, stored, strict=True)]
        texts = [EXTRACT(t) if page else t for t, page in zip(stored, pages, strict=True)]
        chars = np.fromiter(map(len, texts), np.int64, len(texts))
        words = np.fromiter((len(t.split()) for t in texts), np.int64, len(texts))
        if tokenizer is None:  # the byte-level tokenizer: a token per UTF-8 byte
            tokens = np.fromiter((len(t.encode("utf-8", "surrogatepass")) for t in texts),
                                 np.int64, len(texts))
        else:
            from llmtk.text.tokenizer import encode_batch

            tokens = np.fromiter(map(len, encode_batch(tokenizer, texts)), np.int64, len(texts))
        self.documents += len(docs)
        self.lengths["characters"].add(chars)
        self.lengths["words"].add(words)
        self.lengths["tokens"].add(tokens)
        if self._signer is None:
            self._signer = Signer(self.config)
        batch = self._signer.batch(stored)
        self.exact.add(batch.exact)
        self.near.add(batch, identity, ids)
        who, counts = identity.tolist(), tokens.tolist()  # Python ints, converted at once
        for k, (doc, text) in enumerate(zip(docs, texts, strict=True)):
            html = pages[k] and not declares_html(doc.data)
            if pages[k] and not html:
                self.web_pages += 1
            elif not pages[k]:
                html = checks.html_left(text)
            self._document(doc, text, html, who[k], counts[k], langid)
            if cleaner is not None:
                self._quality(doc, cleaner)

    def _document(self, doc: Doc, text: str, html: bool, who: int, tokens: int,
                  langid) -> None:
        """The per-document answers: language, broken, scripts, PII, secrets, source.
        html: the stored text is HTML that no content_type declared (left in the text)."""
        doc_id = doc.id
        lang = None
        if langid is not None:
            lang = langid.predict(text)[0]
            row = self.languages.setdefault(lang, [0, 0])
            row[0] += 1
            row[1] += len(text)
        for reason in checks.broken(text, html):
            self.broken.add(reason, who, doc_id)
        if checks.several_scripts(text):
            self.scripts.add("several_scripts", who, doc_id)
        for kind, n in scrub(text)[1].items():
            self.pii[kind] += n
            self.pii_docs[kind] += 1
        for kind, n in scrub_secrets(text)[1].items():
            self.secrets[kind] += n
        by = self.settings.by
        if by is not None:
            value = source_value(doc.data, by)
            if value == NONE and by == "lang" and lang is not None:
                value = lang  # records without a lang field: the detected language
            self.sources.add(value, len(text), tokens)

    def _quality(self, doc: Doc, cleaner) -> None:
        """clean's verdict on a copy of the document (a dry run counts would_drop.REASON)."""
        copy = Record(dict(doc.data), None, doc.source, doc.line, doc.index, doc.field)
        cleaner(copy)
        for key in (copy.counts or {}):
            if key.startswith("would_drop."):
                self.would_drop[key.removeprefix("would_drop.")] += 1

    # -- merging -------------------------------------------------------------

    def merge(self, other: Profile) -> None:
        self.documents += other.documents
        self.web_pages += other.web_pages
        self.bad_records += other.bad_records
        for name, h in self.lengths.items():
            h.merge(other.lengths[name])
        self.exact.merge(other.exact)
        self.near.merge(other.near)
        for lang, (d, c) in other.languages.items():
            row = self.languages.setdefault(lang, [0, 0])
            row[0] += d
            row[1] += c
        self.broken.merge(other.broken)
        self.scripts.merge(other.scripts)
        self.pii.update(other.pii)
        self.pii_docs.update(other.pii_docs)
        self.secrets.update(other.secrets)
        self.sources.merge(other.sources)
        self.would_drop.update(other.would_drop)

    def to_dict(self) -> dict:
        return {
            "kind": KIND, "version": VERSION, "settings": asdict(self.settings),
            "inputs": self.inputs, "shard": list(self.shard),
            "documents": self.documents, "web_pages": self.web_pages,
            "bad_records": self.bad_records,
            "lengths": {k: h.to_dict() for k, h in self.lengths.items()},
            "exact": self.exact.to_dict(), "near": self.near.to_dict(),
            "languages": self.languages, "broken": self.broken.to_dict(),
            "scripts": self.scripts.to_dict(), "pii": dict(self.pii),
            "pii_docs": dict(self.pii_docs), "secrets": dict(self.secrets),
            "sources": self.sources.to_dict(), "would_drop": dict(self.would_drop),
        }

    @classmethod
    def from_dict(cls, d: dict, where: str) -> Profile:
        if not isinstance(d, dict) or d.get("kind") != KIND:
            raise DataError(f"{where}: not an inspect part (written by llmtk inspect -o)")
        if d.get("version") != VERSION:
            raise DataError(f"{where}: inspect part version {d.get('version')}, "
                            f"expected {VERSION}")
        try:
            p = cls(Settings(**d["settings"]))
            p.inputs = list(d["inputs"])
            p.shard = tuple(d["shard"])
            p.documents, p.bad_records = int(d["documents"]), int(d["bad_records"])
            p.web_pages = int(d["web_pages"])
            p.lengths = {k: Histogram.from_dict(v) for k, v in d["lengths"].items()}
            p.exact = Distinct.from_dict(d["exact"])
            p.near = NearSample.from_dict(d["near"], p.config)
            p.languages = {k: [int(x) for x in v] for k, v in d["languages"].items()}
            p.broken = Examples.from_dict(d["broken"])
            p.scripts = Examples.from_dict(d["scripts"])
            p.pii, p.pii_docs = Counter(d["pii"]), Counter(d["pii_docs"])
            p.secrets = Counter(d["secrets"])
            p.sources = Capped.from_dict(d["sources"], MAX_SOURCES)
            p.would_drop = Counter(d["would_drop"])
        except (KeyError, TypeError, ValueError) as e:
            raise DataError(f"{where}: damaged inspect part ({type(e).__name__}: {e})") from None
        return p

    # -- the answer ----------------------------------------------------------

    def where(self, identity: int, doc_id: Any) -> Any:
        """An example document: its id, else FILE:RECORD (1-based record in its file)."""
        if doc_id is not None:
            return doc_id
        f, r = identity >> RECORD_BITS, identity & RECORD_MASK
        path = self.inputs[f] if f < len(self.inputs) else "?"
        return f"{'<stdin>' if path == '-' else path}:{r + 1}"

    def result(self) -> dict:
        n = self.documents
        dist = self.exact.count()
        near = self.near.decide()
        m = near["sampled"]
        exact_share = 1.0 - dist / n if n else 0.0
        near_only = near["near_only_weighted"] / m if m else 0.0
        near_share = (near["exact_removed"] + near["near_only_weighted"]) / m if m else 0.0
        broken = {r: {"documents": self.broken.count(r),
                      "example": self.where(*self.broken.items[r][1:])}
                  for r in checks.REASONS if r in self.broken.items}
        out: dict[str, Any] = {
            "documents": n,
            "web_pages": self.web_pages,
            "bad_records": self.bad_records,
            "characters": self.lengths["characters"].total,
            "words": self.lengths["words"].total,
            "tokens": self.lengths["tokens"].total,
            "tokenizer": self.settings.tokenizer,
            "exact_duplicate_fraction": _share(max(exact_share, 0.0)),
            "near_duplicate_fraction": _share(near_share),
            "duplicates": {
                "exact_distinct_texts": round(dist),
                "exact_is_estimate": not self.exact.exact,
                "near_sampled_documents": m,
                "near_sample_rate": near["rate"],
                "near_is_estimate": near["rate"] < 1.0,
                "near_only_fraction": _share(near_only),
                "largest_clusters": [
                    {"documents": c["documents"], "kept": self.where(c["identity"], c["id"])}
                    for c in near["clusters"]],
            },
            "languages": _shares({k: v[0] for k, v in self.languages.items()}, n),
            "language_characters": _shares(
                {k: v[1] for k, v in self.languages.items()},
                sum(v[1] for v in self.languages.values())),
            "several_scripts_documents": self.scripts.count("several_scripts"),
            "broken": broken,
            "pii": {k.lower(): v for k, v in sorted(self.pii.items())},
            "pii_documents": {k.lower(): v for k, v in sorted(self.pii_docs.items())},
            "secrets": {k.lower(): v for k, v in sorted(self.secrets.items())},
            "lengths": {k: _length(h) for k, h in self.lengths.items()},
        }
        for reason in checks.REASONS:
            out[f"{reason}_documents"] = self.broken.count(reason)
        if self.settings.quality:
            dropped = sum(self.would_drop.values())
            out["quality"] = {"would_keep": _share(1 - dropped / n if n else 1.0),
                              "would_drop": _shares(dict(self.would_drop), n)}
        if self.settings.by is not None:
            table = self.sources.values
            chars = sum(r[1] for r in table.values())
            tokens = sum(r[2] for r in table.values())
            out["by"] = self.settings.by
            out["sources"] = _shares({v: r[0] for v, r in table.items()}, n)
            out["source_table"] = {
                v: {"documents": r[0], "characters": r[1], "tokens": r[2],
                    "character_share": _share(r[1] / chars if chars else 0.0),
                    "token_share": _share(r[2] / tokens if tokens else 0.0)}
                for v, r in sorted(table.items(), key=lambda kv: (-kv[1][0], kv[0]))}
        return out


def _share(x: float) -> float:
    return round(float(x), 6)


def _shares(counts: dict[str, int], total: int) -> dict[str, float]:
    """{key: share}, largest first (ties by key)."""
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return {k: _share(v / total if total else 0.0) for k, v in items}


def _length(h: Histogram) -> dict:
    return {"mean": round(h.total / h.n, 2) if h.n else 0.0, "p50": h.quantile(0.5),
            "p90": h.quantile(0.9), "p99": h.quantile(0.99), "histogram": h.rows()}


def declares_html(data: dict) -> bool:
    """The record says it is HTML (a web archive's response carries content_type)."""
    ctype = data.get("content_type")
    return isinstance(ctype, str) and "html" in ctype.lower()


def source_value(data: dict, field_name: str) -> str:
    """The --by value of a record: a string as is (a URL: its host), anything else as JSON."""
    value = data.get(field_name)
    if value is None:
        return NONE
    if isinstance(value, str):
        if field_name == "url" or "://" in value[:16]:
            m = _URL_HOST.match(value)
            if m:
                host = m.group(1).lower()
                return host[4:] if host.startswith("www.") else host
        return value
    import orjson

    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def scan(run: StreamRun, settings: Settings, tokenizer=None, langid=None,
         sample: float | None = None, cleaner=None) -> Profile:
    """Read `run`'s documents once into a Profile. sample: keep only a fraction of the
    documents (by a stable hash of their identity), or the first N (N >= 1)."""
    import numpy as np

    profile = Profile(settings)
    profile.inputs = list(run.all_paths)
    if run.opts.shard is not None:
        profile.shard = tuple(run.opts.shard)
    batch: list[Doc] = []
    seen = 0
    limit = int(sample) if sample is not None and sample >= 1 else None

    def flush() -> None:
        if not batch:
            return
        identity = run.doc_keys([d.index for d in batch]).astype(np.uint64)
        if sample is not None and limit is None:
            from llmtk.dedup.minhash import fmix64

            u = fmix64(identity ^ np.uint64(0x9E3779B97F4A7C15)).astype(np.float64) / 2.0**64
            keep = np.flatnonzero(u < sample)
            if len(keep) < len(batch):
                identity = identity[keep]
                batch[:] = [batch[i] for i in keep.tolist()]
        if batch:
            profile.add(batch, identity, langid, tokenizer, cleaner)
        batch.clear()

    for doc in run.docs():
        if limit is not None and seen >= limit:
            break
        seen += 1
        batch.append(doc)
        if len(batch) == BATCH:
            flush()
    flush()
    profile.bad_records = sum(run.summary.errors.values())
    return profile


def merge(parts: Iterable[tuple[str, dict]]) -> Profile:
    """(name, part dict) pairs -> one Profile, read one part at a time (memory: the merged
    sketches and one part). The parts must share their settings and input list, and be the
    N tasks of one array, each once."""
    first: Profile | None = None
    first_name = ""
    seen: dict[int, str] = {}
    for name, d in parts:
        p = Profile.from_dict(d, name)
        if first is None:
            first, first_name = p, name
        elif p.settings != first.settings:
            raise DataError(f"{name}: made with other options than {first_name} "
                            f"({asdict(p.settings)} vs {asdict(first.settings)})")
        elif p.inputs != first.inputs:
            raise DataError(f"{name}: read another input list than {first_name}")
        k, n = p.shard
        if n != first.shard[1]:
            raise DataError(f"{name}: task {k}/{n} is not one of {first.shard[1]} tasks")
        if k in seen:
            raise DataError(f"{name}: task {k}/{n} again (also {seen[k]})")
        seen[k] = name
        if first is not p:
            first.merge(p)
        del p, d  # before the next part is read: one part in memory at a time
    if first is None:
        raise DataError("no parts to merge")
    n = first.shard[1]
    missing = sorted(set(range(n)) - set(seen))
    if missing:
        raise DataError(f"missing task{'s' if len(missing) > 1 else ''} "
                        f"{', '.join(f'{k}/{n}' for k in missing[:5])}: merge all {n} parts")
    first.shard = (0, 1)  # the whole: merged again, it is one part of one
    return first
