"""Near-duplicate recall of `llmtk dedup` on real edited copies of source files.

Reproduce (after `make setup`; apt-get downloads the packages once):

    .venv/bin/python benchmarks/dedup_code.py

The pairs are copies that real projects made and then edited, from Debian 12 packages:
  - Go 1.19's vendored golang.org/x/{crypto,net,sys,text,tools,...} (golang-1.19-src) and
    the same files in Debian's golang-golang-x-*-dev packages, a year or two of upstream
    edits later;
  - lodash's CommonJS modules (node-lodash: lodash/X.js) and their ES-module build
    (lodash-es/X.js): the same functions with other import/export lines.
Every file of both sides goes into one stream (with the unpaired files of those trees as
distractors), and `llmtk dedup --annotate` runs once per unit: `word` (what `dedup` does by
default: punctuation and operators normalised away, words of letters and digits) and
`code` (identifiers, numbers and each operator character; punctuation kept). A pair is
found when one file is marked a duplicate of the other (or both of the same third).
Recall is reported by how much the pair shares: the exact Jaccard similarity of their
code-token 5-gram sets, in buckets.
"""

import json
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import debian_packages  # noqa: E402

DEBS = ROOT / "benchmarks" / "out" / "debs"
PACKAGES = ["golang-1.19-src", "golang-golang-x-sys-dev", "golang-golang-x-net-dev",
            "golang-golang-x-crypto-dev", "golang-golang-x-text-dev",
            "golang-golang-x-tools-dev", "node-lodash"]
BUCKETS = [(0.9, 1.01), (0.8, 0.9), (0.6, 0.8), (0.4, 0.6), (0.0, 0.4)]


def _read(p: Path) -> str | None:
    try:
        text = p.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None
    return text if 300 <= len(text) <= 300_000 else None


def pairs() -> tuple[list[tuple[str, str]], dict[str, str]]:
    """([(path a, path b)], {path: text}) of the copies, plus unpaired distractors."""
    texts: dict[str, str] = {}
    found = []
    go = DEBS / "x_golang-1.19-src" / "usr/share/go-1.19/src"
    x_roots = [DEBS / f"x_golang-golang-x-{n}-dev" / "usr/share/gocode/src/golang.org/x"
               for n in ("sys", "net", "crypto", "text", "tools")]
    for vendor in (go / "vendor/golang.org/x", go / "cmd/vendor/golang.org/x"):
        for p in sorted(vendor.rglob("*.go")):
            rel = p.relative_to(vendor)
            a = _read(p)
            if a is None:
                continue
            key_a = f"go/{p.relative_to(go)}"
            texts[key_a] = a
            for root in x_roots:
                q = root / rel
                if q.is_file() and (b := _read(q)) is not None and b != a:
                    key_b = f"debian/{q.relative_to(root.parent)}"
                    texts[key_b] = b
                    found.append((key_a, key_b))
    lodash = DEBS / "x_node-lodash" / "usr/share/nodejs"
    for p in sorted((lodash / "lodash").glob("*.js")):
        q = lodash / "lodash-es" / p.name
        a, b = _read(p), _read(q) if q.is_file() else None
        if a is None:
            continue
        texts[f"lodash/{p.name}"] = a
        if b is not None and b != a:
            texts[f"lodash-es/{p.name}"] = b
            found.append((f"lodash/{p.name}", f"lodash-es/{p.name}"))
    return found, texts


def jaccard(a: str, b: str) -> float:
    from llmtk.dedup.minhash import code_tokens

    def grams(t: str) -> set:
        toks = code_tokens(t.lower())
        return {tuple(toks[i:i + 5]) for i in range(max(len(toks) - 4, 1))}
    x, y = grams(a), grams(b)
    return len(x & y) / len(x | y) if x | y else 1.0


def run_dedup(texts: dict[str, str], unit: str) -> dict[str, str]:
    """{path: the path it is a duplicate of} from `llmtk dedup --annotate --unit UNIT`."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.jsonl"
        with open(src, "w") as f:
            for path, text in texts.items():
                f.write(json.dumps({"id": path, "text": text}) + "\n")
        out = subprocess.run([sys.executable, "-m", "llmtk", "dedup", str(src), "--annotate",
                              "--unit", unit, "-q"], check=True, capture_output=True, cwd=ROOT)
    dup = {}
    for line in out.stdout.splitlines():
        r = json.loads(line)
        of = r.get("llmtk", {}).get("dup_of")
        if of is not None:
            dup[r["id"]] = of
    return dup


def main() -> None:
    debian_packages(DEBS, PACKAGES)
    found, texts = pairs()
    sims = {pair: jaccard(texts[pair[0]], texts[pair[1]]) for pair in found}
    print(f"{len(found)} edited pairs, {len(texts)} files "
          f"({sum(map(len, texts.values())) / 1e6:.1f} MB)")
    results = {}
    for unit in ("word", "code"):
        dup = run_dedup(texts, unit)

        def root(p: str, dup: dict = dup) -> str:
            seen = set()
            while p in dup and p not in seen:
                seen.add(p)
                p = dup[p]
            return p
        results[unit] = {pair: root(pair[0]) == root(pair[1]) for pair in found}
        paired = {p for pair in found for p in pair}
        others = sum(1 for p in dup if p not in paired or root(p) not in paired)
        results[unit + "_others"] = others
    print(f"\n{'code-token Jaccard':<20}{'pairs':>7}{'--unit word':>13}{'--unit code':>13}")
    for lo, hi in BUCKETS:
        sel = [p for p in found if lo <= sims[p] < hi]
        if not sel:
            continue
        w = sum(results["word"][p] for p in sel) / len(sel)
        c = sum(results["code"][p] for p in sel) / len(sel)
        print(f"{f'{lo:.1f} .. {min(hi, 1.0):.1f}':<20}{len(sel):>7}{w:>13.3f}{c:>13.3f}")
    by_source = defaultdict(list)
    for p in found:
        by_source["lodash" if p[0].startswith("lodash") else "go x/"].append(p)
    for name, sel in sorted(by_source.items()):
        w = sum(results["word"][p] for p in sel) / len(sel)
        c = sum(results["code"][p] for p in sel) / len(sel)
        print(f"{'all ' + name:<20}{len(sel):>7}{w:>13.3f}{c:>13.3f}")
    print(f"\nfiles marked duplicates outside the known pairs: word {results['word_others']}, "
          f"code {results['code_others']}")


if __name__ == "__main__":
    main()
