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
    return site_half(site(url))


# Where a saved page says its own address: the CleanEval/CETD wrapper line
# (`<text id="URL" ...>`), a canonical link or an `og:url`.
_OWN_URL = re.compile(r'^\s*<text id="(https?://[^"]+)"|<link[^>]*rel=["\']?canonical["\']?[^>]*'
                      r'href=["\']?(https?://[^"\'\s>]+)|<link[^>]*href=["\']?(https?://[^"\'\s>]+)'
                      r'[^>]*rel=["\']?canonical|property=["\']og:url["\'][^>]*content=["\']'
                      r'(https?://[^"\'\s>]+)', re.I)
_LINK = re.compile(r'<a\s[^>]*?href\s*=\s*["\']?(https?://[^"\'\s>]+)', re.I)


def page_site(html: str) -> str:
    """The site a saved page comes from, for pages stored without their address: the
    address the page states, else the host most of its absolute links point to (a page
    links its own site's sections more than any other site); "" when neither is there."""
    m = _OWN_URL.search(html)
    if m:
        return site(next(g for g in m.groups() if g))
    hosts = Counter(site(u) for u in _LINK.findall(html))
    return hosts.most_common(1)[0][0] if hosts else ""


def read_truth(path: Path) -> str:
    """A hand-made truth file's text. The sets were typed on many systems: UTF-16 or UTF-8
    with a byte-order mark, UTF-8, or a Western legacy charset (read as Windows-1252, as
    browsers read undeclared Western text)."""
    raw = path.read_bytes()
    for bom, name in ((b"\xef\xbb\xbf", "utf-8-sig"), (b"\xff\xfe", "utf-16"),
                      (b"\xfe\xff", "utf-16")):
        if raw.startswith(bom):
            return raw.decode(name, "replace")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("cp1252", "replace")


def site_half(host: str) -> str:
    """`dev` or `held-out` of a site named by its host (without `www.`)."""
    digest = hashlib.sha1(host.encode()).digest()
    return "dev" if digest[0] % 2 == 0 else "held-out"


# --- the benchmark's scoring (evaluate.py's string_shingle_matching and metrics) ---

def _shingles(text: str, n: int = 4, tokenize=_TOKEN.findall) -> Counter:
    tokens = tokenize(text or "")
    return Counter(tuple(tokens[i:i + n]) for i in range(max(1, len(tokens) - n + 1))
                   if tokens[i:i + n])


def tp_fp_fn(true: str, pred: str, tokenize=_TOKEN.findall) -> tuple[float, float, float]:
    """The page's shingle tp/fp/fn, normalised to sum 1. `tokenize`: the benchmark's `\\w+`
    runs; Chinese or Japanese text needs `llmtk.text.segment.words` (a CJK character a
    token), or a whole clause between two punctuation marks is one token."""
    t, p = _shingles(true, tokenize=tokenize), _shingles(pred, tokenize=tokenize)
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


def run(pages: list[dict], name: str) -> tuple[dict, dict]:
    """(text, CPU seconds) of each page by key; a page the extractor fails on gives ""
    (the count goes to stderr; trafilatura's evaluation scores a crash so too)."""
    fn = EXTRACTORS[name]
    fn(pages[0]["html"])  # imports and first-call set-up outside the timing
    if "trafilatura" in name:
        # its `deduplicate` remembers text across calls: each run starts with none seen
        from trafilatura.meta import reset_caches
        reset_caches()
    out, cpu, failed = {}, {}, 0
    for page in pages:
        t0 = time.process_time()
        try:
            out[page["key"]] = fn(page["html"])
        except Exception:
            out[page["key"]], failed = "", failed + 1
        cpu[page["key"]] = time.process_time() - t0
    if failed:
        print(f"{name}: failed on {failed} pages (scored as empty)", file=sys.stderr)
    return out, cpu


def report(pages: list[dict], names: list[str], results: dict, halves: list[str],
           tokenize=_TOKEN.findall) -> None:
    """Per half: pages and sites, then each extractor's precision, recall, F1 and pages per
    CPU-second, and llmtk's speed over trafilatura's when both ran."""
    for h in halves:
        chosen = [p for p in pages if h == "all" or p["half"] == h]
        if not chosen:
            continue
        sites = len({p["site"] if "site" in p else site(p["url"]) for p in chosen})
        print(f"\n{h}: {len(chosen)} pages, {sites} sites")
        print(f"{'extractor':<20} {'precision':>9} {'recall':>7} {'F1':>6} {'pages/CPU-s':>12}")
        rates = {}
        for name in names:
            out, cpu = results[name]
            m = metrics([tp_fp_fn(p["true"], out[p["key"]], tokenize) for p in chosen])
            seconds = sum(cpu[p["key"]] for p in chosen)
            rates[name] = len(chosen) / seconds if seconds else float("inf")
            print(f"{name:<20} {m['precision']:>9.3f} {m['recall']:>7.3f} {m['f1']:>6.3f} "
                  f"{rates[name]:>12.1f}")
        if "llmtk" in rates and rates.get("trafilatura"):
            print(f"llmtk / trafilatura speed: {rates['llmtk'] / rates['trafilatura']:.1f}x")


def worst(pages: list[dict], out: dict, n: int, tokenize=_TOKEN.findall) -> None:
    """The n dev pages of lowest F1 in `out` (one extractor's texts): where to look first."""
    rows = []
    for p in pages:
        if p["half"] == "dev":
            s = tp_fp_fn(p["true"], out[p["key"]], tokenize)
            prec, rec = _precision(*s), _recall(*s)
            rows.append((2 * prec * rec / (prec + rec) if prec + rec else 0.0, prec, rec,
                         p["key"]))
    for f1, prec, rec, key in sorted(rows)[:n]:
        print(f"  F1 {f1:.3f} P {prec:.3f} R {rec:.3f} {key}")


def set_main(doc: str, load_pages, folder_help: str, many: bool = False,
             tokenize=_TOKEN.findall) -> None:
    """The command line of an extraction set's script (dragnet_pages.py and the others):
    its folder (or folders, `many`), --extractors and --worst; each half scored and the
    worst dev pages listed, with `tokenize` as the scorer's tokens."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("folders" if many else "folder", type=Path, nargs="+" if many else None,
                    help=folder_help)
    ap.add_argument("--extractors", default="llmtk,trafilatura")
    ap.add_argument("--worst", type=int, default=0,
                    help="list the N dev pages of lowest F1 for the first extractor")
    args = ap.parse_args()
    pages = load_pages(args.folders if many else args.folder)
    names = [n for n in args.extractors.split(",") if n]
    results = {name: run(pages, name) for name in names}
    report(pages, names, results, ["held-out", "dev", "all"], tokenize)
    if args.worst:
        worst(pages, results[names[0]][0], args.worst, tokenize)


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
    report(pages, names, results, halves)

if __name__ == "__main__":
    main()
