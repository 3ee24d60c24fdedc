"""The hang watchdog (--hang-timeout): a rank that stops ends the run in minutes, named.

Each rank runs a daemon thread that publishes its heartbeat to the process group's store
every few seconds: the step and phase it is in (steptime.Phases), a progress count that
moves at every phase mark, and a beat count that moves at every publication. Under
torchrun the store is the agent's TCPStore (TORCHELASTIC_USE_AGENT_STORE), served by the
launcher, so it answers while any worker is stopped or stuck in a collective; the thread
opens its own client connection, so it never waits behind the loop's use of the store.

Every thread reads every rank's heartbeat and keeps, on its own clock, when each rank's
progress and beat last moved. When some rank has made no progress for --hang-timeout:
  - the culprits are the ranks whose beat stopped too (a stopped or frozen process),
    else the ranks in a phase none of the others is in (the others wait in a collective
    for them), else every rank (all wait in one collective: a deadlock);
  - every live rank writes its Python stacks (faulthandler) and the phase it waits in,
    to stderr and to OUT/hang/rank-N.txt, and kills the culprits that run on its host
    (SIGKILL: a stopped process ignores anything else until continued);
  - the lowest live rank appends a `hang` event to OUT/metrics.jsonl (one O_APPEND write of
    a whole line, so it never interleaves with rank 0's rows, and it is written even when
    rank 0 is the one that stopped) and prints one line naming the culprits;
  - every live rank exits with status 1; torchrun then ends the job (or restarts it under
    --max-restarts).
A rank whose heartbeat says `failed` (it caught an error it reports itself, e.g. out of
memory) ends the others at once, without waiting for the timeout.

A culprit on a host where no rank is live is left to that host's launcher. On GPU the
NCCL flight recorder is switched on (nccl_env) and dumped here when a hang is found.
"""

from __future__ import annotations

import faulthandler
import json
import os
import socket
import sys
import threading
import time

EXIT_HANG = 1


def nccl_env(out: str) -> dict:
    """TORCH_NCCL_* settings for a GPU run (a user's own values win): keep the last 2000
    collectives per rank (the flight recorder), dump them when NCCL's own watchdog times
    out, to OUT/hang/nccl-trace-rank-N, with stack traces."""
    return {"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
            "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
            "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": os.path.join(out, "hang", "nccl-trace-rank-"),
            "TORCH_NCCL_INCLUDE_STACK_TRACE": "1"}


def interval_for(timeout: float) -> float:
    """How often heartbeats are published and read: a tenth of the timeout, 0.2-10 s."""
    return min(10.0, max(0.2, timeout / 10))


