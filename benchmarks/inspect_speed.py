"""`llmtk inspect`'s throughput and peak memory, beside `llmtk clean --filters none --no-langid`.

The issue's goal: one inspect pass (language ID on) at >= 50% of that clean's throughput per
core, and <= 300 MiB per task at 1x and 4x the corpus. Both commands run as fresh processes
pinned to one core (taskset), in the same run, on the same file; peak memory is each
process's own maximum resident set (os.wait4).

The corpus: every docstring of 200+ characters in the standard library and a few installed
libraries (numpy, pyarrow, rich, ...): English technical prose and code, `source` its
module; or a JSONL path given as an argument. 4x is the corpus four times over (the copies
are exact duplicates, which grow every sketch as new documents do: the near-duplicate
sample, the counts). `marginal` compares the CPU seconds that the extra 3x costs each
command, without the process start and model load that a small corpus is mostly made of.
`4x_distinct` is the corpus four times with a word of each copy's own appended to every
text of copies 2-4: near duplicates, not exact ones, so it shows the throughput on new
documents (inspect signs an exact duplicate's text once, which the plain 4x profits by).

Each command runs three times; the least disturbed run (least CPU) counts.
`--agreement N` instead writes N synthetic documents (10% exact copies, 10% one-word edits),
past the near-duplicate sample's bound, and sets inspect's duplicate shares beside what
`llmtk dedup` removes.

Reproduce:
    .venv/bin/python benchmarks/inspect_speed.py            # stdlib docstrings
    .venv/bin/python benchmarks/inspect_speed.py data.jsonl
    .venv/bin/python benchmarks/inspect_speed.py --agreement 240000
The numbers: docs/inspect.md, "Speed and memory".
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks._common import LLMTK, ROOT, one_core  # noqa: E402

# Every standard-library module but those that start programs or need a display, and the
# packages' submodules; then the docstrings of a few installed libraries.
SKIP = {"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "__hello__",
        "__phello__", "lib2to3", "pydoc_data", "test", "ensurepip", "venv", "sitecustomize"}
LIBRARIES = ("numpy", "rich", "typer", "orjson", "zstandard", "xxhash", "pyarrow", "tokenizers")


def module_names() -> list[str]:
    import pkgutil

    names = sorted(n for n in sys.stdlib_module_names if n not in SKIP and not n.startswith("_"))
    more = []
    for name in [*names, *LIBRARIES]:
        try:
            mod = importlib.import_module(name)
        except Exception:
            continue
        more.append(name)
        for info in pkgutil.walk_packages(getattr(mod, "__path__", []), name + "."):
            if not any(part in SKIP or part.startswith("_") for part in info.name.split(".")) \
                    and "test" not in info.name:
                more.append(info.name)
    return more


def stdlib_corpus(path: str) -> int:
    """Docstrings of MODULES and their classes' methods as JSONL; returns the record count."""
    seen, n = set(), 0
    with open(path, "w") as f:
        for name in module_names():
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    mod = importlib.import_module(name)
            except BaseException:  # a module this Python lacks, or one that exits on import
                continue
            objects = [(name, mod)]
            for attr, obj in inspect.getmembers(mod):
                objects.append((f"{name}.{attr}", obj))
                if inspect.isclass(obj):
                    objects += [(f"{name}.{attr}.{a}", o) for a, o in vars(obj).items()]
            for ident, obj in objects:
                try:
                    doc = inspect.getdoc(obj)
                except Exception:
                    continue
                if doc and len(doc) >= 200 and doc not in seen:
                    seen.add(doc)
                    f.write(json.dumps({"id": ident, "source": name, "text": doc}) + "\n")
                    n += 1
    return n


def times(src: str, dst: str, k: int) -> None:
    with open(src, "rb") as f:
        data = f.read()
    with open(dst, "wb") as f:
        for _ in range(k):
            f.write(data)


