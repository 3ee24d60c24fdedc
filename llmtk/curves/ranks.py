"""Findings about the ranks of a multi-process run: which one is slow, whether the data
keeps them waiting, whether their losses disagree, and the faults the trainer recorded
(a hang, an out-of-memory).

llmtk's metrics rows carry `ranks`: per rank, the seconds per step spent waiting for data
(`data_s`), computing (`compute_s`) and waiting in collectives (`comm_s`), the seconds the
process did not run at all (`stall_s`: stopped, swapped out, starved of CPU), its loss
before the reduction and its peak memory (docs/train.md "The metrics log"). Ranks run in
lock step, so a slow rank does not show in the step time (everyone's is the same): it
shows as the rank the others wait for. Its own collective waits are short, theirs long;
or it stalled more than they did (a stall delays the others wherever it falls).

The straggler threshold comes from 2-process CPU runs on the project's shared 2-core
machine under a load average of about 8 (other jobs), `tiny` model, 100 steps in 19 rows of
5 (benchmarks/rank_noise.py; runs alternate between a `fit` and a `check` half). A rank's
lag in a row is the larger of (the others' median comm wait minus its own) and (its stall
minus the others' median stall), as a share of the step; the rule takes its median over
the rows.
- fit half: healthy runs' median lags at most 0.01 and 0.09 (rank 0, rank 1 of each); with
  rank 1 stopped (SIGSTOP) 50 ms of every 100 ms, 0.45 and 0.40. LAG_SHARE = 0.2 lies
  between.
- check half: healthy at most 0.03 and 0.00 (no finding); paused 0.40 and 0.41 (both
  found).
Without the stall term (comm lag alone) the paused runs' medians were 0.26, 0.43, 0.26 and
-0.06: a stop that lands while the rank waits in a collective makes the others wait there
too, and the comm times alone do not show whose stop it was.
"""

from __future__ import annotations

import math
from statistics import median

from llmtk.curves.common import Finding
from llmtk.curves.logs import Run

SKIP_ROWS = 1        # the first row holds start-up (first forward, allocations)
MIN_ROWS = 5         # the fewest rows with per-rank times judged
LAG_SHARE = 0.20     # a rank the others wait for 20% of the step (median over rows) ...
LAG_ROWS = 8         # ... over at least 8 rows is a straggler
DATA_SHARE = 0.25    # data wait above a quarter of the step time ...
DATA_ROWS = 0.5      # ... in half of the rows: data bound
LOSS_T = 6.0         # a rank's mean loss gap this many standard errors from 0 ...
LOSS_REL = 0.02      # ... and 2% of the loss: its losses disagree with the others'


def _per_rank(run: Run) -> list[dict]:
    """The rows' `ranks` objects with times for every rank, first rows skipped."""
    rows = [r for r in run.rows if isinstance(r.get("ranks"), dict)
            and all(isinstance(r["ranks"].get(k), list) and r["ranks"][k]
                    and all(isinstance(v, int | float) for v in r["ranks"][k])
                    for k in ("data_s", "compute_s", "comm_s"))]
    return rows[SKIP_ROWS:]


def _step(ranks: dict, r: int) -> float:
    return ranks["data_s"][r] + ranks["compute_s"][r] + ranks["comm_s"][r]


def detect_straggler(run: Run) -> list[Finding]:
    """A rank the others wait for in LAG_ROWS of the rows, by LAG_SHARE of the step."""
    rows = _per_rank(run)
    if len(rows) < MIN_ROWS or len(rows[0]["ranks"]["comm_s"]) < 2:
        return []
    world = len(rows[0]["ranks"]["comm_s"])
    lags: dict[int, list[float]] = {r: [] for r in range(world)}
    for row in rows:
        ranks = row["ranks"]
        if len(ranks["comm_s"]) != world:
            continue
        step = max(_step(ranks, r) for r in range(world))
        if step <= 0:
            continue
        stall = ranks.get("stall_s")
        for r in range(world):
            others = [ranks["comm_s"][o] for o in range(world) if o != r]
            lag = (median(others) - ranks["comm_s"][r]) / step
            if isinstance(stall, list) and len(stall) == world:
                # time the process did not run delays the others wherever it falls
                lag = max(lag, (stall[r] - median(stall[o] for o in range(world) if o != r))
                          / step)
            lags[r].append(lag)
    findings = []
    for r, ls in lags.items():
        if len(ls) >= LAG_ROWS and median(ls) >= LAG_SHARE:
            slow = sum(x >= LAG_SHARE for x in ls)
            findings.append(_straggler(run, rows, r, world, median(ls), slow, len(ls)))
    return findings