class Watchdog:
    """Publish this rank's heartbeat and watch everyone's (see the module docstring).
    A context manager: armed inside, stopped (and marked done for the others) on exit."""

    def __init__(self, dist, phases, timeout: float, out: str, say=None):
        self.dist, self.phases, self.timeout, self.out = dist, phases, timeout, out
        self.say = say or (lambda m: None)
        self.interval = interval_for(timeout)
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.state = "running"  # running | done | failed
        self.store = None
        self._stop = threading.Event()
        self._thread = None
        self._stalls = None
        restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        self.prefix = f"llmtk/heartbeat/{os.environ.get('TORCHELASTIC_RUN_ID', '')}/{restart}/"

    # ---------------------------------------------------------------- lifecycle
    def __enter__(self) -> Watchdog:
        if self.dist.distributed:  # the ranks' stalls are in the rows (steptime.Stalls)
            from llmtk.train.steptime import Stalls

            self._stalls = Stalls(self.phases).__enter__()
        if self.dist.distributed and self.timeout > 0:
            self.store = self._connect()
            if self.store is not None:
                self._publish(0)
                self._thread = threading.Thread(target=self._loop, name="llmtk-watchdog",
                                                daemon=True)
                self._thread.start()
        return self

    def __exit__(self, et, exc, tb) -> None:
        if self._stalls is not None:
            self._stalls.__exit__()
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        if exc is not None and self.state == "running" and self._peer_failed():
            # A collective broken by a rank that failed and said why (out of memory): this
            # rank's own error ("Connection closed by peer") would only hide that line.
            sys.stderr.flush()
            os._exit(EXIT_HANG)
        if self.state == "running":  # an error all ranks reach together is not a failure
            self.state = "done"      # to report for another: they end by themselves
        self._publish(-1)

    def failed(self, why: str) -> None:
        """Tell the other ranks at once that this one ends (an error it reports itself)."""
        self.state, self.phases.phase = "failed", why
        if self.store is not None:
            self._publish(-1)

    def _peer_failed(self) -> bool:
        try:
            return any(hb and hb["state"] == "failed" for hb in self._read())
        except RuntimeError:
            return False

    def _connect(self):
        """A client of the group's store (MASTER_ADDR:MASTER_PORT, torchrun's agent store)
        with a short timeout, or None (then there is no watchdog, and it says so)."""
        from datetime import timedelta

        import torch.distributed as tdist

        try:
            return tdist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                                  is_master=False, wait_for_workers=False,
                                  timeout=timedelta(seconds=max(5.0, 3 * self.interval)))
        except (KeyError, ValueError, RuntimeError) as e:
            self.say(f"note: no hang watchdog (the process group's store is not reachable: "
                     f"{e})")
            return None

    # ---------------------------------------------------------------- the thread
    def _publish(self, beat: int) -> None:
        ph = self.phases
        value = {"step": ph.step, "phase": ph.phase, "progress": ph.progress, "beat": beat,
                 "state": self.state, "host": self.host, "pid": self.pid}
        try:
            self.store.set(f"{self.prefix}{self.dist.rank}", json.dumps(value))
        except RuntimeError:
            pass  # the store is gone: the launcher is ending the job

    def _read(self) -> list[dict | None]:
        keys = [f"{self.prefix}{r}" for r in range(self.dist.world)]
        if not self.store.check(keys):
            return [json.loads(self.store.get(k)) if self.store.check([k]) else None
                    for k in keys]
        return [json.loads(v) for v in self.store.multi_get(keys)]

    def _loop(self) -> None:
        seen: dict[int, tuple] = {}  # rank -> (progress, beat, when progress moved, when beat)
        start, beat = time.monotonic(), 0
        while not self._stop.wait(self.interval):
            beat += 1
            self._publish(beat)
            try:
                beats = self._read()
            except RuntimeError:
                continue  # a slow store: judged on the next round
            now = time.monotonic()
            for r, hb in enumerate(beats):
                if hb is None:
                    continue
                old = seen.get(r, (None, None, start, start))
                seen[r] = (hb["progress"], hb["beat"],
                           old[2] if hb["progress"] == old[0] else now,
                           old[3] if hb["beat"] == old[1] else now)
            verdict = judge(beats, seen, now, start, self.timeout, self.interval)
            # the first step holds compilation and warm-up: no progress is judged before the
            # second (a failed rank is, at once)
            if verdict is not None and (verdict["failed"] or self.phases.step >= 2):
                self._end(beats, verdict)

    # ---------------------------------------------------------------- the end
    def _end(self, beats: list, verdict: dict) -> None:
        """Stacks, the culprits on this host killed, the event and the line, exit 1."""
        if verdict["failed"]:
            os._exit(EXIT_HANG)  # the failed rank says why (oom.py); nothing to add here
        me = self.dist.rank
        culprits, live = verdict["culprits"], verdict["live"]
        lines = [f"rank {me} ({self.host}, pid {self.pid}): {self.phases.phase} at step "
                 f"{self.phases.step} when the hang was found; its Python stacks:"]
        stacks = os.path.join(self.out, "hang", f"rank-{me}.txt")
        try:
            os.makedirs(os.path.dirname(stacks), exist_ok=True)
            with open(stacks, "w") as f:
                f.write(lines[0] + "\n")
                f.flush()
                faulthandler.dump_traceback(f, all_threads=True)
                _nccl_dump(self.dist, f)
        except OSError:
            stacks = None
        for r in culprits:
            hb = beats[r]
            if hb and hb["host"] == self.host and r in verdict["stopped"] and hb["pid"] != self.pid:
                try:
                    os.kill(hb["pid"], 9)  # SIGKILL: a stopped process takes nothing else
                except OSError:
                    pass
        reporter = min((r for r in live if r not in culprits), default=min(live, default=me))
        if me == reporter:
            line = hang_line(beats, verdict, self.timeout)
            self._record(beats, verdict, line)
            print(f"llmtk: error: hang: {line}; Python stacks of the live ranks: "
                  f"{os.path.join(self.out, 'hang')}/", file=sys.stderr, flush=True)
        sys.stderr.flush()
        os._exit(EXIT_HANG)

    def _record(self, beats: list, verdict: dict, line: str) -> None:
        from llmtk.train.steplog import append_event

        ranks = [{"rank": r, "host": hb["host"], "pid": hb["pid"], "step": hb["step"],
                  "phase": hb["phase"], "state": hb["state"]}
                 for r, hb in enumerate(beats) if hb is not None]
        try:
            append_event(self.out, "hang", max((hb["step"] for hb in beats if hb), default=0),
                         culprits=verdict["culprits"], stopped=verdict["stopped"],
                         seconds=round(verdict["seconds"], 1), timeout=self.timeout,
                         ranks=ranks, message=line, stacks="hang/")
        except OSError:
            pass