def times_distinct(src: str, dst: str, k: int) -> None:
    """src k times, each copy after the first with a word of its own at the end of every
    text: no copy is an exact duplicate (a near one instead), so no work is saved on
    exact duplicates, as inspect's signature pass saves it on `times`'s copies."""
    with open(src, "rb") as f:
        lines = f.read().splitlines()
    with open(dst, "w") as f:
        for c in range(k):
            for line in lines:
                rec = json.loads(line)
                if c:
                    rec["text"] += " copy" + "abcdefghij"[c % 10] * (1 + c // 10)
                f.write(json.dumps(rec) + "\n")


def best(cmd: list[str], repeats: int = 3) -> dict:
    """The fastest of `repeats` runs (the machine may be shared: the least disturbed one)."""
    return min((run(cmd) for _ in range(repeats)), key=lambda r: r["cpu_s"])


def run(cmd: list[str]) -> dict:
    """Wall seconds, CPU seconds and peak RSS (MiB) of one fresh process."""
    start = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - start
    err = p.stderr.read().decode()
    p.stderr.close()
    if status != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err}")
    return {"wall_s": round(wall, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_mib": round(usage.ru_maxrss / 1024, 1)}


def synthetic(path: str, n: int, seed: int = 3) -> None:
    """n documents of 80 random three-letter words: 10% exact copies and 10% one-word edits
    (Jaccard ~0.88 on word 5-grams) of earlier ones; the rest new."""
    import itertools
    import random

    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["".join(p) for p in itertools.product(letters, repeat=3)][:5000]
    earlier: list[str] = []
    with open(path, "w") as f:
        for i in range(n):
            r = rng.random()
            if earlier and r < 0.2:
                text = rng.choice(earlier)
                if r >= 0.1:
                    words = text.split()
                    words[rng.randrange(len(words))] = "zz" + "".join(letters[int(c)]
                                                                     for c in str(i))
                    text = " ".join(words)
            else:
                text = " ".join(rng.choice(vocab) for _ in range(80))
                if len(earlier) < 50_000:
                    earlier.append(text)
                else:
                    earlier[rng.randrange(50_000)] = text
            f.write(json.dumps({"id": i, "text": text, "source": f"s{i % 7}"}) + "\n")


def agreement(n: int) -> None:
    """inspect's duplicate shares past its sample bound against what dedup removes."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "synthetic.jsonl")
        synthetic(path, n)
        res = os.path.join(tmp, "inspect.json")
        stats = os.path.join(tmp, "dedup.json")
        insp = run([*LLMTK, "inspect", path, "-q", "-o", res])
        subprocess.run([*LLMTK, "dedup", path, "-q", "-o", os.path.join(tmp, "kept.jsonl"),
                        "--stats", stats], check=True, cwd=ROOT)
        with open(res) as f:
            r = json.load(f)["result"]
        with open(stats) as f:
            dropped = json.load(f)["dropped"]
        exact = dropped.get("dedup.exact", 0) / n
        near = (dropped.get("dedup.exact", 0) + dropped.get("dedup.minhash", 0)) / n
        print(json.dumps({
            "documents": n, "inspect": insp,
            "exact": {"inspect": r["exact_duplicate_fraction"], "dedup": round(exact, 6)},
            "near": {"inspect": r["near_duplicate_fraction"], "dedup": round(near, 6)},
            "near_only": {"inspect": r["duplicates"]["near_only_fraction"],
                          "dedup": round(near - exact, 6)},
            "sampled": r["duplicates"]["near_sampled_documents"],
            "rate": r["duplicates"]["near_sample_rate"]}, indent=2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("corpus", nargs="?", help="a JSONL file (default: stdlib docstrings)")
    ap.add_argument("--build", metavar="FILE", help=argparse.SUPPRESS)
    ap.add_argument("--agreement", type=int, metavar="N", help="instead: N synthetic "
                    "documents past the sample bound, inspect's shares against dedup's")
    args = ap.parse_args()
    if args.agreement:
        agreement(args.agreement)
        return
    if args.build:  # in a child: the imports would raise this process's peak RSS, which
        stdlib_corpus(args.build)  # the measured children inherit through fork and exec
        return
    with tempfile.TemporaryDirectory() as tmp:
        one = args.corpus
        if one is None:
            one = os.path.join(tmp, "stdlib.jsonl")
            subprocess.run([sys.executable, __file__, "--build", one], check=True, cwd=ROOT)
        four = os.path.join(tmp, "x4.jsonl")
        times(one, four, 4)
        distinct = os.path.join(tmp, "x4d.jsonl")
        times_distinct(one, distinct, 4)
        out = {}
        for label, path in (("1x", one), ("4x", four), ("4x_distinct", distinct)):
            size = os.path.getsize(path)
            with open(path, "rb") as f:
                docs = sum(1 for _ in f)
            clean = best(one_core([*LLMTK, "clean", path, "--filters", "none", "--no-langid",
                                  "-q", "-o", os.path.join(tmp, "clean.jsonl")]))
            insp = best(one_core([*LLMTK, "inspect", path, "--by", "source", "-q",
                                 "--report", os.path.join(tmp, "r.html"), "-o",
                                 os.path.join(tmp, f"{label}.json")]))
            out[label] = {"documents": docs, "mb": round(size / 1e6, 2), "clean": clean,
                          "inspect": insp,
                          "clean_mb_per_cpu_s": round(size / 1e6 / clean["cpu_s"], 2),
                          "inspect_mb_per_cpu_s": round(size / 1e6 / insp["cpu_s"], 2),
                          "inspect_vs_clean": round(clean["cpu_s"] / insp["cpu_s"], 3)}
        for four_x in ("4x", "4x_distinct"):
            extra = {c: out[four_x][c]["cpu_s"] - out["1x"][c]["cpu_s"]
                     for c in ("clean", "inspect")}
            out[f"marginal_{four_x}_inspect_vs_clean"] = round(extra["clean"] / extra["inspect"],
                                                                3)
        print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