def _straggler(run: Run, rows: list[dict], r: int, world: int, lag: float, n_slow: int,
               n: int) -> Finding:
    """Which phase of rank r takes longer than the others'; the finding."""
    extra = {}
    for phase in ("data_s", "compute_s"):
        diffs = [row["ranks"][phase][r] - median(row["ranks"][phase][o]
                                                 for o in range(world) if o != r)
                 for row in rows if len(row["ranks"][phase]) == world]
        extra[phase] = median(diffs) if diffs else 0.0
    stalls = [row["ranks"]["stall_s"][r] - median(row["ranks"]["stall_s"][o]
                                                  for o in range(world) if o != r)
              for row in rows if len(row["ranks"].get("stall_s") or []) == world]
    if stalls:
        extra["stall_s"] = median(stalls)
    phase = max(extra, key=extra.get)
    steps = [_step(row["ranks"], r) for row in rows]
    where = ({"data_s": "waiting for its data", "compute_s": "computing",
              "stall_s": "because the process was not running (stopped, swapped out or "
                         "starved of CPU)"}[phase]
             if extra[phase] > 0.25 * lag * median(steps)
             else "outside the timed phases (between steps, or the process was not running)")
    return Finding(
        "straggler", "warning", rows[0].get("step", 0),
        f"rank {r} is a straggler: the other ranks wait for it {lag * 100:.0f}% of the step "
        f"(median over {n} rows; {n_slow} rows over {LAG_SHARE * 100:.0f}%); it is slow "
        f"{where}" + (f", {extra[phase] * 1000:.1f} ms per step more than the others"
                      if extra[phase] > 0 else ""),
        causes=["its data loader is slower (a slow disk or network mount, fewer CPU cores, "
                "bigger documents to tokenize)" if phase == "data_s" else
                "a slower or throttled device (thermals, power cap, a failing GPU), or other "
                "processes on its host taking CPU or memory bandwidth",
                "the process is paused now and then (swapping, a debugger, SIGSTOP, a noisy "
                "neighbour on a shared host)"],
        fixes=[f"look at rank {r}'s host: nvidia-smi -q (clocks, throttle reasons, Xid "
               "errors), top / iostat for other load",
               "exclude the host from the job, or move its work elsewhere; every other rank "
               "runs at its speed"])


def detect_data_bound(run: Run) -> list[Finding]:
    """Ranks wait for data DATA_SHARE of the step in DATA_ROWS of the rows."""
    rows = _per_rank(run)
    shares = []
    for row in rows:
        ranks = row["ranks"]
        worst = max(range(len(ranks["data_s"])),
                    key=lambda r: ranks["data_s"][r] / max(_step(ranks, r), 1e-12))
        shares.append((ranks["data_s"][worst] / max(_step(ranks, worst), 1e-12), worst))
    if len(shares) < MIN_ROWS:
        return []
    bound = [s for s in shares if s[0] >= DATA_SHARE]
    if len(bound) < DATA_ROWS * len(shares):
        return []
    share = median(s for s, _ in shares)
    ranks = sorted({r for _, r in bound})
    who = ", ".join(map(str, ranks[:8])) + (" ..." if len(ranks) > 8 else "")
    return [Finding(
        "data_bound", "warning", rows[0].get("step", 0),
        f"data bound: the step waits for data {share * 100:.0f}% of its time (median over "
        f"{len(shares)} rows; worst rank(s): {who}); the devices idle meanwhile",
        causes=["tokenizing or reading on the fly in the training process",
                "a slow or remote file system for the token shards",
                "too few CPU cores per rank for its data work"],
        fixes=["tokenize ahead (llmtk train tokenize) and train from the token dataset",
               "put the shards on local disk; read ahead more (prefetch) or give each rank "
               "more CPU cores (fewer ranks per host, or --threads)"])]


def detect_rank_loss_mismatch(run: Run) -> list[Finding]:
    """A rank whose loss before reduction is off the others' by LOSS_T standard errors and
    LOSS_REL of the loss, over the rows; or a rank with a non-finite loss the others do
    not have."""
    rows = [r for r in run.rows if isinstance(r.get("ranks"), dict)
            and isinstance(r["ranks"].get("loss"), list) and len(r["ranks"]["loss"]) > 1]
    if not rows:
        return []
    world = len(rows[0]["ranks"]["loss"])
    findings = []
    for r in range(world):
        gaps, level, lone_bad = [], [], []
        for row in rows:
            losses = [_num(v) for v in row["ranks"]["loss"]]
            if len(losses) != world or losses[r] is None:
                continue
            others = [v for o, v in enumerate(losses) if o != r and v is not None]
            if not others:
                continue
            if not math.isfinite(losses[r]) and all(math.isfinite(v) for v in others):
                lone_bad.append(row.get("step"))
            elif math.isfinite(losses[r]) and all(math.isfinite(v) for v in others):
                gaps.append(losses[r] - median(others))
                level.append(abs(median(others)))
        f = _loss_finding(r, world, gaps, level, lone_bad)
        if f is not None:
            findings.append(f)
    return findings


