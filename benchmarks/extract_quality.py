"""Main-content extraction from WARC: llmtk clean vs datatrove, resiliparse and trafilatura.

Reproduce (Debian/Ubuntu with apt-get and dpkg-deb; nothing is installed), from the
repository root after `make setup`:

    .venv/bin/python benchmarks/extract_quality.py            # all packages below
    .venv/bin/python benchmarks/extract_quality.py --limit 100 --peers llmtk,resiliparse

The corpus: Debian documentation packages that ship one manual both as HTML pages (DocBook
output: a navigation header and footer on every page, a table of contents per chapter) and
as one plain-text file made from the same source — maint-guide (11 languages), debian-faq
(10) and debian-reference (11), among them ja, ko, zh-cn and zh-tw. Each HTML page (a
chapter) is paired with its part of the text file: from the line that holds the page's
<title> to the next page's title (pages whose title is not found, the index pages, are left
out). The pages are packed as Common Crawl packs them: one gzip member per WARC `response`
record with HTTP headers, URLs https://PACKAGE.debian.example/PATH, no charset in the HTTP
header (the pages' <meta> has it). Written to benchmarks/out/extract/.

Measured per extractor, one core each (`taskset`), CPU seconds of the process (reading the
WARC included, as in a pipeline):
  * word-level precision, recall, F1 of the extracted text against the page's text, bags of
    words (CJK: characters), macro-averaged: precision over the pages with output, recall
    and F1 over all pages (a page with no output scores 0; "empty" counts them);
  * leaks: the share of pages whose output holds a line (of two words or more) of the page's
    navigation header, footer or table of contents that is not in the page's text
    (whitespace ignored in the comparison: the text file wraps lines);
  * pages per CPU-second.
Extractors: llmtk clean (`--extract resiliparse` and `--extract trafilatura`, filters,
language ID and PII off; normalisation on), datatrove 0.10.1 WarcReader + Trafilatura
(favour_precision, FineWeb's setting), resiliparse alone (fastwarc + main_content), and
trafilatura alone (warcio + defaults). The peers run in benchmarks/.venvs/extract (created
on first use from PyPI: datatrove==0.10.1, trafilatura, warcio, resiliparse,
lxml_html_clean, faust-cchardet, python-magic).

`--host-lines` also scores every output with the lines that repeat across half or more of a
host's pages removed (the cross-page boilerplate rule; in a pipeline it is a second pass).
`--parse` adds parsing alone (llmtk cat, which also decodes charsets, vs fastwarc and warcio
reading every response payload). `--hostile` adds the damaged-archive check: 20 pages with
one Content-Length 300 bytes too short, one 300 too long, a PNG served as text/html and a
truncated last member: how many of the 16 intact HTML pages each reader returns, and what
it does with the PNG.
"""

import argparse
import gzip
import json
import os
import re
import resource
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import debian_packages  # noqa: E402

OUT = ROOT / "benchmarks" / "out" / "extract"
VENV = ROOT / "benchmarks" / ".venvs" / "extract"
# faust-cchardet and python-magic: datatrove's WarcReader refuses to start without them
PEER_PACKAGES = ["datatrove==0.10.1", "trafilatura", "warcio", "resiliparse", "lxml_html_clean",
                 "orjson", "faust-cchardet", "python-magic"]
WORKER = ROOT / "benchmarks" / "_extract_peer_worker.py"
PACKAGES = (
    ["maint-guide"] + [f"maint-guide-{x}" for x in
                       "ca de es fr it ja ru vi zh-cn zh-tw".split()]
    + ["debian-faq"] + [f"debian-faq-{x}" for x in "de fr it ja ko nl pt ru zh-cn".split()]
    + [f"debian-reference-{x}" for x in "en de es fr id it ja pt pt-br zh-cn zh-tw".split()]
)
_CJK = "\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_CJK}]|[^\W{_CJK}]+")
_SPACE = re.compile(r"\s+")


def tokens(text: str) -> Counter:
    return Counter(_TOKEN.findall(text.lower()))


