"""The numbers docs/tutorial.md quotes, read from the outputs of `make demo` (demo-out/).

Each number in the tutorial sits between markers that name where it comes from,
`<!--n clean.out-->661<!--/n-->` (invisible when the page is rendered). This script
computes every named value from the demo's outputs and either checks the page against
them (the default; `make demo` runs it, so CI fails when the text drifts from the run)
or rewrites the page (`--write`) after a change that moves them:

    python tools/tutorial_numbers.py demo-out            # check: exit 1 on a difference
    python tools/tutorial_numbers.py demo-out --write    # put the run's numbers in

Counts are exact (the data tools are deterministic). Losses come from 300 fp32 training
steps, whose last bits differ between CPUs (AMD/Intel, other kernels) and grow over the run
by an amount not measured across CPUs here: a loss more than 0.05 nats from the page is
reported, and fails the check only beyond 0.2 (what a change of code or data does: the PII
pass's 32 changed spans in the sample moved the validation loss by 0.25). The training
numbers are checked only when the run had the tutorial's 300 steps (`DEMO_STEPS` changes
them).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TUTORIAL = ROOT / "docs" / "tutorial.md"
MARKED = re.compile(r"<!--n ([\w.]+)-->(.*?)<!--/n-->", re.S)
TUTORIAL_STEPS = 300
LOSS_NOTE, LOSS_FAIL = 0.05, 0.2  # nats: say so; fail


def _read(out: Path, name: str):
    return json.loads((out / name).read_text())


def _top_reasons(dropped: dict[str, int], n: int = 5) -> str:
    top = sorted(dropped.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    return ", ".join(f"`{reason}` {count:,}" for reason, count in top)


def _loss_rows(out: Path) -> list[dict]:
    with open(out / "run" / "metrics.jsonl") as f:
        rows = [json.loads(line) for line in f]
    return [r for r in rows if "loss" in r and "event" not in r]


def values(out: Path) -> dict[str, tuple[str, Callable[[str], float] | None]]:
    """key -> (the text to print, None for exact, or a parser for a tolerant check)."""
    look = _read(out, "inspect.json")
    clean, dedup = _read(out, "clean.stats.json"), _read(out, "dedup.stats.json")
    contam, mix = _read(out, "contam.report.json"), _read(out, "mix.report.json")
    en, intl = mix["sources"]["en"], mix["sources"]["intl"]
    v: dict[str, tuple[str, Callable[[str], float] | None]] = {
        "inspect.documents": (f"{look['documents']:,}", None),
        "inspect.exact": (f"{look['exact_duplicate_fraction']:.1%}", None),
        "inspect.near": (f"{look['near_duplicate_fraction']:.1%}", None),
        "inspect.en": (f"{look['languages'].get('en', 0):.0%}", None),
        "inspect.control": (f"{look['control_chars_documents']:,}", None),
        "inspect.email": (f"{look['pii'].get('email', 0):,}", None),
        "clean.in": (f"{clean['records_in']:,}", None),
        "clean.out": (f"{clean['records_out']:,}", None),
        "clean.top": (_top_reasons(clean["dropped"]), None),
        "clean.pii.EMAIL": (f"{clean['counts'].get('pii.EMAIL', 0):,}", None),
        "clean.pii.IP": (f"{clean['counts'].get('pii.IP', 0):,}", None),
        "dedup.exact": (f"{dedup['dropped'].get('dedup.exact', 0):,}", None),
        "dedup.minhash": (f"{dedup['dropped'].get('dedup.minhash', 0):,}", None),
        "contam.dropped": (f"{contam['contaminated_docs']:,}", None),
        "contam.dirty": (f"{contam['classes']['dirty']}", None),
        "contam.clean": (f"{contam['classes']['clean']}", None),
        "mix.en.tokens": (f"{en['tokens'] / 1000:.0f} k", None),
        "mix.intl.tokens": (f"{intl['tokens'] / 1000:.0f} k", None),
        "mix.en.subset": (f"{en['epochs']:.0%}", None),
        "mix.intl.epochs": (f"{intl['epochs']:.2f}", None),
        "mix.en.share": (f"{en['achieved_share']:.1%}", None),
        "mix.intl.share": (f"{intl['achieved_share']:.1%}", None),
    }
    config = _read(out / "run", "config.json")
    if config["train"]["steps"] == TUTORIAL_STEPS:
        rows = _loss_rows(out)
        val = [r["val_loss"] for r in rows if "val_loss" in r]
        v["train.params"] = (f"{config['params'] / 1e6:.2f} M", None)
        v["train.first_loss"] = (f"{rows[0]['loss']:.2f}", float)
        v["train.last_loss"] = (f"{rows[-1]['loss']:.2f}", float)
        v["train.val_loss"] = (f"{val[-1]:.2f}", float)
    return v


def differences(page: str, v: dict, notes: list[str] | None = None) -> list[str]:
    """What fails the check; losses that moved less than LOSS_FAIL but more than
    LOSS_NOTE go to `notes`."""
    found = MARKED.findall(page)
    problems = [f"{key}: no such value" for key, _ in found
                if key.split(".")[0] != "train" and key not in v]
    for key, text in found:
        if key not in v:
            continue
        want, parse = v[key]
        if parse is None and text != want:
            problems.append(f"{key}: the tutorial says {text!r}, the run {want!r}")
        elif parse is not None and abs(parse(text) - parse(want)) > LOSS_NOTE:
            apart = LOSS_FAIL if abs(parse(text) - parse(want)) > LOSS_FAIL else LOSS_NOTE
            line = f"{key}: the tutorial says {text}, the run {want} (more than {apart} apart)"
            (problems if apart == LOSS_FAIL else notes if notes is not None else []).append(
                line)
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="the demo's output folder (demo-out)")
    ap.add_argument("--write", action="store_true", help="rewrite docs/tutorial.md")
    args = ap.parse_args(argv)
    page, v = TUTORIAL.read_text(), values(args.out)
    if args.write:
        TUTORIAL.write_text(MARKED.sub(
            lambda m: f"<!--n {m.group(1)}-->{v[m.group(1)][0] if m.group(1) in v else m.group(2)}"
                      f"<!--/n-->", page))
        return 0
    notes: list[str] = []
    problems = differences(page, v, notes)
    for p in notes:
        print(f"docs/tutorial.md: note: {p}", file=sys.stderr)
    for p in problems:
        print(f"docs/tutorial.md: {p}", file=sys.stderr)
    if problems:
        print("tutorial_numbers: run `python tools/tutorial_numbers.py demo-out --write` "
              "after `make demo` and review the text around them", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