def _num(v):
    if isinstance(v, int | float):
        return float(v)
    return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}.get(v)


def _loss_finding(r: int, world: int, gaps: list[float], level: list[float],
                  lone_bad: list) -> Finding | None:
    causes = ["the rank's data differs from the others' (another source, a corrupt shard, "
              "a different tokenizer or cache)",
              "a faulty device computing wrong values (silent data corruption)",
              "model replicas out of sync (a broken all-reduce, or weights loaded differently "
              "on this rank)"]
    fixes = [f"compare rank {r}'s batch with the others' (llmtk train batch RUN --step N)",
             f"run rank {r}'s host alone on a known-good check (nvidia-smi -q, a GPU burn-in, "
             "dcgmi diag) and exclude it if it fails"]
    if lone_bad:
        return Finding("rank_loss_mismatch", "error", lone_bad[0],
                       f"rank {r}'s loss is non-finite at {len(lone_bad)} logged step(s) where "
                       "the other ranks' are finite", causes=causes, fixes=fixes)
    if len(gaps) < 2 * MIN_ROWS:
        return None
    mean = sum(gaps) / len(gaps)
    sd = math.sqrt(sum((g - mean) ** 2 for g in gaps) / (len(gaps) - 1))
    t = mean / (sd / math.sqrt(len(gaps))) if sd > 0 else (math.inf if mean else 0.0)
    rel = abs(mean) / max(median(level), 1e-12)
    if abs(t) < LOSS_T or rel < LOSS_REL:
        return None
    whom = "the other rank" if world == 2 else "the median of the others"
    return Finding(
        "rank_loss_mismatch", "warning", 0,
        f"rank {r}'s loss before reduction is {abs(mean):.3g} ({rel * 100:.1f}%) "
        f"{'above' if mean > 0 else 'below'} {whom} on average over {len(gaps)} rows "
        f"({abs(t):.0f} standard errors), more than different batches explain",
        causes=causes, fixes=fixes)


def detect_hang(run: Run) -> list[Finding]:
    """The watchdog's `hang` events (llmtk/train/watchdog.py)."""
    found = [e for e in run.events if e.get("event") == "hang"]
    return [Finding(
        "hang", "error", e.get("step", 0),
        str(e.get("message") or f"hang: rank(s) {e.get('culprits')} stopped"),
        causes=["a stopped, frozen or swapping process; a dead host or a network partition",
                "a rank stuck in its data loader or in a collective the others never enter "
                "(ranks that disagree on how many steps or collectives to run)",
                "a device fault (GPU Xid error, NCCL stuck after a link error)"],
        fixes=["read the live ranks' Python stacks in OUT/hang/rank-N.txt (and the NCCL "
               "flight recorder's dump beside them on GPU): where they wait names the "
               "collective",
               "check the named rank's host (dmesg, nvidia-smi -q, the network); resume with "
               "the same command (torchrun --max-restarts restarts it by itself)"],
        details=[f"rank {x.get('rank')} ({x.get('host')}, pid {x.get('pid')}): "
                 f"{x.get('phase')} at step {x.get('step')}" for x in e.get("ranks") or []])
        for e in found]


def detect_oom(run: Run) -> list[Finding]:
    """`oom` events: a rank ran out of memory at a step (llmtk/train/oom.py)."""
    out = []
    for e in (e for e in run.events if e.get("event") == "oom"):
        held = f"{e.get('allocated_gb')} GB allocated" + (
            f", {e.get('reserved_gb')} GB reserved" if e.get("reserved_gb") is not None else "")
        plan = (f"; planned {e['planned_gb']} GB of weights, gradients and optimizer states"
                if e.get("planned_gb") is not None else "")
        out.append(Finding(
            "oom", "error", e.get("step", 0),
            f"rank {e.get('rank')} ran out of memory at step {e.get('step')} in "
            f"{e.get('phase')} ({held}{plan})",
            causes=["activations of the micro-batch (batch size x sequence length x layers) "
                    "on top of the weights, gradients and optimizer states",
                    "fragmentation of the CUDA caching allocator (reserved far above "
                    "allocated)"],
            fixes=[f"the cheapest: {e.get('fix')}" if e.get("fix") else
                   "--activation-checkpointing",
                   "a smaller --batch-size with more --grad-accum (the same global batch)",
                   "another layout: llmtk estimate --solve layout; llmtk train --dry-run "
                   "checks it per rank",
                   "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation"]))
    return out


RANK_DETECTORS = (detect_hang, detect_oom, detect_straggler, detect_data_bound,
                  detect_rank_loss_mismatch)
