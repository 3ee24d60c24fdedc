"""Main text of documentation sites from generators the extractor was not fitted on.

The data (see benchmarks/doc_sites_corpus.py for what it is and how the truth is made):

    .venv/bin/python benchmarks/doc_sites_corpus.py DATA_DIR          # apt-get download, no install
    taskset -c 0 .venv/bin/python benchmarks/doc_sites.py DATA_DIR

Fit on one half, report the other: the first twelve sites (one Debian package each) are
split by a hash of the package name, a site's pages all on one side: `dev` is the half the
extractor's rules may be fitted on, `held-out` the half they never saw (it has since been
read: docs/clean.md). The API reference sites added later carry their group in the data
(doc_sites_corpus.py's LATER): `dev`, or `held2`, a fresh held-out group no rule was looked
at on. Printed held2, held-out, then dev.

llmtk is run as a user runs it, on the WARC (`llmtk clean DATA_DIR/pages.warc.gz --filters
none --no-langid --no-pii --on-error skip --workers 1`); trafilatura (FineWeb's settings:
favor_precision, no comments, deduplicate) on the same decoded pages in this process.
Scores per page, averaged over the pages of the half (macro):
  * precision and recall of words (bags of `\\w+` tokens, lower-cased) against the page's
    own content; precision over the pages with output, recall over all pages;
  * nav: the share of pages whose output still holds one of the page's navigation lines
    (whitespace ignored);
  * pages per CPU-second: CPU time of each extractor call in this process (llmtk's
    `extract`, what `clean` runs, and trafilatura's; parsing included, reading not), so
    the two are measured side by side on the same pages.
`--in-process` scores llmtk's `extract` in this process instead of the command (quicker
when fitting; the command adds normalisation, which changes no word). `--per-site` prints
each site's numbers; `--dump DIR` writes each page's output. `--host-lines SHARE` adds
`llmtk clean --host-lines SHARE` (the stage that removes the lines repeated at the top or
bottom of SHARE of a host's pages; `--in-process`: its rule applied to `extract`'s output)
and trafilatura's output with the same rule applied after it (llmtk.clean.hostlines).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

_WORD = re.compile(r"\w+")
_SPACE = re.compile(r"\s+")


def half(site: str) -> str:
    return "dev" if hashlib.sha1(site.encode()).digest()[0] % 2 == 0 else "held-out"


def load(data: Path) -> list[dict]:
    path = data / "pages.jsonl"
    if not path.exists():
        sys.exit(f"{path}: missing (build it with benchmarks/doc_sites_corpus.py {data})")
    pages = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for p in pages:
        p["half"] = p.get("group") or half(p["site"])
    return pages


def words(text: str) -> Counter:
    return Counter(_WORD.findall(text.lower()))


def bare(text: str) -> str:
    return _SPACE.sub("", text)


def score(pages: list[dict], out: dict[str, str]) -> dict:
    ps, rs, navs = [], [], 0
    for p in pages:
        got, want = words(out.get(p["url"], "")), words(p["truth"])
        common = sum((got & want).values())
        if got:
            ps.append(common / sum(got.values()))
        rs.append(common / max(sum(want.values()), 1))
        flat = bare(out.get(p["url"], ""))
        navs += any(bare(x) in flat for x in p["nav"])
    n = max(len(pages), 1)
    return {"precision": sum(ps) / max(len(ps), 1), "recall": sum(rs) / n, "nav": navs / n,
            "empty": len(pages) - len(ps)}


def run_cli(data: Path, *extra: str) -> dict[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.jsonl"
        subprocess.run([sys.executable, "-m", "llmtk", "clean", str(data / "pages.warc.gz"),
                        "--filters", "none", "--no-langid", "--no-pii", "--on-error", "skip",
                        "--workers", "1", "-q", "-o", str(out), *extra], check=True, cwd=ROOT)
        return {d["url"]: d["text"] for d in map(json.loads, out.read_text().splitlines())}


def with_host_lines(texts: dict[str, str], share: float) -> tuple[dict[str, str], float]:
    """The stage's rule (llmtk.clean.hostlines) applied to outputs keyed by URL: (the
    outputs, CPU seconds it took)."""
    from llmtk.clean.hostlines import HostCounts, HostLines, host, line_keys, strip

    t = time.process_time()
    counts = HostCounts()
    for url, text in texts.items():
        counts.add(host(url), line_keys(host(url), text))
    common = counts.common(share, HostLines().min_pages)
    out = {url: strip(host(url), text, common)[0] for url, text in texts.items()}
    return out, time.process_time() - t


def _llmtk(page: str) -> str:
    from llmtk.clean.extract import extract
    return extract(page, "resiliparse")


def _trafilatura(page: str) -> str:
    import trafilatura
    return trafilatura.extract(page, favor_precision=True, include_comments=False,
                               deduplicate=True) or ""


def run_in_process(pages: list[dict], fn) -> tuple[dict[str, str], dict[str, float]]:
    fn(pages[0]["text"])  # imports and first-call set-up outside the timing
    if fn is _trafilatura:
        from trafilatura.meta import reset_caches
        reset_caches()
    out, cpu = {}, {}
    for p in pages:
        t0 = time.process_time()
        out[p["url"]] = fn(p["text"])
        cpu[p["url"]] = time.process_time() - t0
    return out, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path, help="the folder doc_sites_corpus.py wrote")
    ap.add_argument("--in-process", action="store_true",
                    help="score llmtk's extract() in this process, not the command")
    ap.add_argument("--no-trafilatura", action="store_true")
    ap.add_argument("--per-site", action="store_true")
    ap.add_argument("--dump", type=Path)
    ap.add_argument("--host-lines", type=float, metavar="SHARE",
                    help="also score llmtk clean --host-lines SHARE, and trafilatura with the "
                         "same rule after it: the cross-page signal")
    args = ap.parse_args()
    pages = load(args.data)
    llmtk_inproc, llmtk_cpu = run_in_process(pages, _llmtk)
    results = {"llmtk": (llmtk_inproc if args.in_process else run_cli(args.data), llmtk_cpu)}
    if not args.no_trafilatura:
        results["trafilatura"] = run_in_process(pages, _trafilatura)
    if args.host_lines:
        for name in list(results):
            out, cpu = results[name]
            trimmed, seconds = with_host_lines(out, args.host_lines)
            if name == "llmtk" and not args.in_process:  # the stage itself, as users run it
                trimmed = run_cli(args.data, "--host-lines", str(args.host_lines))
            results[f"{name}+host"] = (trimmed, cpu)
            print(f"{name}: host lines counted and removed in {seconds:.2f} CPU-s "
                  f"({len(out)} pages)", file=sys.stderr)
    if args.dump:
        args.dump.mkdir(parents=True, exist_ok=True)
        for name, (out, _) in results.items():
            (args.dump / f"{name}.json").write_text(json.dumps(out, ensure_ascii=False))
    for h in ("held2", "held-out", "dev"):
        chosen = [p for p in pages if p["half"] == h]
        if not chosen:
            continue
        sites = sorted({p["site"] for p in chosen})
        print(f"\n{h}: {len(chosen)} pages, {len(sites)} sites "
              f"({', '.join(sorted({p['generator'] for p in chosen}))})")
        print(f"{'extractor':<14} {'precision':>9} {'recall':>7} {'nav':>6} {'empty':>5} "
              f"{'pages/CPU-s':>12}")
        groups = [("", chosen)] + ([(s, [p for p in chosen if p["site"] == s]) for s in sites]
                                   if args.per_site else [])
        for label, group in groups:
            if label:
                print(f"  {label} ({group[0]['generator']}, {len(group)} pages)")
            for name, (out, cpu) in results.items():
                m = score(group, out)
                seconds = sum(cpu[p["url"]] for p in group)
                rate = len(group) / seconds if seconds else float("inf")
                print(f"{name:<14} {m['precision']:>9.3f} {m['recall']:>7.3f} "
                      f"{m['nav']:>6.1%} {m['empty']:>5} {rate:>12.1f}")


if __name__ == "__main__":
    main()
