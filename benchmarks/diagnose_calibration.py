"""Calibration of `llmtk diagnose`: false alarms on real healthy logs, detection on known problems.

    .venv/bin/python benchmarks/diagnose_calibration.py [HEALTHY_LOG ...] [--failing LOG ...]

Reports, per log, the findings at warning/error level, then the false-alarm rate (healthy
logs with any warning or error) and the detection rate (problem cases whose problem is
found at warning or error level). Goal: 0% false alarms, 100% detection.

Real logs (all in tests/data/curves/, MIT licence, from KellerJordan/modded-nanogpt's
`records/`; each file is the original's lines, the excerpts a contiguous range of them):

- modded-nanogpt-gpt2medium-val.log:  records/011825_GPT2Medium/main.log (whole file:
  llm.c format, validation loss every 250 steps of a 60k-step GPT-2 medium run)
- modded-nanogpt-llmc-steps0-410.log: records/2024-10-13_llmc/main.log, steps 0-410 (train
  loss, lr, grad norm per step, warmup included)
- modded-nanogpt-adamw-steps3032-3824.log: records/2024-06-06_AdamW/f66d43d7-....log,
  steps 3032-3824 (per-step train loss with one-batch jumps of +6-8% that recover at once)

More public logs can be given on the command line (any format llmtk reads), e.g. the full
files above, fetched by hand:

    curl -LO https://raw.githubusercontent.com/KellerJordan/modded-nanogpt/master/records/2024-10-13_llmc/main.log

More failing logs can be passed after `--failing` (each must raise at least one warning or
error), e.g. lines pasted in an issue saved to a file by hand:

- bigscience-workshop/Megatron-DeepSpeed issue #396: the `iteration N/ 250000 | ... |
  grad norm: nan | ...` lines of the description (no loss logged, grad norm NaN);
- aigoncharov/trainer_state_viz `trainer_state.json` (HF Trainer, 30 epochs, six eval sets
  eval_g0..g5: the training loss falls 1.11 -> 0.06 while eval_g0_loss rises from 1.11:
  overfitting).

The calibration set of other trainers' logs (tests/data/curves/calibration/: Lightning
CSVLogger, HF trainer_state.json and console output, minGPT, nanoGPT, torchtitan, torchtune,
Keras, fairseq, build-nanogpt and custom text logs, healthy and sick; each file's source,
licence, excerpt and the reading behind its label in labels.jsonl) is always run: a
healthy one must raise nothing above info, a sick one every kind it is labelled with. Each
label names its half ("fit": the rules were written on it; "held-out": gathered after they
were fixed, split by source), and the last lines give, per half, how many logs were read and
how many judged right (docs/diagnose.md has the numbers).

Synthetic cases come from tests/curve_cases.py (also used by tests/test_diagnose.py); the
healthy noisy case is run with 20 seeds.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmtk.curves.detect import diagnose  # noqa: E402
from llmtk.curves.logs import Run, load_run  # noqa: E402
from llmtk.errors import DataError, UsageError  # noqa: E402
from tests import curve_cases as cc  # noqa: E402

SEEDS = 20


def alarms(run: Run) -> list[str]:
    return [f"{f.severity} {f.kind}" for f in diagnose(run) if f.severity != "info"]


def synthetic(name: str, rows: list[dict]) -> Run:
    return Run(name, "synthetic", [r for r in rows if "event" not in r],
               [r for r in rows if "event" in r])


def main(args: list[str]) -> None:
    if {"-h", "--help"} & set(args):
        print(__doc__)
        return
    t0 = time.perf_counter()
    split = args.index("--failing") if "--failing" in args else len(args)
    extra, failing = args[:split], args[split + 1:]
    healthy: list[tuple[str, list[str]]] = []
    problems: list[tuple[str, str, list[str]]] = []
    for path in sorted((ROOT / "tests" / "data" / "curves").glob("*.log")) + [Path(p) for p in
                                                                              extra]:
        healthy.append((f"real: {path.name}", alarms(load_run(str(path)))))
    for path in map(Path, failing):
        problems.append((f"real: {path.name}", "any", alarms(load_run(str(path)))))
    calibration = ROOT / "tests" / "data" / "curves" / "calibration"
    halves: dict[str, list[tuple[bool, bool]]] = {}  # half -> (read, judged right) per log
    for line in (calibration / "labels.jsonl").read_text().splitlines():
        label = json.loads(line)
        try:
            found = alarms(load_run(str(calibration / label["file"])))
        except (DataError, UsageError) as e:
            found = [f"unread ({e})"]
        read = not (found and found[0].startswith("unread"))
        expect = label["expect"]
        right = read and (not found if expect is None else
                          all(any(f.endswith(" " + k) for f in found) for k in expect))
        halves.setdefault(label["half"], []).append((read, right))
        tag = f"real ({label['half']}): {label['file']}"
        if expect is None:
            healthy.append((tag, [] if read and not found else found or ["?"]))
        else:
            problems.append((tag, ",".join(expect), found))
    for name, (make, kind) in cc.CASES.items():
        if kind is None:
            seeds = range(SEEDS) if make is cc.healthy_noisy_with_blips else [None]
            for seed in seeds:
                rows = make() if seed is None else make(seed)
                label = f"synthetic: {name}" + (f" (seed {seed})" if seed is not None else "")
                healthy.append((label, alarms(synthetic(name, rows))))
        else:
            problems.append((f"synthetic: {name}", kind, alarms(synthetic(name, make()))))

    print(f"{'log':58} {'expected':16} found (warning/error)")
    for label, found in healthy:
        print(f"{label:58} {'nothing':16} {', '.join(found) or '-'}")
    for label, kind, found in problems:
        print(f"{label:58} {kind:16} {', '.join(found) or '-'}")
    false_alarms = sum(1 for _, found in healthy if found)
    real = [found for label, found in healthy if label.startswith("real")]
    detected = sum(1 for _, kinds, found in problems
                   if kinds == "any" and found
                   or kinds != "any" and all(any(f.endswith(" " + k) for f in found)
                                             for k in kinds.split(",")))
    print()
    print(f"false alarms: {false_alarms}/{len(healthy)} healthy logs "
          f"({sum(1 for f in real if f)}/{len(real)} real)")
    n_real = sum(1 for label, _, _ in problems if label.startswith("real"))
    print(f"detection:    {detected}/{len(problems)} problems found "
          f"({n_real} real, {len(problems) - n_real} synthetic)")
    for half, results in sorted(halves.items()):
        print(f"other trainers' logs, {half} half: {sum(r for r, _ in results)}/{len(results)} "
              f"read, {sum(j for _, j in results)}/{len(results)} judged right")
    print(f"({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main(sys.argv[1:])
