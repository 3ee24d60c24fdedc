"""Main-text extraction on Mozilla Readability's test pages: more development data.

The data: the test pages of Mozilla's Readability (Firefox's reader view, Apache-2.0), ~130
real pages (news, blogs, a few forums and reference pages) each with the article HTML
Readability extracts from it, checked by its maintainers (`expected.html`):

    git clone https://github.com/mozilla/readability
    .venv/bin/python benchmarks/readability_pages.py readability/test/test-pages

Truth is the text of `expected.html` (rendered by resiliparse, every block); scoring is the
Article Extraction Benchmark's (benchmarks/article_extraction.py: 4-token shingles, per page
precision and recall averaged). Pages whose expected text is shorter than MIN_TRUTH
characters are Readability's unit tests of one feature (a base URL, an entity), not pages,
and are left out.

This set is only ever development data: rules may be chosen on it. A page whose site (its
canonical or `og:url` address, by the same host rule as the other benchmarks) is on the
held-out side of the Article Extraction Benchmark's or trafilatura's pages is still
counted, but apart (`shared-held`), so that nothing chosen on it is chosen on a held-out
site: give `--held-sites` the benchmarks' folders to find those sites.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from article_extraction import EXTRACTORS, metrics, site, tp_fp_fn  # noqa: E402

from llmtk.io.warc import decode_html  # noqa: E402

MIN_TRUTH = 500
_URL = re.compile(r'<link[^>]*rel="canonical"[^>]*href="([^"]+)"|<link[^>]*href="([^"]+)"'
                  r'[^>]*rel="canonical"|property="og:url"[^>]*content="([^"]+)"', re.I)


def _truth(expected: str) -> str:
    from resiliparse.extract.html2text import extract_plain_text
    return extract_plain_text(expected, main_content=False, alt_texts=False)


def held_sites(folders: list[Path]) -> set[str]:
    """The sites on the held-out side of the Article Extraction Benchmark (a folder with
    ground-truth.json) and of trafilatura's pages (a folder with evaldata.json)."""
    import json

    from article_extraction import half
    urls: list[str] = []
    for folder in folders:
        if (folder / "ground-truth.json").is_file():
            truth = json.loads((folder / "ground-truth.json").read_text(encoding="utf-8"))
            urls += [item["url"] for item in truth.values()]
        if (folder / "evaldata.json").is_file():
            urls += list(json.loads((folder / "evaldata.json").read_text(encoding="utf-8")))
    return {site(u) for u in urls if half(u) == "held-out"}


def load(folder: Path, held: set[str]) -> list[dict]:
    pages = []
    for sub in sorted(p for p in folder.iterdir() if (p / "expected.html").is_file()):
        text, _ = decode_html((sub / "source.html").read_bytes())
        true = _truth((sub / "expected.html").read_text(encoding="utf-8"))
        if len(true) < MIN_TRUTH:
            continue
        m = _URL.search(text or "")
        url = next((g for g in m.groups() if g), "") if m else ""
        host = site(url) if url else sub.name
        pages.append({"key": sub.name, "url": url, "true": true, "html": text or "",
                      "half": "shared-held" if host in held else "dev"})
    return pages


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", type=Path, help="Readability's test/test-pages folder")
    ap.add_argument("--extractors", default="llmtk,trafilatura")
    ap.add_argument("--held-sites", type=Path, nargs="*", default=[],
                    help="the other benchmarks' folders: their held-out sites are set apart")
    ap.add_argument("--worst", type=int, default=0, help="list the N dev pages of lowest "
                    "precision for the first extractor")
    args = ap.parse_args()
    pages = load(args.folder, held_sites(args.held_sites))
    names = [n for n in args.extractors.split(",") if n]
    results = {}
    for name in names:
        fn = EXTRACTORS[name]
        fn(pages[0]["html"])
        out, cpu = {}, 0.0
        for p in pages:
            t0 = time.process_time()
            out[p["key"]] = fn(p["html"])
            cpu += time.process_time() - t0
        results[name] = (out, cpu)
    for h in ("dev", "shared-held"):
        chosen = [p for p in pages if p["half"] == h]
        print(f"\n{h}: {len(chosen)} pages")
        print(f"{'extractor':<20} {'precision':>9} {'recall':>7} {'F1':>6}")
        for name in names:
            out, _ = results[name]
            m = metrics([tp_fp_fn(p["true"], out[p["key"]]) for p in chosen])
            print(f"{name:<20} {m['precision']:>9.3f} {m['recall']:>7.3f} {m['f1']:>6.3f}")
    for name in names:
        out, cpu = results[name]
        print(f"{name}: {len(pages) / cpu:.1f} pages per CPU-second")
    if args.worst:
        from article_extraction import _precision, _recall
        out, _ = results[names[0]]
        rows = []
        for p in pages:
            if p["half"] != "dev":
                continue
            s = tp_fp_fn(p["true"], out[p["key"]])
            rows.append((_precision(*s), _recall(*s), p["key"]))
        for prec, rec, key in sorted(rows)[:args.worst]:
            print(f"  {prec:.3f} {rec:.3f} {key}")


if __name__ == "__main__":
    main()
