"""`llmtk mix search` on three real sources, judged on validation sets it never saw.

    PYTHONPATH=. python benchmarks/mix_search.py WORK [--trials 12] [--jobs 2] \
        [--steps 30] [--big-steps 60] [--width 32]

Sources (the Python standard library's own text): `prose` (docstrings), `code` (module
source), `names` (Unicode character names). The search minimises the mean loss on two
validation sets, `code` (the source of other modules) and `names` (other code points).
Then, on the REPORT half (yet other modules and code points, never used by the search),
the proposal is compared with the natural token shares and equal weights:

- at proxy scale (the proxy's config, same seed and steps);
- transfer: a model 8x the proxy's non-embedding parameters (4 layers of twice the
  width, against 2 layers of --width), trained --big-steps, on the proposal and on the
  natural mixture.

Every training is a real `llmtk train` process. Prints one table; nothing is asserted.
These sources differ too little for such small proxies to show transfer (docs/mix.md);
benchmarks/mix_transfer.py measures it on sources that differ (languages, domains).
"""

import argparse
import importlib
import inspect
import json
import os
import subprocess
import sys
import tomllib
import unicodedata

PROXY = """\
layers = {layers}
d_model = {d_model}
heads = {heads}
seq_len = 64
batch_size = 8
steps = {steps}
warmup = 3
lr = 3e-3
log_every = 10
eval_batches = 8
seed = 0
threads = 1
"""


def docstrings(modules):
    for m in modules:
        mod = importlib.import_module(m)
        for _, obj in inspect.getmembers(mod):
            doc = inspect.getdoc(obj)
            if doc and len(doc) > 40 and getattr(obj, "__module__", m) == m:
                yield doc


def code(modules):
    for m in modules:
        for block in inspect.getsource(importlib.import_module(m)).split("\n\n\n"):
            if len(block) > 80:
                yield block


def names(lo, hi):
    lines = [f"U+{c:04X} {unicodedata.name(chr(c))}" for c in range(lo, hi)
             if unicodedata.name(chr(c), "")]
    for i in range(0, len(lines), 20):
        yield "\n".join(lines[i:i + 20])


def llmtk(*args):
    return subprocess.run([sys.executable, "-m", "llmtk", *args], check=True,
                          stdout=subprocess.PIPE).stdout


def dataset(work, name, texts):
    path = os.path.join(work, f"{name}.jsonl")
    out = os.path.join(work, "tok", name)
    if not os.path.exists(out):
        with open(path, "w") as f:
            f.writelines(json.dumps({"text": t}) + "\n" for t in texts)
        llmtk("train", "tokenize", path, "-o", out, "-q")
    return out


def train(work, name, data, val, *extra):
    out = os.path.join(work, "runs", name)
    args = ["train", "--config", os.path.join(work, "proxy.toml"), "--out", out, "-q", *extra]
    for n, p, w in data:
        args += ["--data", f"{n}={p}:{w}"]
    for n, p in val.items():
        args += ["--val-data", f"{n}={p}"]
    llmtk(*args)
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    last = [r for r in rows if "val_loss" in r][-1]
    return {n: last[f"val/{n}/loss"] for n in val}



def run_search(src: dict, search_val: dict, trials: int, jobs: int, config: str,
               out: str) -> None:
    """`llmtk mix search` over the sources, scored on the search half of validation."""
    subprocess.run([sys.executable, "-m", "llmtk", "mix", "search",
                    *(f"{n}={p}" for n, p in src.items()),
                    *(x for n, p in search_val.items() for x in ("--val", f"{n}={p}")),
                    "--trials", str(trials), "--jobs", str(jobs), "--config", config,
                    "--out", out], check=True)