def collapse(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def bare(text: str) -> str:
    """Without whitespace: the text file wraps CJK lines (and spaces them) where HTML does not."""
    return _SPACE.sub("", text)


# ------------------------------------------------------------------ corpus


def pages_of(pkg_dir: Path):
    """(relative path, html bytes, reference text, boilerplate lines) of a package's pages."""
    from resiliparse.parse.html import HTMLTree

    for txt in sorted(pkg_dir.rglob("*.txt.gz")):
        m = re.match(r"(.+)\.([a-zA-Z_-]+)\.txt\.gz$", txt.name)
        if not m:
            continue
        lang = m.group(2)
        text = collapse(gzip.decompress(txt.read_bytes()).decode("utf-8", "replace"))
        htmls = sorted(p for p in pkg_dir.rglob(f"*.{lang}.html"))
        titled = []
        for p in htmls:
            raw = p.read_bytes()
            tree = HTMLTree.parse_from_bytes(raw)
            title = collapse(tree.title or "")
            start = text.rfind(title) if title else -1
            if start > 0 and not p.name.startswith("index."):
                titled.append((start, p, raw, tree))
        starts = sorted(s for s, *_ in titled)
        for start, p, raw, tree in titled:
            end = min([s for s in starts if s > start], default=len(text))
            ref = text[start:end]
            bare_ref = bare(ref)
            boiler = set()
            for node in tree.body.query_selector_all(".navheader, .navfooter, .toc"):
                for line in node.text.splitlines():
                    line = bare(line)
                    if line and line not in bare_ref and (len(_TOKEN.findall(line)) >= 2):
                        boiler.add(line)
            yield str(p.relative_to(pkg_dir)), raw, ref, sorted(boiler)


def response(url: str, body: bytes, ctype: str = "text/html") -> bytes:
    """One WARC response record (uncompressed), as Common Crawl writes them."""
    import uuid

    http = (f"HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode() + body
    rid = uuid.uuid5(uuid.NAMESPACE_URL, url)
    head = (f"WARC/1.0\r\nWARC-Type: response\r\nWARC-Record-ID: <urn:uuid:{rid}>\r\n"
            f"WARC-Date: 2024-01-01T00:00:00Z\r\nWARC-Target-URI: {url}\r\n"
            # Common Crawl's sniffed type; datatrove's WarcReader skips a record without it
            # when libmagic calls the payload text/xml (XHTML with an XML declaration)
            f"WARC-Identified-Payload-Type: {ctype}\r\n"
            f"Content-Type: application/http; msgtype=response\r\n"
            f"Content-Length: {len(http)}\r\n\r\n").encode()
    return head + http + b"\r\n\r\n"


def build(debs: Path, packages: list[str], limit: int) -> tuple[Path, dict]:
    debian_packages(debs, packages)
    OUT.mkdir(parents=True, exist_ok=True)
    warc, refs = OUT / "corpus.warc.gz", {}
    with open(warc, "wb") as f:
        for pkg in packages:
            for rel, raw, ref, boiler in pages_of(debs / f"x_{pkg}"):
                url = f"https://{pkg}.debian.example/{rel}"
                refs[url] = {"ref": ref, "boiler": boiler}
                f.write(gzip.compress(response(url, raw), mtime=0))
                if limit and len(refs) >= limit:
                    return warc, refs
    return warc, refs


# ------------------------------------------------------------------ running


def peer_python() -> Path:
    python = VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {VENV.relative_to(ROOT)} (a few minutes)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    probe = subprocess.run([str(python), "-c", "import datatrove, trafilatura, warcio, "
                            "resiliparse, lxml_html_clean, cchardet, magic"],
                           capture_output=True)
    if probe.returncode != 0:
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *PEER_PACKAGES],
                       check=True)
    return python


def command(name: str, warc: Path, out: Path) -> list[str]:
    pin = ["taskset", "-c", "0"] if sys.platform.startswith("linux") else []
    if name == "llmtk-cat":  # parsing alone: records decoded to JSONL, nothing extracted
        return [*pin, str(ROOT / ".venv" / "bin" / "python"), "-m", "llmtk", "cat", str(warc),
                "--on-error", "skip", "-q", "-o", str(out)]
    if name.startswith("llmtk"):
        method = name.split("-", 1)[1] if "-" in name else "resiliparse"
        return [*pin, str(ROOT / ".venv" / "bin" / "python"), "-m", "llmtk", "clean", str(warc),
                "--extract", method, "--filters", "none", "--no-langid", "--no-pii",
                "--on-error", "skip", "-q", "-o", str(out)]
    return [*pin, str(peer_python()), str(WORKER), name, str(warc), str(out)]


