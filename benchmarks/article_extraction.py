"""Main-text extraction on news and blog pages: the Article Extraction Benchmark.

The data: Zyte's public Article Extraction Benchmark (MIT licence), 181 real news and blog
pages from 126 sites with their article text (`articleBody`) written by people:

    git clone https://github.com/scrapinghub/article-extraction-benchmark aeb
    .venv/bin/python benchmarks/article_extraction.py aeb

(the folder needs `ground-truth.json` and `html/*.html.gz`; nothing is downloaded here).

Scoring is the benchmark's own (`evaluate.py`, reimplemented below): tokens are `\\w+` runs,
a page's text is a bag of 4-token shingles, tp/fp/fn per page normalised to sum 1, precision
and recall are means over pages, F1 is their harmonic mean.

Fit on one half, report the other: the pages are split by site (the URL's host without
`www.`), a host's pages all on one side, by a hash of the host name: `dev` is the half the
extractor's thresholds were chosen on, `held-out` the half they never saw. Printed held-out
first, then dev, then all pages.

Extractors, each on the same decoded page, one process (run it under `taskset -c 0` for
one core): llmtk's default (`llmtk.clean.extract.extract`, what `llmtk clean` runs),
llmtk `--extract trafilatura` (trafilatura with FineWeb's settings on llmtk's prepared
tree), trafilatura alone (FineWeb's settings on the raw page) and resiliparse alone
(`extract_plain_text(main_content=True)`). Pages per CPU-second: the process's CPU time
inside each extractor call (parsing included, reading and decompressing the file not).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmtk.io.warc import decode_html  # noqa: E402

_TOKEN = re.compile(r"\w+", re.UNICODE | re.MULTILINE | re.IGNORECASE | re.DOTALL)


def site(url: str) -> str:
    host = urlparse(url).netloc.lower()
    return host[4:] if host.startswith("www.") else host


def half(url: str) -> str:
    """`dev` or `held-out`, by the site's name, so no site is on both sides."""
    digest = hashlib.sha1(site(url).encode()).digest()
    return "dev" if digest[0] % 2 == 0 else "held-out"


# --- the benchmark's scoring (evaluate.py's string_shingle_matching and metrics) ---

def _shingles(text: str, n: int = 4) -> Counter:
    tokens = _TOKEN.findall(text or "")
    return Counter(tuple(tokens[i:i + n]) for i in range(max(1, len(tokens) - n + 1))
                   if tokens[i:i + n])


def tp_fp_fn(true: str, pred: str) -> tuple[float, float, float]:
    t, p = _shingles(true), _shingles(pred)
    tp = fp = fn = 0.0
    for key in set(t) | set(p):
        a, b = t.get(key, 0), p.get(key, 0)
        tp += min(a, b)
        fp += max(0, b - a)
        fn += max(0, a - b)
    s = tp + fp + fn
    return (tp / s, fp / s, fn / s) if s > 0 else (tp, fp, fn)


def _precision(tp, fp, fn):
    return 1.0 if fp == fn == 0 else 0.0 if tp == fp == 0 else tp / (tp + fp)


def _recall(tp, fp, fn):
    return 1.0 if fp == fn == 0 else 0.0 if tp == fn == 0 else tp / (tp + fn)


def metrics(scores: list[tuple[float, float, float]]) -> dict:
    ps = [_precision(*s) for s in scores if s[0] + s[1] > 0]
    rs = [_recall(*s) for s in scores if s[0] + s[2] > 0]
    p = sum(ps) / len(ps) if ps else 0.0
    r = sum(rs) / len(rs) if rs else 0.0
    return {"precision": p, "recall": r, "f1": 2 * p * r / (p + r) if p + r else 0.0}


# --- extractors ---

def _llmtk(page: str) -> str:
    from llmtk.clean.extract import extract
    return extract(page, "resiliparse")


def _llmtk_trafilatura(page: str) -> str:
    from llmtk.clean.extract import extract
    return extract(page, "trafilatura")


def _trafilatura(page: str) -> str:
    import trafilatura
    return trafilatura.extract(page, favor_precision=True, include_comments=False,
                               deduplicate=True) or ""


def _resiliparse(page: str) -> str:
    from resiliparse.extract.html2text import extract_plain_text
    return extract_plain_text(page, main_content=True)


EXTRACTORS = {"llmtk": _llmtk, "llmtk-trafilatura": _llmtk_trafilatura,
              "trafilatura": _trafilatura, "resiliparse": _resiliparse}


def load(folder: Path) -> list[dict]:
    truth = json.loads((folder / "ground-truth.json").read_text(encoding="utf-8"))
    pages = []
    for key, item in sorted(truth.items()):
        path = folder / "html" / f"{key}.html.gz"
        if not path.exists():
            sys.exit(f"{path}: missing (the folder must hold the benchmark's html/)")
        text, _ = decode_html(gzip.decompress(path.read_bytes()))
        pages.append({"key": key, "url": item["url"], "half": half(item["url"]),
                      "true": item.get("articleBody", ""), "html": text or ""})
    return pages


def run(pages: list[dict], name: str) -> tuple[dict, float]:
    fn = EXTRACTORS[name]
    fn(pages[0]["html"])  # imports and first-call set-up outside the timing
    if "trafilatura" in name:
        # its `deduplicate` remembers text across calls: each run starts with none seen
        from trafilatura.meta import reset_caches
        reset_caches()
    out, cpu = {}, {}
    for page in pages:
        t0 = time.process_time()
        out[page["key"]] = fn(page["html"])
        cpu[page["key"]] = time.process_time() - t0
    return out, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", type=Path, help="the benchmark's checkout (ground-truth.json, html/)")
    ap.add_argument("--extractors", default="llmtk,llmtk-trafilatura,trafilatura,resiliparse")
    ap.add_argument("--half", choices=("dev", "held-out", "all"), default=None,
                    help="score one half only (default: held-out, dev and all)")
    ap.add_argument("--dump", type=Path, help="write each extractor's texts as JSON here")
    args = ap.parse_args()
    pages = load(args.folder)
    names = [n for n in args.extractors.split(",") if n]
    results = {}
    for name in names:
        out, cpu = run(pages, name)
        results[name] = (out, cpu)
        if args.dump:
            args.dump.mkdir(parents=True, exist_ok=True)
            (args.dump / f"{name}.json").write_text(json.dumps(
                {k: {"articleBody": v} for k, v in out.items()}, ensure_ascii=False))
    halves = [args.half] if args.half else ["held-out", "dev", "all"]
    for h in halves:
        chosen = [p for p in pages if h == "all" or p["half"] == h]
        sites = len({site(p["url"]) for p in chosen})
        print(f"\n{h}: {len(chosen)} pages, {sites} sites")
        print(f"{'extractor':<20} {'precision':>9} {'recall':>7} {'F1':>6} {'pages/CPU-s':>12}")
        for name in names:
            out, cpu = results[name]
            m = metrics([tp_fp_fn(p["true"], out[p["key"]]) for p in chosen])
            seconds = sum(cpu[p["key"]] for p in chosen)
            rate = len(chosen) / seconds if seconds else float("inf")
            print(f"{name:<20} {m['precision']:>9.3f} {m['recall']:>7.3f} {m['f1']:>6.3f} "
                  f"{rate:>12.1f}")


if __name__ == "__main__":
    main()
