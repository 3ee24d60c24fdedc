"""`llmtk eval` against lm-evaluation-harness 0.4.13 on the same model, items and prompts.

Builds multiple-choice items (ARC layout) from real text (sentences of the Python
standard library's docstrings: the first half is the question, the true second half and
three others the choices), trains a tiny model on those docstrings, exports it as a
Hugging Face folder with a chat template, and scores it both ways in five settings:

  0-shot plain, 0-shot through the chat template, K-shot plain with the examples from a
  separate split (`--fewshot-from`), K-shot through the template with the examples from
  the task's own rows, and the same as multiturn (`--fewshot-as-multiturn`).

For each it prints the largest per-item log-likelihood difference, whether acc and
acc_norm agree item by item, and both tools' wall time. lm-eval runs from its own venv
(it pulls another torch build otherwise):

  python3 -m venv benchmarks/.venvs/lmeval
  benchmarks/.venvs/lmeval/bin/pip install torch==2.13.0      # the same CPU build first
  benchmarks/.venvs/lmeval/bin/pip install lm-eval==0.4.13 accelerate torch==2.13.0
  .venv/bin/python benchmarks/eval_vs_lmeval.py

The task YAML it writes is docs/eval.md's recipe (tests/test_eval_formats.py checks that
the two agree), run offline (HF_DATASETS_OFFLINE, HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LMEVAL_PYTHON = ROOT / "benchmarks" / ".venvs" / "lmeval" / "bin" / "python"
OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

# docs/eval.md shows this YAML (with TASK, PROMPT and the paths filled in).
TASK_YAML = """\
task: {task}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {test}
    train: {train}
test_split: test
fewshot_split: {fewshot_split}
output_type: multiple_choice
doc_to_text: "{prompt}"
doc_to_target: "{{{{choices.label.index(answerKey)}}}}"
doc_to_choice: "{{{{choices.text}}}}"
metric_list:
  - metric: acc
  - metric: acc_norm
