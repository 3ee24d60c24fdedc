"""`llmtk train` with faults injected, for tests: python -m tests.train_driver train ARGS...

The faults come from LLMTK_TEST_FAULTS, a JSON object (every key optional):
  nan_loss: S           the loss of 0-based step S is NaN
  spike_loss: S         the loss of 0-based step S is 10x (once; not again on the redo)
  crash_in_checkpoint: S  SIGKILL after checkpoint S is written, before it is COMPLETE
  hold_in_checkpoint: FILE  create FILE once a checkpoint is written, before it is
                        COMPLETE, then wait there (up to 60 s)
  die_once: [FILE, S]   exit 17 after step S unless FILE exists (then create it first)
  kill_after: S         SIGKILL this process after step S (every rank of a torchrun job)
  step_delay: SECONDS   sleep after every step (time for a test to send a signal)
  hold: FILE            after step 1, wait (up to 300 s) until FILE exists
  linger_child: SECONDS  after step 1, rank 0 forks a child that shares its open files
                        (the run lock included) and outlives it by SECONDS: a process of
                        a killed run that is still exiting
  kill_rank_once: [FILE, R, S]  rank R SIGKILLs itself after step S unless FILE exists
                        (then it creates it first): one rank of a torchrun job dies
  slow_rank: [R, SECONDS]  rank R sleeps in every micro-step's forward (a straggler):
                        SECONDS, or twice the time it worked since its last sleep if that
                        is longer, so it stays the one the others wait for however slowly
                        a loaded machine runs them all
  oom_at: [R, S]        rank R's forward of 0-based step S raises MemoryError (as a failed
                        allocation does; the trainer's out-of-memory path handles it)
They reach the loop through the `faults` object `llmtk.train.trainer.train` takes; the
production code has no test hooks. `injected(spec)` does the same for a run in the test's
own process (faults that only change numbers: nan_loss, spike_loss).
"""

import contextlib
import json
import os
import signal
import sys
import time

from llmtk.train.runtime import Faults


class TestFaults(Faults):
    def __init__(self, spec: dict):
        self.spec, self.spiked = spec, False
        self.slept_at: float | None = None  # slow_rank: when its last sleep ended

    def loss(self, step, loss):
        rank = int(os.environ.get("RANK", 0))
        if self.spec.get("slow_rank", [None])[0] == rank:
            worked = 0.0 if self.slept_at is None else time.monotonic() - self.slept_at
            time.sleep(max(self.spec["slow_rank"][1], 2 * worked))
            self.slept_at = time.monotonic()
        if self.spec.get("oom_at") == [rank, step]:
            raise MemoryError("injected: a failed allocation")
        if self.spec.get("nan_loss") == step:
            return loss * float("nan")
        if self.spec.get("spike_loss") == step and not self.spiked:
            self.spiked = True
            return loss * 10.0
        return loss

    def before_commit(self, step):
        if self.spec.get("crash_in_checkpoint") == step:
            os.kill(os.getpid(), signal.SIGKILL)
        if "hold_in_checkpoint" in self.spec:
            open(self.spec["hold_in_checkpoint"], "w").close()
            deadline = time.time() + 60
            while time.time() < deadline:
                time.sleep(0.05)

    def after_step(self, step):
        if self.spec.get("kill_after") == step:
            os.kill(os.getpid(), signal.SIGKILL)
        kill = self.spec.get("kill_rank_once")
        if kill and [int(os.environ.get("RANK", 0)), step] == kill[1:] \
                and not os.path.exists(kill[0]):
            open(kill[0], "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        die = self.spec.get("die_once")
        if die and step == die[1] and not os.path.exists(die[0]):
            open(die[0], "w").close()
            os._exit(17)
        if "step_delay" in self.spec:
            time.sleep(self.spec["step_delay"])
        if "linger_child" in self.spec and step == 1 and os.environ.get("RANK", "0") == "0":
            parent = os.getpid()
            if os.fork() == 0:  # only sleeps and exits: safe in a threaded parent's child
                while os.getppid() == parent:
                    time.sleep(0.05)
                time.sleep(self.spec["linger_child"])
                os._exit(0)
        if "hold" in self.spec and step == 1:
            deadline = time.time() + 300
            while not os.path.exists(self.spec["hold"]) and time.time() < deadline:
                time.sleep(0.05)


@contextlib.contextmanager
def injected(spec: dict):
    """`llmtk train` run in this process meanwhile trains with the faults of SPEC."""
    import llmtk.train.trainer as trainer

    faults = TestFaults(spec)
    real = trainer.train
    trainer.train = lambda cfg, faults_=None: real(cfg, faults=faults)
    try:
        yield
    finally:
        trainer.train = real


def main() -> None:
    spec = json.loads(os.environ.get("LLMTK_TEST_FAULTS", "{}"))
    sys.argv = ["llmtk", *sys.argv[1:]]
    from llmtk.cli import main as cli_main

    with injected(spec):
        cli_main()


if __name__ == "__main__":
    main()