def judge(beats: list, seen: dict, now: float, start: float, timeout: float,
          interval: float) -> dict | None:
    """The verdict on everyone's heartbeats, or None while nothing is wrong.
    `seen[r]`: (progress, beat, when progress moved, when the beat moved), this clock."""
    failed = [r for r, hb in enumerate(beats) if hb and hb["state"] == "failed"]
    active = [r for r, hb in enumerate(beats) if not hb or hb["state"] == "running"]
    if failed:
        return {"culprits": failed, "stopped": [], "live": active, "seconds": 0.0,
                "failed": True}
    moved = {r: seen.get(r, (None, None, start, start)) for r in active}
    stalled = [r for r in active if now - moved[r][2] >= timeout]
    if not stalled:
        return None
    # a beat older than 3 rounds (and a timeout's tenth at least): the process is not running
    quiet = max(3 * interval, timeout / 10)
    stopped = [r for r in active if now - moved[r][3] >= quiet]
    live = [r for r in active if r not in stopped]
    if stopped:
        culprits = stopped
    else:
        phases = [(beats[r] or {}).get("phase") for r in live]
        odd = [r for r, p in zip(live, phases, strict=True) if phases.count(p) == 1]
        culprits = odd if 0 < len(odd) < len(live) else live
    seconds = max(now - moved[r][2] for r in culprits)
    return {"culprits": culprits, "stopped": stopped, "live": live, "seconds": seconds,
            "failed": False}


def hang_line(beats: list, verdict: dict, timeout: float) -> str:
    """`rank 1 (host, pid 1234) stopped in forward-backward at step 812 for 300 s; rank 0
    waits in all_reduce (DDP gradients)`."""
    def who(r):
        hb = beats[r] or {}
        return f"rank {r} ({hb.get('host', '?')}, pid {hb.get('pid', '?')})"

    if verdict["failed"]:
        parts = [f"{who(r)} failed in {(beats[r] or {}).get('phase')} at step "
                 f"{(beats[r] or {}).get('step')}" for r in verdict["culprits"]]
        return "; ".join(parts) + "; the other ranks stopped waiting for it"
    waiting = [r for r in verdict["live"] if r not in verdict["culprits"]]
    # A stopped rank's heartbeat is up to one round old: the live ranks (in lock step with
    # it) say which step it stopped at when its own beat is behind.
    now_at = min(((beats[r] or {}).get("step", 0) for r in waiting), default=None)
    parts = []
    for r in verdict["culprits"]:
        hb = beats[r] or {}
        phase, step = hb.get("phase"), hb.get("step")
        if not verdict["stopped"]:
            parts.append(f"{who(r)} made no progress in {phase} at step {step} for "
                         f"{verdict['seconds']:.0f} s")
        elif now_at is None or now_at == step:
            parts.append(f"{who(r)} stopped in {phase} at step {step} for "
                         f"{verdict['seconds']:.0f} s")
        else:
            parts.append(f"{who(r)} stopped at step {now_at} for {verdict['seconds']:.0f} s "
                         f"(its last heartbeat: {phase} at step {step})")
    if waiting:
        parts.append(", ".join(f"rank {r} waits in {(beats[r] or {}).get('phase')}"
                               for r in waiting[:4]) + (" ..." if len(waiting) > 4 else ""))
    return "; ".join(parts) + f" (--hang-timeout {timeout:g})"


def _nccl_dump(dist, f) -> None:
    """On GPU: the NCCL flight recorder's entries (pickled), beside the stacks."""
    if not dist.cuda:
        return
    try:
        import torch

        data = torch._C._distributed_c10d._dump_nccl_trace()
    except (AttributeError, RuntimeError):
        return
    with open(f.name.replace(".txt", ".nccl.pkl"), "wb") as g:
        g.write(data)
