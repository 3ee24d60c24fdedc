"""`llmtk clean` on WARC vs datatrove's WarcReader -> Trafilatura: pages per CPU-second.

The goal (issue 35): `llmtk clean` with its default extractor at >= 5x the pages per
CPU-second of datatrove's WARC pipeline (WarcReader -> Trafilatura, the first stage of its
FineWeb pipeline) on the same WARC files, one core each, CPU time, in the same run.

The data: real web pages packed as Common Crawl packs them (one gzip member per WARC
`response` record, HTTP headers without a charset, `WARC-Identified-Payload-Type:
text/html`), written with warcio: the Article Extraction Benchmark's 181 news and blog
pages (scrapinghub/article-extraction-benchmark, MIT) and trafilatura's 990 evaluation pages
in many languages (adbar/trafilatura, tests/, Apache-2.0). The pages are split by site as
article_extraction.py splits them (a hash of the host): `dev`, the half the default
extractor's thresholds were chosen on, and `held-out`, the other; each half is one WARC file,
measured on its own. Or give WARC files of your own.

Reproduce (from the repository root, after `make setup`):

    git clone https://github.com/scrapinghub/article-extraction-benchmark aeb
    git clone https://github.com/adbar/trafilatura
    nice .venv/bin/python benchmarks/warc_vs_datatrove.py --aeb aeb --trafilatura trafilatura/tests
    nice .venv/bin/python benchmarks/warc_vs_datatrove.py crawl/*.warc.gz    # your own WARCs

Each command is a fresh process pinned to one core (`taskset -c 0`); its CPU time (user +
system, with its reaped children: datatrove extracts in a sandbox process) comes from
os.wait4, start-up included, as a user runs it: llmtk's modules byte-compiled first, as pip
compiles an installed package's and Python a checkout's on their first import (where
PYTHONDONTWRITEBYTECODE is set, a checkout's would otherwise be compiled from source in every
run, ~0.1 s of each; datatrove's, installed by pip, are compiled). The same commands on a
WARC of one small page give the start-up, so the rate without it is printed too.
  llmtk:      llmtk clean WARC --filters none --no-langid --no-pii --on-error skip
              --workers 1 -o OUT.jsonl
  datatrove:  benchmarks/_warc_datatrove_worker.py in benchmarks/.venvs/datatrove
              (datatrove 0.10.1, plus warcio, trafilatura, lxml_html_clean, faust-cchardet
              and python-magic, installed from PyPI on first use)
Pages: the WARC's response records (llmtk's records in). `--repeat N`: the median of N runs.
The numbers: docs/clean.md, "Performance".
"""

from __future__ import annotations

import argparse
import compileall
import gzip
import io
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import DATATROVE_VENV, datatrove_python, one_core  # noqa: E402
from article_extraction import half  # noqa: E402

OUT = ROOT / "benchmarks" / "out" / "warc"
WORKER = ROOT / "benchmarks" / "_warc_datatrove_worker.py"
# What datatrove's WarcReader and Trafilatura need besides datatrove itself (the reader
# refuses to start without cchardet and magic; trafilatura's justext needs lxml_html_clean).
WARC_PACKAGES = ["warcio", "trafilatura", "lxml_html_clean", "faust-cchardet", "python-magic"]
TINY = (b"<!DOCTYPE html><html><head><title>t</title></head>"
        b"<body><p>One short page.</p></body></html>")


# -- the WARC files ------------------------------------------------------------------------


def record(url: str, body: bytes, n: int) -> bytes:
    """One gzip-compressed WARC response record, as Common Crawl writes them."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    out = io.BytesIO()
    http = StatusAndHeaders("200 OK", [("Content-Type", "text/html"),
                                       ("Content-Length", str(len(body)))], protocol="HTTP/1.1")
    headers = {"WARC-Record-ID": f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, f'{n}:{url}')}>",
               "WARC-Date": "2024-01-01T00:00:00Z",
               # Common Crawl's sniffed type: without it datatrove asks libmagic, which calls
               # some pages text/xml or text/plain and skips them
               "WARC-Identified-Payload-Type": "text/html"}
    writer = WARCWriter(out, gzip=True)
    writer.write_record(writer.create_warc_record(
        url, "response", payload=io.BytesIO(body), http_headers=http,
        warc_headers_dict=headers))
    return out.getvalue()


def pages(aeb: Path | None, traf: Path | None) -> list[tuple[str, bytes]]:
    """(url, raw bytes) of every page, in a fixed order: the benchmark's, then trafilatura's."""
    out = []
    if aeb is not None:
        truth = json.loads((aeb / "ground-truth.json").read_text(encoding="utf-8"))
        for key, item in sorted(truth.items()):
            out.append((item["url"], gzip.decompress((aeb / "html" / f"{key}.html.gz")
                                                     .read_bytes())))
    if traf is not None:
        data = json.loads((traf / "evaldata.json").read_text(encoding="utf-8"))
        for url, item in sorted(data.items()):
            path = next((traf / sub / item["file"] for sub in ("cache", "eval")
                         if (traf / sub / item["file"]).is_file()), None)
            if path is None:
                sys.exit(f"{traf}: {item['file']} not found under cache/ or eval/")
            out.append((url, path.read_bytes()))
    return out


def build(aeb: Path | None, traf: Path | None) -> list[Path]:
    """The pages as two WARC files, one per half of the sites."""
    OUT.mkdir(parents=True, exist_ok=True)
    files = {h: OUT / f"{h}.warc.gz" for h in ("dev", "held-out")}
    handles = {h: open(p, "wb") for h, p in files.items()}
    try:
        for n, (url, body) in enumerate(pages(aeb, traf)):
            handles[half(url)].write(record(url, body, n))
    finally:
        for f in handles.values():
            f.close()
    return list(files.values())


# -- running -------------------------------------------------------------------------------


def peer_python() -> Path:
    """datatrove's venv (benchmarks/_common.py), with what its WARC stage needs."""
    python = datatrove_python()
    probe = subprocess.run([str(python), "-c", "import warcio, trafilatura, cchardet, magic, "
                            "lxml_html_clean"], capture_output=True)
    if probe.returncode != 0:
        print(f"installing {' '.join(WARC_PACKAGES)} into {DATATROVE_VENV.relative_to(ROOT)}",
              file=sys.stderr)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *WARC_PACKAGES],
                       check=True)
    return python