def read_search(out: str, src: dict):
    """The mixtures to compare, as (name, dir, weight) lists: the proposal, the natural
    shares (trial 0), equal weights; plus the best trial's row and every trial's row."""
    with open(os.path.join(out, "proposal.toml"), "rb") as f:
        proposal = tomllib.load(f)
    prop = [(e.split("=", 1)[0], e.split("=", 1)[1].rsplit(":", 1)[0],
             float(e.rsplit(":", 1)[1])) for e in proposal["data"]]
    with open(os.path.join(out, "trials.jsonl")) as f:
        trials = [json.loads(line) for line in f]
    natural = [(n, src[n], trials[0]["weights"][n]) for n in src]
    equal = [(n, src[n], 1.0) for n in src]
    best = min(trials, key=lambda r: r["objective"])
    return prop, natural, equal, best, trials

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30, help="the proxy's steps")
    ap.add_argument("--big-steps", type=int, default=60, help="the 8x model's steps")
    ap.add_argument("--width", type=int, default=32, help="the proxy's d_model (2 layers); "
                    "the transfer model has 4 layers of twice the width")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    with open(os.path.join(a.work, "proxy.toml"), "w") as f:
        f.write(PROXY.format(steps=a.steps, layers=2, d_model=a.width, heads=a.width // 16))
    big = ["--layers", "4", "--d-model", str(2 * a.width), "--heads", str(a.width // 8),
           "--warmup", "6", "--steps", str(a.big_steps)]
    src = {"prose": dataset(a.work, "prose", docstrings(["json", "csv", "argparse", "logging",
                                                         "collections", "functools"])),
           "code": dataset(a.work, "code", code(["json.decoder", "csv", "argparse", "textwrap",
                                                 "shlex", "fractions"])),
           "names": dataset(a.work, "names", names(0x100, 0x2000))}
    search_val = {"code": dataset(a.work, "code-val", code(["heapq", "bisect", "glob"])),
                  "names": dataset(a.work, "names-val", names(0x2100, 0x2C00))}
    report_val = {"rcode": dataset(a.work, "code-report", code(["string", "fnmatch",
                                                                "calendar"])),
                  "rnames": dataset(a.work, "names-report", names(0x2C00, 0x3100))}
    out = os.path.join(a.work, "search")
    run_search(src, search_val, a.trials, a.jobs, os.path.join(a.work, "proxy.toml"), out)
    prop, natural, equal, best, trials = read_search(out, src)
    both = {**search_val, **report_val}  # every run is scored on both halves
    results = {
        "proposal": (prop, train(a.work, "proposal", prop, both)),
        "natural": (natural, train(a.work, "natural", natural, both)),
        "equal": (equal, train(a.work, "equal", equal, both)),
        "best trial": ([(n, src[n], w) for n, w in best["weights"].items()],
                       train(a.work, "best", [(n, src[n], w) for n, w in best["weights"].items()],
                             both)),
        "proposal 8x": (prop, train(a.work, "proposal-big", prop, both, *big)),
        "natural 8x": (natural, train(a.work, "natural-big", natural, both, *big)),
    }
    print(f"predicted objective at the proposal: {proposal_predicted(out):.4f}")
    print(f"{'run':<12} {'weights (prose code names)':<28} {'search code':>11} "
          f"{'names':>7} {'mean':>7} {'report code':>11} {'names':>7} {'mean':>7}")
    for name, (data, v) in results.items():
        total = sum(w for _, _, w in data)
        ws = " ".join(f"{w / total:.3f}" for _, _, w in data)
        print(f"{name:<12} {ws:<28} {v['code']:>11.4f} {v['names']:>7.4f} "
              f"{(v['code'] + v['names']) / 2:>7.4f} {v['rcode']:>11.4f} {v['rnames']:>7.4f} "
              f"{(v['rcode'] + v['rnames']) / 2:>7.4f}")


def proposal_predicted(out):
    with open(os.path.join(out, "proposal.toml")) as f:
        line = next(x for x in f if x.startswith("# predicted objective"))
    return float(line.split()[3].rstrip(";"))


if __name__ == "__main__":
    main()