def run(name: str, warc: Path) -> tuple[dict[str, str], float, str]:
    """(url -> text, CPU seconds, "" or how the extractor failed); what it wrote before
    failing is kept (a pipeline would have had it)."""
    out = OUT / f"{name}.{warc.stem}.jsonl"
    out.unlink(missing_ok=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(command(name, warc, out), capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    failed = ""
    if r.returncode != 0:
        lines = [x for x in r.stderr.strip().splitlines() if x.strip()]
        failed = f"exit {r.returncode}: {lines[-1][:160] if lines else ''}"
    return read_output(out), cpu, failed


def read_output(out: Path) -> dict[str, str]:
    texts = {}
    if out.exists():
        for line in out.read_text(encoding="utf-8").splitlines():
            d = json.loads(line)
            texts[d["url"]] = d["text"]
    return texts


def score(texts: dict[str, str], refs: dict) -> dict:
    """Macro scores: precision over the pages the extractor returned text for (an empty
    output has no precision), recall and F1 over all pages (a missing page scores 0)."""
    ps, rs, fs, leaks = [], [], [], 0
    for url, want in refs.items():
        got = texts.get(url, "")
        g, w = tokens(got), tokens(want["ref"])
        common = sum((g & w).values())
        p = common / sum(g.values()) if g else None
        r = common / max(sum(w.values()), 1)
        if p is not None:
            ps.append(p)
        rs.append(r)
        fs.append(2 * p * r / (p + r) if p and r else 0.0)
        flat = bare(got)
        if any(b in flat for b in want["boiler"]):
            leaks += 1
    n = max(len(refs), 1)
    return {"precision": sum(ps) / max(len(ps), 1), "recall": sum(rs) / n, "f1": sum(fs) / n,
            "leak_share": leaks / n, "empty": n - len(ps)}


# ------------------------------------------------------------------ host-level boilerplate


def without_host_repeats(texts: dict[str, str]) -> tuple[dict[str, str], float]:
    """Lines found on at least half of a host's pages (and on 3 or more) removed from all
    of them: boilerplate that repeats across a site. (result, CPU seconds it took)."""
    t = time.process_time()
    hosts: dict[str, list[str]] = {}
    for url in texts:
        hosts.setdefault(url.split("/")[2], []).append(url)
    out = {}
    for urls in hosts.values():
        seen = Counter()
        for u in urls:
            seen.update({line.strip() for line in texts[u].splitlines() if line.strip()})
        common = {line for line, n in seen.items() if n >= max(3, len(urls) // 2)}
        for u in urls:
            out[u] = "\n".join(x for x in texts[u].splitlines() if x.strip() not in common)
    return out, time.process_time() - t


# ------------------------------------------------------------------ hostile records


def hostile(warc: Path) -> None:
    """20 pages; record 5's Content-Length 300 short, record 10's 300 long, a PNG as
    text/html at 15, the last member cut in half."""
    records = []
    with gzip.open(warc) as f:
        data = f.read()
    for chunk in data.split(b"WARC/1.0\r\n")[1:21]:
        records.append(b"WARC/1.0\r\n" + chunk)
    png = b"\x89PNG\r\n\x1a\n" + os.urandom(38000)
    records[14] = response("https://png.debian.example/logo", png)

    def relength(rec: bytes, delta: int) -> bytes:
        return re.sub(rb"\r\nContent-Length: (\d+)\r\n\r\nHTTP",
                      lambda m: b"\r\nContent-Length: %d\r\n\r\nHTTP" % (int(m.group(1)) + delta),
                      rec, count=1)

    records[4] = relength(records[4], -300)
    records[9] = relength(records[9], 300)
    members = [gzip.compress(r, mtime=0) for r in records]
    members[-1] = members[-1][:len(members[-1]) // 2]
    bad = OUT / "hostile.warc.gz"
    bad.write_bytes(b"".join(members))
    print("\nhostile archive: 20 records, 16 intact HTML pages (5: -300, 10: +300, 15: PNG as "
          "text/html, 20: truncated member)")
    # llmtk also counts each damaged record as one bad record (see its --stats)
    for name in ("llmtk", "datatrove", "resiliparse", "trafilatura"):
        texts, _, failed = run(name, bad)
        png_text = texts.get("https://png.debian.example/logo")
        pages = len(texts) - (png_text is not None)
        print(f"  {name:12s} HTML pages out {pages:3d}  PNG as text: "
              f"{'no' if png_text is None else f'{len(png_text):,} chars'}"
              f"{'  then stopped: ' + failed if failed else ''}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--debs", default=str(ROOT / "benchmarks" / "out" / "debs"))
    ap.add_argument("--limit", type=int, default=0, help="first N pages only")
    ap.add_argument("--packages", default=",".join(PACKAGES))
    ap.add_argument("--peers", default="llmtk,llmtk-trafilatura,datatrove,resiliparse,"
                                       "trafilatura")
    ap.add_argument("--hostile", action="store_true")
    ap.add_argument("--host-lines", action="store_true", help="also score each output with "
                    "lines that repeat across a host's pages removed")
    ap.add_argument("--rescore", action="store_true", help="score the outputs of the last run "
                    "again (no extraction)")
    ap.add_argument("--parse", action="store_true", help="also time parsing alone: llmtk cat "
                    "vs fastwarc and warcio")
    args = ap.parse_args()
    warc, refs = build(Path(args.debs), args.packages.split(","), args.limit)
    langs = Counter(re.search(r"\.([a-zA-Z_-]+)\.html$", u).group(1) for u in refs)
    print(f"corpus: {len(refs):,} pages, {warc.stat().st_size / 1e6:.1f} MB compressed, "
          f"{len(langs)} languages ({' '.join(sorted(langs))}); {warc}")
    results = {}
    for name in args.peers.split(","):
        t = time.perf_counter()
        if args.rescore:
            old = json.loads((OUT / "results.json").read_text())[name]
            texts, cpu, failed = read_output(OUT / f"{name}.{warc.stem}.jsonl"), 0.0, ""
            cpu = len(refs) / old["pages_per_cpu_s"] if old["pages_per_cpu_s"] else 0.0
        else:
            texts, cpu, failed = run(name, warc)
        if failed:
            print(f"{name}: {failed}", file=sys.stderr)
        s = score(texts, refs)
        s["pages_per_cpu_s"] = len(refs) / cpu if cpu else 0.0
        s["docs"] = len(texts)
        results[name] = s
        print(f"{name:18s} P {s['precision']:.3f}  R {s['recall']:.3f}  F1 {s['f1']:.3f}  "
              f"leaks {s['leak_share']:.1%}  {s['pages_per_cpu_s']:7.1f} pages/CPU-s  "
              f"({s['empty']} empty, {time.perf_counter() - t:.1f} s wall)")
    if "llmtk" in results and "datatrove" in results and results["datatrove"]["pages_per_cpu_s"]:
        ratio = results["llmtk"]["pages_per_cpu_s"] / results["datatrove"]["pages_per_cpu_s"]
        print(f"llmtk / datatrove pages per CPU-second: {ratio:.1f}x")
    if args.host_lines:
        print("\nwith lines on half or more of a host's pages removed (a second pass):")
        for name in results:
            texts, cost = without_host_repeats(read_output(OUT / f"{name}.{warc.stem}.jsonl"))
            s = score(texts, refs)
            print(f"  {name:18s} P {s['precision']:.3f}  R {s['recall']:.3f}  "
                  f"leaks {s['leak_share']:.1%}  (+{cost:.2f} CPU-s on top of extraction)")
    (OUT / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True))
    if args.parse:
        print("\nparsing alone (payloads read and decoded, nothing extracted):")
        for name in ("llmtk-cat", "fastwarc", "warcio"):
            texts, cpu, _ = run(name, warc)
            print(f"  {name:10s} {len(texts)} records  {len(refs) / cpu:8.1f} pages/CPU-s")
    if args.hostile:
        hostile(warc)


if __name__ == "__main__":
    main()
