"""Does the mixture `llmtk mix search` proposes transfer to a larger model?

    PYTHONPATH=. nice python benchmarks/mix_transfer.py CORPUS WORK [--trials 16] [--jobs 2]
        [--steps 200] [--big-steps 400] [--width 64] [--seeds 2] [--stage search|all]

Measured (docs/mix.md, "Transfer, on sources that differ"), with --trials 24 --steps 300
--big-steps 600 --seeds 2 --jobs 2: the 8x model on the proposal beat it on the natural
mixture by 0.073 (search half) and 0.070 (report half), seed spreads <= 0.006. A rerun in
the same WORK skips finished trials and runs (each run folder's DONE).

CORPUS is a JSON Lines file (plain or .zst) with `id`, `text`, `lang` and `source`
(corpus-public.jsonl.zst: the CPython documentation cut into sections, and the Debian
`fortune` files in five languages). Four sources that really differ, as bytes: `docs`
(the Python documentation, reStructuredText, English), `de`, `ru` and `zh` (the German,
Russian and Chinese fortunes). Natural token shares about 0.54 / 0.18 / 0.15 / 0.13.

The target is far from natural: the mean loss on Python documentation and Russian
fortunes (`docs` and `ru`), so about a quarter of the natural mixture (de, zh) is of
little use to it. Validation documents are whole files held out of training (a file's
sections or cookies all go to one side, by a hash of the file's name): one set of files
for the search (SEARCH half), another for the report (REPORT half), never trained on.

1. `llmtk mix search` with a proxy of 2 layers x --width over --trials mixtures.
2. At proxy scale, the proposal, the natural mixture and equal weights, --seeds seeds
   each (the noise of one mixture's loss over seeds).
3. Transfer: a model of 4 layers x 2 --width (8x the proxy's non-embedding parameters),
   trained --big-steps on the proposal, the natural mixture and equal weights, --seeds
   seeds each; mean and spread (max - min) over the seeds, on both halves.

Every training is a real `llmtk train` process. Prints tables; nothing is asserted.
"""

import argparse
import hashlib
import io
import json
import os
import random
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import zstandard
from mix_search import read_search, run_search

SOURCES = {"docs": ("python-docs", "en"), "de": ("fortunes", "de"),
           "ru": ("fortunes", "ru"), "zh": ("fortunes", "zh")}
TARGET = ("docs", "ru")  # the validation sets: what the model must be good at

PROXY = """\
layers = {layers}
d_model = {d_model}
heads = {heads}
seq_len = 128
batch_size = 16
steps = {steps}
warmup = {warmup}
lr = 3e-3
log_every = 50
eval_batches = 16
seed = 0
threads = 1
"""


def read_corpus(path):
    with open(path, "rb") as raw:
        head = raw.read(4)
        raw.seek(0)
        if head == b"\x28\xb5\x2f\xfd":
            stream = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(raw),
                                      encoding="utf-8")
        else:
            stream = io.TextIOWrapper(raw, encoding="utf-8")
        for line in stream:
            yield json.loads(line)


def side(doc_id):
    """train, search or report: by a hash of the document's file (its id less the number),
    so that a file's parts never sit on two sides."""
    group = re.sub(r"[-.]?\d+$", "", doc_id)
    h = int(hashlib.sha1(group.encode()).hexdigest(), 16) % 10
    return {0: "search", 1: "report"}.get(h, "train")


def llmtk(*args):
    return subprocess.run([sys.executable, "-m", "llmtk", *args], check=True,
                          stdout=subprocess.PIPE).stdout


def split(corpus, work):
    """WORK/tok/{NAME, NAME-search, NAME-report}: token datasets (byte tokenizer)."""
    parts = {}
    for doc in read_corpus(corpus):
        for name, (source, lang) in SOURCES.items():
            if doc.get("source") == source and doc.get("lang") == lang:
                where = side(doc["id"]) if name in TARGET else "train"
                parts.setdefault((name, where), []).append(doc["text"])
    out = {}
    for (name, where), texts in sorted(parts.items()):
        key = name if where == "train" else f"{name}-{where}"
        if where != "train":  # validation reads the first windows: mix the files
            random.Random(0).shuffle(texts)
        path = os.path.join(work, "tok", key)
        if not os.path.exists(path):
            jsonl = os.path.join(work, f"{key}.jsonl")
            with open(jsonl, "w") as f:
                f.writelines(json.dumps({"text": t}) + "\n" for t in texts)
            llmtk("train", "tokenize", jsonl, "-o", path, "-q")
            os.remove(jsonl)
        out[key] = path
    return out


