"""`llmtk diagnose` on the ranks of a multi-process run (llmtk/curves/ranks.py), one test
per finding on synthetic metrics rows, and the hang watchdog's verdict (watchdog.judge)."""

import random

from llmtk.curves.detect import diagnose
from llmtk.curves.logs import load_run
from llmtk.io.metrics import encode_row
from llmtk.train.watchdog import hang_line, judge


def run_of(tmp_path, rows):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b"".join(encode_row(r) for r in rows))
    return diagnose(load_run(str(path)))


def rows(n=30, world=2, data=None, compute=None, comm=None, loss=None, seed=0):
    """n rows of a run whose losses fall slowly; per-rank times from the callables
    f(row, rank) (defaults: 1 ms data, 20 ms compute, 5 ms comm, with noise)."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        level = 4.0 - i * 0.02

        def noisy(base):
            return [base * (1 + 0.2 * rnd.random()) for _ in range(world)]

        ranks = {"data_s": [data(i, r) for r in range(world)] if data else noisy(0.001),
                 "compute_s": [compute(i, r) for r in range(world)] if compute else noisy(0.02),
                 "comm_s": [comm(i, r) for r in range(world)] if comm else noisy(0.005),
                 "loss": [loss(i, r) for r in range(world)] if loss else
                 [level + rnd.gauss(0, 0.1) for _ in range(world)],
                 "mem_gb": [0.3] * world}
        out.append({"step": (i + 1) * 5, "loss": level, "lr": 1e-3, "grad_norm": 1.0,
                    "step_s": 0.03, "ranks": ranks})
    return out


def kinds(findings):
    return [f.kind for f in findings]


def test_healthy_ranks_raise_nothing(tmp_path):
    for seed in range(5):
        assert not {"straggler", "data_bound", "rank_loss_mismatch"} & set(
            kinds(run_of(tmp_path, rows(seed=seed, world=4))))


def test_a_rank_the_others_wait_for_is_the_straggler_with_its_phase(tmp_path):
    # rank 2 computes 15 ms longer; the others wait that long in their collectives
    f = run_of(tmp_path, rows(world=4, compute=lambda i, r: 0.035 if r == 2 else 0.02,
                              comm=lambda i, r: 0.001 if r == 2 else 0.016))
    (s,) = [x for x in f if x.kind == "straggler"]
    assert s.summary.startswith("rank 2 is a straggler")
    assert "slow computing, 15.0 ms per step more" in s.summary


def test_a_straggler_in_its_data_loader(tmp_path):
    f = run_of(tmp_path, rows(data=lambda i, r: 0.012 if r == 1 else 0.001,
                              comm=lambda i, r: 0.001 if r == 1 else 0.012))
    (s,) = [x for x in f if x.kind == "straggler"]
    assert "rank 1" in s.summary and "waiting for its data" in s.summary


def test_data_bound(tmp_path):
    f = run_of(tmp_path, rows(data=lambda i, r: 0.015))
    (d,) = [x for x in f if x.kind == "data_bound"]
    assert "waits for data" in d.summary and any("tokenize ahead" in x for x in d.fixes)


def test_a_rank_whose_loss_sits_apart_is_a_mismatch(tmp_path):
    rnd = random.Random(1)
    f = run_of(tmp_path, rows(world=4, loss=lambda i, r: 4 + rnd.gauss(0, 0.1)
                              + (0.3 if r == 3 else 0)))
    (m,) = [x for x in f if x.kind == "rank_loss_mismatch"]
    assert m.summary.startswith("rank 3's loss before reduction")


def test_a_rank_alone_with_a_non_finite_loss(tmp_path):
    f = run_of(tmp_path, rows(n=6, loss=lambda i, r: float("nan") if r == 1 and i == 4
                              else 4.0))
    (m,) = [x for x in f if x.kind == "rank_loss_mismatch"]
    assert m.severity == "error" and "rank 1's loss is non-finite" in m.summary


def test_hang_and_oom_events_are_errors_named(tmp_path):
    events = [
        {"step": 150, "event": "hang", "culprits": [1], "stopped": [1], "message":
         "rank 1 (vm, pid 7) stopped in forward-backward at step 150 for 31 s",
         "ranks": [{"rank": 0, "host": "vm", "pid": 6, "step": 151, "phase": "all_reduce"}]},
        {"step": 150, "event": "oom", "rank": 1, "phase": "forward-backward",
         "allocated_gb": 79.1, "reserved_gb": 79.8, "planned_gb": 60.2,
         "fix": "--activation-checkpointing"}]
    f = run_of(tmp_path, rows(n=10) + events)
    (h,) = [x for x in f if x.kind == "hang"]
    (o,) = [x for x in f if x.kind == "oom"]
    assert h.severity == o.severity == "error"
    assert h.summary.startswith("rank 1 (vm, pid 7) stopped in forward-backward")
    assert "rank 1 ran out of memory at step 150" in o.summary
    assert o.fixes[0] == "the cheapest: --activation-checkpointing"


# -- the watchdog's verdict ---------------------------------------------------------------


def beat(step, phase, state="running", pid=1):
    return {"step": step, "phase": phase, "state": state, "host": "h", "pid": pid}


def test_judge_names_the_rank_whose_heartbeat_stopped():
    beats = [beat(9, "all_reduce (DDP gradients)", pid=10), beat(8, "forward-backward", pid=11)]
    # (progress, beat, when progress moved, when the beat moved): rank 1 silent since t=0
    seen = {0: (5, 40, 0.0, 39.0), 1: (4, 3, 0.0, 0.0)}
    v = judge(beats, seen, now=40.0, start=0.0, timeout=30, interval=1)
    assert (v["culprits"], v["stopped"], v["live"]) == ([1], [1], [0])
    assert hang_line(beats, v, 30).startswith(
        "rank 1 (h, pid 11) stopped at step 9 for 40 s (its last heartbeat: forward-backward "
        "at step 8); rank 0 waits in all_reduce (DDP gradients)")
    beats[1]["step"] = 9
    assert hang_line(beats, v, 30).startswith(
        "rank 1 (h, pid 11) stopped in forward-backward at step 9 for 40 s; rank 0 waits")


def test_judge_names_a_live_rank_stuck_alone_in_its_phase():
    beats = [beat(9, "all_reduce"), beat(9, "all_reduce"), beat(8, "data")]
    seen = {r: (5, 40, 0.0, 39.5) for r in range(3)}
    v = judge(beats, seen, now=40.0, start=0.0, timeout=30, interval=1)
    assert v["culprits"] == [2] and v["stopped"] == []


def test_judge_waits_for_the_timeout_and_ignores_finished_ranks():
    beats = [beat(9, "data"), beat(9, "done", state="done")]
    seen = {0: (5, 40, 20.0, 39.5), 1: (4, 3, 0.0, 0.0)}
    assert judge(beats, seen, now=40.0, start=0.0, timeout=30, interval=1) is None


def test_judge_ends_at_once_when_a_rank_failed():
    beats = [beat(9, "all_reduce"), beat(9, "out of memory (forward-backward)", "failed")]
    v = judge(beats, {}, now=1.0, start=0.0, timeout=600, interval=10)
    assert v["failed"] and v["culprits"] == [1]


def test_a_resume_keeps_the_hang_that_made_it_restart(tmp_path):
    """truncate_after drops rows of steps done again, not the fault events past the
    checkpoint: after a restart diagnose still names the hang and the oom."""
    from llmtk.io.metrics import read_metrics, truncate_after

    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b"".join(encode_row(r) for r in [
        {"step": 4, "loss": 2.0}, {"step": 6, "loss": 1.9},
        {"step": 7, "event": "hang", "culprits": [1]},
        {"step": 7, "event": "oom", "rank": 0}, {"step": 7, "event": "nan"}]))
    assert truncate_after(str(path), 4) == 2
    assert [(r["step"], r.get("event")) for r in read_metrics(str(path))] == [
        (4, None), (7, "hang"), (7, "oom")]


def test_ranks_without_a_loss_are_null_and_raise_nothing(tmp_path):
    """--pp: the stages before the last hold no loss (null in the row): no mismatch."""
    f = run_of(tmp_path, rows(loss=lambda i, r: None if r == 0 else 4.0 - i * 0.01))
    assert "rank_loss_mismatch" not in kinds(f)


def test_gather_row_marks_a_rank_without_a_loss_and_keeps_a_nan():
    import torch

    from llmtk.train.runtime import Dist
    from llmtk.train.steptime import Phases, gather_row

    p = Phases()
    p.step_done(torch.tensor(0.0), 1)
    assert gather_row(Dist(), p, 0.1)["loss"] == [None]
    p.step_done(torch.tensor(float("nan")), 2)
    (nan,) = gather_row(Dist(), p, 0.1)["loss"]
    assert nan != nan
    p.step_done(torch.tensor(7.0), 2)
    assert gather_row(Dist(), p, 0.1)["loss"] == [3.5]