"""
PLAIN_PROMPT = "Question: {{question}}\\nAnswer:"  # lm-eval's ARC prompt
CHAT_PROMPT = "{{question}}"  # what llmtk puts in the user turn

# ChatML, as many instruction-tuned models ship it.
CHAT_TEMPLATE = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content']"
                 " + '<|im_end|>\\n' }}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def sentences() -> list[str]:
    import collections
    import email
    import http.client
    import json as json_mod
    import logging
    import pathlib
    import subprocess as sp
    import tarfile
    import zipfile

    out = []
    for mod in (json_mod, collections, logging, pathlib, sp, tarfile, zipfile, email,
                http.client, argparse, re, random, shutil, glob):
        for name in dir(mod):
            doc = getattr(getattr(mod, name), "__doc__", None)
            if not isinstance(doc, str):
                continue
            for s in re.split(r"(?<=\.)\s+", " ".join(doc.split())):
                words = s.split()
                if 8 <= len(words) <= 24 and s.isascii():
                    out.append(" ".join(words))
    return sorted(set(out))


def items(texts: list[str], n: int, rnd: random.Random) -> list[dict]:
    halves = [(" ".join(w[:len(w) // 2]), " ".join(w[len(w) // 2:]))
              for w in (t.split() for t in texts)]
    out = []
    for i, (q, a) in enumerate(halves[:n]):
        wrong = rnd.sample([b for _, b in halves if b != a], 3)
        choices = [a, *wrong]
        rnd.shuffle(choices)
        out.append({"id": f"i{i}", "question": q, "answerKey": "ABCD"[choices.index(a)],
                    "choices": {"text": choices, "label": list("ABCD")}})
    return out


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def llmtk(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "llmtk", *args], check=True, cwd=ROOT,
                   env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")})


def build(work: Path, n_items: int) -> tuple[Path, str, str]:
    """The exported model folder, the test file and the few-shot split file."""
    texts = sentences()
    rnd = random.Random(0)
    rnd.shuffle(texts)
    docs = write_jsonl(work / "docs.jsonl", [{"text": t} for t in texts] * 4)
    test = write_jsonl(work / "test.jsonl", items(texts, n_items, rnd))
    train = write_jsonl(work / "train.jsonl", items(texts[n_items:], 40, rnd))
    run, hf = work / "run", work / "hf"
    llmtk("train", "--data", docs, "--out", str(run), "--layers", "2", "--d-model", "64",
          "--heads", "4", "--seq-len", "256", "--steps", "60", "--batch-size", "8",
          "--warmup", "5", "-q")
    llmtk("train", "export", str(run), "--hf", str(hf))
    conf = json.loads((hf / "tokenizer_config.json").read_text())
    conf["chat_template"] = CHAT_TEMPLATE
    (hf / "tokenizer_config.json").write_text(json.dumps(conf, indent=2))
    return hf, test, train


SETTINGS = [  # name, chat, shots, few-shot split, multiturn
    ("0-shot", False, 0, "train", False),
    ("0-shot chat template", True, 0, "train", False),
    ("K-shot from --fewshot-from", False, None, "train", False),
    ("K-shot chat template, own rows", True, None, "test", False),
    ("K-shot chat template, multiturn", True, None, "test", True),
]


def run_lmeval(python: Path, hf: Path, work: Path, task: str, shots: int, chat: bool,
               multiturn: bool) -> tuple[list[dict], float]:
    out = work / f"lmeval-{task}-{shots}-{chat}-{multiturn}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [str(python), "-m", "lm_eval", "run", "--model", "hf", "--model_args",
           f"pretrained={hf},dtype=float32", "--tasks", task, "--include_path",
           str(work / "yaml"), "--num_fewshot", str(shots), "--device", "cpu",
           "--batch_size", "16", "--log_samples", "--output_path", str(out)]
    if chat:
        cmd.append("--apply_chat_template")
    if multiturn:
        cmd.append("--fewshot_as_multiturn")
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env={**os.environ, **OFFLINE}, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    (samples,) = glob.glob(str(out / "**" / f"samples_{task}_*.jsonl"), recursive=True)
    rows = [json.loads(line) for line in open(samples)]
    return sorted(rows, key=lambda r: r["doc_id"]), wall


def run_llmtk(hf: Path, test: str, train: str, shots: int, chat: bool, multiturn: bool,
              own: bool) -> tuple[list[list[float]], dict, float]:
    """Per-item log-likelihoods from the library and the metrics from the command."""
    from llmtk.evaluate import load_task
    from llmtk.evaluate.prompts import Format, contexts
    from llmtk.evaluate.scoring import ModelScorer
    from llmtk.train import load_model

    m = load_model(f"hf:{hf}")
    task = load_task(test)
    fmt = Format(shots, None if own else load_task(train), chat=chat, multiturn=multiturn)
    scorer = ModelScorer(m.model, m.tokenizer, prompt_ids=m.chat.prompt)
    reqs = [(ctx, fmt.delimiter + c) for it, ctx in zip(task.items, contexts(task, fmt),
                                                        strict=True) for c in it.choices]
    lls, k = [], 0
    flat = [ll for ll, _ in scorer.loglikelihood(reqs)]
    for it in task.items:
        lls.append(flat[k:k + len(it.choices)])
        k += len(it.choices)
    cmd = [sys.executable, "-m", "llmtk", "eval", f"hf:{hf}", "-t", test, "--json", "-q",
           "--num-fewshot", str(shots), "--out", str(Path(test).parent / "llmtk-out"),
           "--chat-template" if chat else "--no-chat-template"]
    if not own:
        cmd += ["--fewshot-from", train]
    if multiturn:
        cmd.append("--fewshot-as-multiturn")
    start = time.perf_counter()
    p = subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
    wall = time.perf_counter() - start
    (result,) = json.loads(p.stdout)["tasks"].values()
    return lls, result["metrics"], wall


def their_lls(sample: dict) -> list[float]:
    """The per-choice log-likelihoods of one lm-eval sample (`filtered_resps`)."""
    return [float(x[0]) for x in sample["filtered_resps"]]


def agree(lls: list[float], sample: dict) -> bool:
    """Whether llmtk's acc and acc_norm on one item are lm-eval's."""
    def argmax(v):
        return max(range(len(v)), key=lambda i: (v[i], -i))

    choices = sample["doc"]["choices"]["text"]
    pred = argmax(lls)
    pred_norm = argmax([ll / len(c) for ll, c in zip(lls, choices, strict=True)])
    gold = int(sample["target"])
    return ((pred == gold) == bool(sample["acc"])
            and (pred_norm == gold) == bool(sample["acc_norm"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lm-eval-python", type=Path, default=LMEVAL_PYTHON)
    ap.add_argument("--items", type=int, default=100)
    ap.add_argument("--shots", type=int, default=3)
    ap.add_argument("--work", type=Path, default=ROOT / "benchmarks" / "out" / "eval_vs_lmeval")
    args = ap.parse_args()
    if not args.lm_eval_python.exists():
        sys.exit(f"no lm-eval at {args.lm_eval_python} (see this script's docstring)")
    shutil.rmtree(args.work, ignore_errors=True)
    (args.work / "yaml").mkdir(parents=True)
    hf, test, train = build(args.work, args.items)
    for chat in (False, True):
        for split in ("train", "test"):
            task = f"llmtk_{'chat' if chat else 'plain'}_{split}"
            (args.work / "yaml" / f"{task}.yaml").write_text(TASK_YAML.format(
                task=task, test=test, train=train, fewshot_split=split,
                prompt=CHAT_PROMPT if chat else PLAIN_PROMPT))
    print(f"{args.items} ARC-layout items from standard-library docstrings; "
          f"K = {args.shots}; lm-eval 0.4.13 vs llmtk eval on the same HF folder")
    print(f"{'setting':34} {'max |dll|':>10} {'acc':>13} {'acc_norm':>13} "
          f"{'items same':>10} {'lm-eval s':>9} {'llmtk s':>8}")
    worst = 0.0
    for name, chat, shots, split, multiturn in SETTINGS:
        shots = args.shots if shots is None else shots
        task = f"llmtk_{'chat' if chat else 'plain'}_{split}"
        theirs, t_wall = run_lmeval(args.lm_eval_python, hf, args.work, task, shots, chat,
                                    multiturn)
        mine, metrics, m_wall = run_llmtk(hf, test, train, shots, chat, multiturn,
                                          own=split == "test")
        diff = max(abs(a - b) for row, r in zip(mine, theirs, strict=True)
                   for a, b in zip(row, their_lls(r), strict=True))
        worst = max(worst, diff)
        acc_t = sum(r["acc"] for r in theirs) / len(theirs)
        norm_t = sum(r["acc_norm"] for r in theirs) / len(theirs)
        same = all(agree(row, r) for row, r in zip(mine, theirs, strict=True))
        print(f"{name:34} {diff:10.2e} {metrics['acc']:.3f}/{acc_t:.3f} "
              f"{metrics['acc_norm']:.3f}/{norm_t:.3f} {str(same):>10} {t_wall:9.1f} "
              f"{m_wall:8.1f}")
    print(f"largest per-item log-likelihood difference: {worst:.2e} (limit 1e-4)")


if __name__ == "__main__":
    main()