def train(work, config, name, data, val, *extra):
    """One `llmtk train` run (skipped when its folder holds a finished one); its last
    validation loss per set."""
    out = os.path.join(work, "runs", name)
    done = os.path.join(out, "metrics.jsonl")
    if not os.path.exists(os.path.join(out, "DONE")):
        args = ["train", "--config", config, "--out", out, "-q", *extra]
        for n, p, w in data:
            args += ["--data", f"{n}={p}:{w}"]
        for n, p in val.items():
            args += ["--val-data", f"{n}={p}"]
        llmtk(*args)
        open(os.path.join(out, "DONE"), "w").close()
    rows = [json.loads(line) for line in open(done)]
    last = [r for r in rows if "val_loss" in r][-1]
    return {n: last[f"val/{n}/loss"] for n in val}


def summary(runs):
    """{half: (mean, spread)} over seeds of the mean loss of each half's sets."""
    out = {}
    for half in ("search", "report"):
        means = [sum(v for k, v in r.items() if k.endswith(half)) / len(TARGET) for r in runs]
        out[half] = (sum(means) / len(means), max(means) - min(means), means)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("work")
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=200, help="the proxy's steps")
    ap.add_argument("--big-steps", type=int, default=400, help="the 8x model's steps")
    ap.add_argument("--width", type=int, default=64, help="the proxy's d_model (2 layers)")
    ap.add_argument("--seeds", type=int, default=2, help="seeds per arm")
    ap.add_argument("--stage", choices=("search", "all"), default="all")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    config = os.path.join(a.work, "proxy.toml")
    with open(config, "w") as f:
        f.write(PROXY.format(steps=a.steps, warmup=a.steps // 10, layers=2, d_model=a.width,
                             heads=a.width // 16))
    tok = split(a.corpus, a.work)
    src = {n: tok[n] for n in SOURCES}
    search_val = {f"{n}-search": tok[f"{n}-search"] for n in TARGET}
    report_val = {f"{n}-report": tok[f"{n}-report"] for n in TARGET}
    out = os.path.join(a.work, "search")
    run_search(src, search_val, a.trials, a.jobs, config, out)
    if a.stage == "search":
        return
    prop, natural, equal, best, trials = read_search(out, src)
    arms = {"proposal": prop, "natural": natural, "equal": equal,
            "best trial": [(n, src[n], best["weights"][n]) for n in src]}
    both = {**search_val, **report_val}
    big = ["--layers", "4", "--d-model", str(2 * a.width), "--heads", str(a.width // 8),
           "--steps", str(a.big_steps), "--warmup", str(a.big_steps // 10)]
    jobs = [(scale, arm, s, extra) for scale, extra in (("proxy", []), ("8x", big))
            for arm in arms for s in range(a.seeds)]
    with ThreadPoolExecutor(a.jobs) as pool:  # each run is its own process
        losses = list(pool.map(lambda j: train(
            a.work, config, f"{j[0]}-{j[1].replace(' ', '-')}-s{j[2]}", arms[j[1]], both,
            "--seed", str(j[2]), *j[3]), jobs))
    results = {}
    for (scale, arm, _, _), loss in zip(jobs, losses, strict=True):
        results.setdefault((scale, arm), (arms[arm], []))[1].append(loss)
    results = {k: (data, summary(runs)) for k, (data, runs) in results.items()}
    print(f"fit and proposal: {proposal_comment(out)}")
    print(f"{'':<6} {'':<10} {'':<30} mean ± half the spread over {a.seeds} seeds (each "
          "seed's value after the columns); loss: the mean of the half's two sets")
    print(f"{'scale':<6} {'arm':<10} {'weights (' + ' '.join(SOURCES) + ')':<30} "
          f"{'search half':>22} {'report half':>22}")
    for (scale, arm), (data, s) in results.items():
        total = sum(w for _, _, w in data)
        ws = " ".join(f"{w / total:.2f}" for _, _, w in data)
        cells = [f"{m:.4f} ± {d / 2:.4f}" for m, d, _ in (s["search"], s["report"])]
        print(f"{scale:<6} {arm:<10} {ws:<30} {cells[0]:>22} {cells[1]:>22}   "
              + "  ".join(" ".join(f"{x:.4f}" for x in s[h][2]) for h in ("search", "report")))


def proposal_comment(out):
    with open(os.path.join(out, "proposal.toml")) as f:
        return " | ".join(line[2:].strip() for line in f if line.startswith("# fit")
                          or line.startswith("# predicted"))


if __name__ == "__main__":
    main()
