"""`llmtk diagnose`'s collapsed_routing finding: a mixture-of-experts run whose router
sends most tokens to a few experts, or none to some, after warm-up; read from the
`expert_load/N` rows llmtk train writes (each expert's share since the last row)."""

import json
import random

from llmtk.curves.detect import diagnose
from llmtk.curves.logs import load_run
from tests.util import llmtk

E = 8


def shares(rng, weights):
    """A row's shares: the weights with +-10% noise, normalised to 1 (as logged: 5 digits)."""
    raw = [w * (1 + rng.uniform(-0.1, 0.1)) for w in weights]
    return [round(r / sum(raw), 5) for r in raw]


def write_run(path, layer1, steps=300, every=10, warm_layer1=None):
    """metrics.jsonl of a 2-layer MoE run: layer 0 balanced throughout; layer 1 with the
    expert weights `layer1` (relative), `warm_layer1` instead during the first third."""
    rng = random.Random(0)
    rows = []
    for step in range(every, steps + 1, every):
        w1 = warm_layer1 if warm_layer1 and step <= steps // 3 else layer1
        load = {"expert_load/0": shares(rng, [1] * E), "expert_load/1": shares(rng, w1)}
        rows.append({"step": step, "loss": 5 - step / 100, "lr": 3e-3, "grad_norm": 1.0,
                     **load, "expert_imbalance/0": 1.0,
                     "expert_imbalance/1": max(load["expert_load/1"]) * E})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def routing(path):
    return [f for f in diagnose(load_run(str(path))) if f.kind == "collapsed_routing"]


def test_balanced_routing_is_quiet(tmp_path):
    # within the balanced runs' spread (busiest ~1.6x, idlest ~0.5x uniform)
    assert routing(write_run(tmp_path / "a" / "metrics.jsonl",
                             [1.5, 1.2, 1, 1, 1, 1, 0.8, 0.55])) == []


def test_a_few_experts_taking_most_tokens_is_found_with_the_fixes(tmp_path):
    path = write_run(tmp_path / "a" / "metrics.jsonl", [6, 5, 1, 1, 1, 1, 1, 1])
    [f] = routing(path)
    assert f.severity == "warning" and f.step > 100  # after warm-up
    assert "layer 1: the busiest expert takes" in f.summary and "layer 0" not in f.summary
    assert any("--router-bias-rate" in x for x in f.fixes)
    assert any("--router-aux-loss" in x for x in f.fixes)
    assert any("learning rate" in x for x in f.fixes)
    assert any(d.startswith("layer 0: busiest expert") for d in f.details)  # both layers


def test_experts_that_receive_nothing_are_named(tmp_path):
    [f] = routing(write_run(tmp_path / "a" / "metrics.jsonl", [1.4, 1.4, 1.4, 1.4, 1.4, 1, 0, 0]))
    assert "expert(s) 6, 7 of 8" in f.summary and "busiest" not in f.summary


def test_imbalance_during_warm_up_only_is_not_a_finding(tmp_path):
    path = write_run(tmp_path / "a" / "metrics.jsonl", [1] * E,
                     warm_layer1=[8, 1, 1, 1, 0, 0, 0, 0])
    assert routing(path) == []


def test_the_command_reports_it_and_exits_with_problems_found(tmp_path):
    path = write_run(tmp_path / "run" / "metrics.jsonl", [6, 5, 1, 1, 1, 1, 1, 1])
    r = llmtk("diagnose", path, in_process=True)
    assert r.returncode == 3 and b"collapsed_routing" in r.stdout
    r = llmtk("diagnose", path, "--json", in_process=True)
    kinds = [f["kind"] for run in json.loads(r.stdout) for f in run["findings"]]
    assert "collapsed_routing" in kinds