def command(side: str, warc: Path, out: Path, python: Path) -> list[str]:
    if side == "llmtk":
        return one_core([sys.executable, "-m", "llmtk", "clean", str(warc), "--filters", "none",
                         "--no-langid", "--no-pii", "--on-error", "skip", "--workers", "1",
                         "-q", "-o", str(out), "--stats", str(out) + ".stats.json"])
    return one_core([str(python), str(WORKER), str(warc), str(out)])


def cpu_seconds(cmd: list[str]) -> float:
    """CPU seconds (user + system) of one fresh process and the children it reaped."""
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    if status != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err[-2000:]}")
    return usage.ru_utime + usage.ru_stime


def measure(warc: Path, python: Path, repeat: int) -> dict:
    out = {}
    for side in ("llmtk", "datatrove"):
        dst = OUT / f"{side}.{warc.name}.jsonl"
        cpu = statistics.median(cpu_seconds(command(side, warc, dst, python))
                                for _ in range(repeat))
        if side == "llmtk":
            stats = json.loads(Path(str(dst) + ".stats.json").read_text())
            out["pages"] = stats["records_in"]
            returned = stats["records_out"]
        else:
            lines = dst.read_text(encoding="utf-8").splitlines()
            summary = json.loads(lines[-1])
            returned = summary["returned"]
            out["datatrove_counters"] = summary["counters"]
            out["datatrove_read"] = summary["read"]
        out[side] = {"cpu_s": round(cpu, 2), "returned": returned}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("warc", nargs="*", type=Path, help="WARC files (default: --aeb/--trafilatura)")
    ap.add_argument("--aeb", type=Path, help="a checkout of scrapinghub/article-extraction-"
                    "benchmark (ground-truth.json, html/)")
    ap.add_argument("--trafilatura", type=Path, help="trafilatura's tests/ folder "
                    "(evaldata.json, cache/, eval/)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per command (median CPU)")
    args = ap.parse_args()
    if not args.warc and args.aeb is None and args.trafilatura is None:
        ap.error("give WARC files, or --aeb and/or --trafilatura to build them")
    warcs = args.warc or build(args.aeb, args.trafilatura)
    python = peer_python()
    compileall.compile_dir(ROOT / "llmtk", quiet=1)  # (see the module's docstring)
    OUT.mkdir(parents=True, exist_ok=True)
    tiny = OUT / "one-page.warc.gz"
    tiny.write_bytes(record("https://example.org/", TINY, 0))
    start = {side: statistics.median(cpu_seconds(command(side, tiny, OUT / f"{side}.tiny.jsonl",
                                                         python)) for _ in range(args.repeat))
             for side in ("llmtk", "datatrove")}
    print(json.dumps({"start_up_cpu_s": {k: round(v, 2) for k, v in start.items()}}))
    for warc in warcs:
        t0 = time.perf_counter()
        m = measure(warc, python, args.repeat)
        n = m["pages"]
        rate = {s: n / m[s]["cpu_s"] for s in ("llmtk", "datatrove")}
        # without the start-up: only meaningful where the run is long beside it
        bare = {s: n / (m[s]["cpu_s"] - start[s]) if m[s]["cpu_s"] > 2 * start[s] else None
                for s in ("llmtk", "datatrove")}
        print(json.dumps({
            "warc": str(warc), "pages": n, "mb": round(warc.stat().st_size / 1e6, 1),
            **{s: {**m[s], "pages_per_cpu_s": round(rate[s], 1),
                   "pages_per_cpu_s_without_start_up": bare[s] and round(bare[s], 1)}
               for s in ("llmtk", "datatrove")},
            "datatrove_read": m["datatrove_read"], "datatrove_counters": m["datatrove_counters"],
            "llmtk_vs_datatrove": round(rate["llmtk"] / rate["datatrove"], 2),
            "llmtk_vs_datatrove_without_start_up": round(bare["llmtk"] / bare["datatrove"], 2)
            if bare["llmtk"] and bare["datatrove"] else None,
            "wall_s": round(time.perf_counter() - t0, 1)}, indent=2))


if __name__ == "__main__":
    main()
