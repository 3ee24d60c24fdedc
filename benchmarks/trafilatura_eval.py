"""Main-text extraction on trafilatura's own multilingual evaluation pages (a held-out set).

The data: the evaluation corpus in trafilatura's repository (Apache-2.0), ~1,000 real web
pages in many languages (news, blogs, forums, shops, institutions), each annotated with up
to six snippets the main text must hold (`with`) and up to six it must not (`without`):

    git clone https://github.com/adbar/trafilatura
    .venv/bin/python benchmarks/trafilatura_eval.py trafilatura/tests

(the folder needs `evaldata.json` and the pages under `eval/` and `cache/`; nothing is
downloaded here). Scoring is trafilatura's own (`tests/eval_common.py`, reimplemented):
whitespace-normalised substring matching, a `with` snippet found is a true positive, a
`without` snippet found a false positive; precision, recall and F1 over all snippets.

The pages are split by site as benchmarks/article_extraction.py splits them (a hash of the
host name): `dev` is the half llmtk's hint rules may be fitted on (the hint class words,
the aside, layout and label-hidden rules were chosen there), `held-out` the half no rule
was chosen on. Extractors as in article_extraction.py, on the same decoded page, one
process (`taskset -c 0` for one core).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from article_extraction import EXTRACTORS, half, site  # noqa: E402

from llmtk.io.warc import decode_html  # noqa: E402

_SPACE = re.compile(r"\s+")


def norm(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def counts(item: dict, result: str) -> tuple[int, int, int, int]:
    """(tp, fp, fn, tn) of one page, as trafilatura's evaluation counts them."""
    res = norm(result)
    tp = sum(1 for w in item["with"] if norm(w) in res)
    fp = sum(1 for w in item["without"] if norm(w) in res)
    return tp, fp, len(item["with"]) - tp, len(item["without"]) - fp


def scores(rows: list[tuple[int, int, int, int]]) -> dict:
    tp, fp, fn, _ = (sum(r[i] for r in rows) for i in range(4))
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    return {"precision": p, "recall": r, "f1": 2 * p * r / (p + r) if p + r else 0.0}


def load(folder: Path) -> list[dict]:
    data = json.loads((folder / "evaldata.json").read_text(encoding="utf-8"))
    pages = []
    for url, item in sorted(data.items()):
        path = next((folder / sub / item["file"] for sub in ("cache", "eval")
                     if (folder / sub / item["file"]).is_file()), None)
        if path is None:
            sys.exit(f"{folder}: {item['file']} not found under cache/ or eval/")
        text, _ = decode_html(path.read_bytes())
        pages.append({"url": url, "half": half(url), "item": item, "html": text or ""})
    return pages


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", type=Path, help="trafilatura's tests/ folder")
    ap.add_argument("--extractors", default="llmtk,llmtk-trafilatura,trafilatura,resiliparse")
    args = ap.parse_args()
    pages = load(args.folder)
    names = [n for n in args.extractors.split(",") if n]
    results = {}
    for name in names:
        fn = EXTRACTORS[name]
        fn(pages[0]["html"])  # imports and first-call set-up outside the timing
        if "trafilatura" in name:
            from trafilatura.meta import reset_caches
            reset_caches()
        out, cpu = [], []
        for page in pages:
            t0 = time.process_time()
            try:
                text = fn(page["html"])
            except Exception:  # a crash costs the page's snippets, as trafilatura counts it
                text = ""
            cpu.append(time.process_time() - t0)
            out.append(text)
        results[name] = (out, cpu)
    for h in ("held-out", "dev", "all"):
        idx = [i for i, p in enumerate(pages) if h == "all" or p["half"] == h]
        sites = len({site(pages[i]["url"]) for i in idx})
        print(f"\n{h} (by site, as the AEB split): {len(idx)} pages, {sites} sites")
        print(f"{'extractor':<20} {'precision':>9} {'recall':>7} {'F1':>6} {'pages/CPU-s':>12}")
        for name in names:
            out, cpu = results[name]
            m = scores([counts(pages[i]["item"], out[i]) for i in idx])
            seconds = sum(cpu[i] for i in idx)
            print(f"{name:<20} {m['precision']:>9.3f} {m['recall']:>7.3f} {m['f1']:>6.3f} "
                  f"{len(idx) / seconds if seconds else float('inf'):>12.1f}")


if __name__ == "__main__":
    main()
