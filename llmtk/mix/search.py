"""`llmtk mix search`: choose the mixture by small proxy trainings (RegMix, Data Mixing Laws).

    SEARCH/plan.json            the sources, bounds, proxy and the K sampled mixtures
    SEARCH/trials/KKKKK/        one `llmtk train` run per mixture: train.toml (its
                                config), metrics.jsonl, train.log, and trial.json,
                                written once it is scored
    SEARCH/trials/array.sbatch  with --executor slurm: the array's task script
    SEARCH/trials.jsonl         one row per scored trial: weights, validation losses,
                                objective, the fit's held-out prediction
    SEARCH/proposal.toml        `data = ["NAME=DIR:W", ...]`: the weights the fit predicts
                                best, a train config fragment
    SEARCH/search.png           held-out predicted against measured; loss over weights
    SEARCH/verify/KKKKK/        with --verify N: the proposal (0) and N - 1 mixtures near
    SEARCH/verify.jsonl         it, trained and scored as the trials are

Each trial is a real `llmtk train --config SEARCH/trials/K/train.toml` process: `jobs` at
once here, the tasks of one Slurm job array, or Ray tasks. A rerun reads plan.json (and
refuses other settings), skips every trial that has its last validation loss (trial.json, or a
metrics.jsonl that reached it), and runs the others again in their own folders: `llmtk
train` resumes from the trial's last checkpoint or starts it afresh. A trial that fails is
reported and left out of the fit.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import orjson

from llmtk.errors import DataError, LlmtkError, UsageError
from llmtk.io.atomic import atomic_file, write_json_atomically
from llmtk.io.metrics import read_metrics

TRIAL_FILE = "trial.json"
DIGITS = 5  # trials/00003: as `llmtk run` and the Slurm array script spell {k}


@dataclass
class Source:
    name: str
    path: str       # as given: proposal.toml names it so
    tokens: int     # the dataset's token count (meta and manifests)


@dataclass
class Proxy:
    path: str       # the `llmtk train --config` file
    values: dict    # its keys (field names) and checked values
    steps: int
    budget: int     # tokens one proxy reads: steps x batch x grad_accum x seq_len
    threads: int    # torch threads of one trial


def parse_named(option: str, spec: str, bare: bool = False) -> tuple[str, str]:
    """`NAME=DIR` -> (NAME, DIR); a bare DIR (when allowed) is named after its folder."""
    name, eq, path = spec.partition("=")
    if not eq:
        if not bare:
            raise UsageError(f"{option}: expected NAME=DIR, got {spec!r}")
        path = spec
        name = os.path.basename(os.path.normpath(spec))
    if not path or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise UsageError(f"{option}: expected NAME=DIR with a name of letters, digits, '_', "
                         f"'-' or '.', got {spec!r}")
    return name, path


def parse_bounds(option: str, specs: list[str], names: list[str], default: float) -> list[float]:
    """`--min-weight 0.05` (every source) or `--min-weight code=0.1` (one), repeatable."""
    values = dict.fromkeys(names, default)
    for spec in specs:
        name, eq, value = spec.rpartition("=")
        try:
            w = float(value)
        except ValueError:
            raise UsageError(f"{option}: expected [NAME=]W, got {spec!r}") from None
        if not 0 <= w <= 1:
            raise UsageError(f"{option}: a weight is between 0 and 1, got {spec!r}")
        if not eq:
            values = dict.fromkeys(names, w)
        elif name in values:
            values[name] = w
        else:
            raise UsageError(f"{option}: {name!r} is no source (the sources: "
                             f"{', '.join(names)})")
    return [values[n] for n in names]


def bounds(sources: list[Source], lo: list[float], hi: list[float], proxy: Proxy,
           max_epochs: float):
    """(lo, hi) arrays: the user's bounds, hi also capped so that no source is read more
    than max_epochs times by one proxy (w * budget <= max_epochs * tokens)."""
    import numpy as np

    from llmtk.mix.simplex import check_bounds

    cap = [max_epochs * s.tokens / proxy.budget for s in sources]
    hi = np.minimum(np.asarray(hi, dtype=np.float64), cap)
    lo = np.asarray(lo, dtype=np.float64)
    check_bounds([s.name for s in sources], lo, hi)
    return lo, hi


def natural_shares(sources: list[Source]):
    """Each source's share of all the tokens: the natural mixture."""
    import numpy as np

    total = sum(s.tokens for s in sources)
    return np.array([s.tokens / total for s in sources])


def make_plan(sources: list[Source], val: list[tuple[str, str]], proxy: Proxy, lo, hi,
              trials: int, seed: int) -> dict:
    """Everything the trials depend on, and the K mixtures drawn from it."""

    from llmtk.mix.simplex import sample

    weights = sample(natural_shares(sources), lo, hi, trials, seed)
    with open(proxy.path, "rb") as f:
        proxy_sha1 = hashlib.sha1(f.read()).hexdigest()
    return {
        "sources": [[s.name, os.path.abspath(s.path), s.tokens] for s in sources],
        "val": [[n, os.path.abspath(p)] for n, p in val],
        "proxy": proxy_sha1, "steps": proxy.steps, "budget": proxy.budget,
        "threads": proxy.threads,
        "lo": [round(float(x), 6) for x in lo], "hi": [round(float(x), 6) for x in hi],
        "trials": trials, "seed": seed,
        "weights": [[round(float(x), 4) for x in w] for w in weights],
    }


def load_plan(out: str, plan: dict) -> dict:
    """The plan of this search folder: written now, or the same one a run before wrote."""
    path = os.path.join(out, "plan.json")
    try:
        with open(path, "rb") as f:
            saved = orjson.loads(f.read())
    except FileNotFoundError:
        os.makedirs(out, exist_ok=True)
        write_json_atomically(path, plan)
        return plan
    except (OSError, orjson.JSONDecodeError) as e:
        raise DataError(f"{path}: cannot read ({e})") from None
    changed = sorted(k for k in {*plan, *saved} if k != "weights" and plan.get(k) != saved.get(k))
    if changed:
        raise UsageError(f"{out} holds a search with other {', '.join(changed)} (the proxy "
                         "file, sources, bounds, --trials or --seed); use a new --out, or "
                         f"delete {path} and the trials to start again")
    return saved


def trial_dir(root: str, k: int) -> str:
    """Trial K's folder under root (SEARCH/trials, or SEARCH/verify)."""
    return os.path.join(root, f"{k:0{DIGITS}d}")


def write_trial_config(where: str, proxy: Proxy, sources: list[Source],
                       weights: list[float], val: list[tuple[str, str]]) -> str:
    """SEARCH/trials/K/train.toml: the proxy's config with this trial's data, validation
    sets, run folder and threads, so that every trial runs as the same command
    `llmtk train --config SEARCH/trials/{k}/train.toml` on any engine."""
    values = {**proxy.values,
              # train takes positive weights: a zero weight is the source left out
              "data": [f"{s.name}={s.path}:{w:g}"
                       for s, w in zip(sources, weights, strict=True) if w > 0],
              "val_data": [f"{n}={p}" for n, p in val],
              "out": where, "threads": proxy.threads, "quiet": True}
    os.makedirs(where, exist_ok=True)
    path = os.path.join(where, "train.toml")
    shown = " ".join(proxy.path.splitlines())  # a comment ends at a line break
    text = f"# llmtk mix search: one trial, the proxy {shown} on this mixture\n"
    text += "".join(f"{key} = {_toml_value(v)}\n" for key, v in values.items())
    with atomic_file(path) as f:
        f.write(text.encode())
    return path


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)  # finite (checked): Python's repr is a TOML number
    if isinstance(v, str):
        return _toml_string(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML for {v!r}")


def python_for_trials() -> str:
    """The Python that runs a trial: torchrun's PYTHON_EXEC when set (the test suite
    points it at its fork server), else this one."""
    return os.environ.get("PYTHON_EXEC") or sys.executable


def train_argv(python: str, config: str) -> list[str]:
    return [python, "-m", "llmtk", "train", "--config", config]


def train_one(argv: list[str], log_path: str, started: Callable | None = None) -> int:
    """One trial's process, its output appended to its train.log; its exit status.
    `started(process)` is told of the process (to stop it if the search is stopped)."""
    with open(log_path, "ab") as f:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=f,
                                   stderr=subprocess.STDOUT)
        if started is not None:
            started(process)
        return process.wait()


def _argv_and_log(root: str, k: int, python: str) -> tuple[list[str], str]:
    where = trial_dir(root, k)
    return (train_argv(python, os.path.join(where, "train.toml")),
            os.path.join(where, "train.log"))


def run_local(todo: list[int], root: str, python: str, jobs: int,
              log: Callable[[str], None]) -> dict[int, int]:
    """Each trial as a local process, `jobs` at once; {trial: exit status}.

    Stopped itself (SIGTERM, Ctrl-C), the search sends its running trials SIGTERM, which
    makes `llmtk train` checkpoint and exit, and starts no more: a rerun resumes them."""
    import threading

    running: list = []
    stopping = threading.Event()

    def one(k: int) -> int:
        if stopping.is_set():
            return -1
        code = train_one(*_argv_and_log(root, k, python), started=running.append)
        log(f"{trial_dir(root, k)} {'done' if code == 0 else f'failed (exit {code})'}")
        return code

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        try:
            return dict(zip(todo, pool.map(one, todo), strict=True))
        except BaseException:
            stopping.set()
            for process in running:
                if process.poll() is None:
                    process.terminate()
            raise


def run_ray(todo: list[int], root: str, jobs: int, cpus: int, address: str | None,
            log: Callable[[str], None]) -> dict[int, int]:
    """Each trial as a Ray task reserving the proxy's threads as CPUs: on a running
    cluster (address, or $RAY_ADDRESS), else on a local instance of jobs x cpus CPUs.
    Ray retries a task whose node died; a trial that exits non-zero is not retried.
    The workers start `python -m llmtk` with this interpreter's path (the same on
    every node, as for `llmtk run --executor ray`); the folders must be shared."""
    try:
        import ray
    except ImportError:
        raise UsageError("--executor ray needs Ray: pip install 'llmtk[ray]'") from None

    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(num_cpus=jobs * cpus, include_dashboard=False, log_to_driver=False)
    try:
        remote = ray.remote(num_cpus=cpus)(train_one)
        refs = {k: remote.remote(*_argv_and_log(os.path.abspath(root), k, sys.executable))
                for k in todo}
        codes = {}
        for k, ref in refs.items():
            try:
                codes[k] = ray.get(ref)
            except ray.exceptions.RayError as e:  # its node died, after Ray's retries
                log(f"{trial_dir(root, k)}: Ray task failed: {type(e).__name__}")
                codes[k] = -1
            log(f"{trial_dir(root, k)} {'done' if codes[k] == 0 else 'failed'}")
        return codes
    finally:
        ray.shutdown()


SLURM_SCRIPT = """\
#!/bin/bash
# One trial of `llmtk mix search` as a Slurm array task: task K trains K/ beside this.
# Resubmit the trials that failed with: sbatch --array=K,... THIS_FILE
#SBATCH --job-name=llmtk-mix-search
#SBATCH --ntasks=1
#SBATCH --requeue
set -euo pipefail
K=$(printf '%05d' "$((10#${{SLURM_ARRAY_TASK_ID:?not a Slurm array task}}))")
exec {python} -m llmtk train --config {trials}/"$K"/train.toml
"""


def run_slurm(todo: list[int], root: str, python: str, cpus: int,
              log: Callable[[str], None]) -> dict[int, int]:
    """The trials as one Slurm job array (`sbatch --wait`: returns when all have ended),
    each task's output in its folder's train.log. Exit statuses are not known per task:
    a trial that failed is found by its missing validation loss."""
    import shlex

    trials = os.path.abspath(root)
    script = os.path.join(trials, "array.sbatch")
    with atomic_file(script) as f:
        f.write(SLURM_SCRIPT.format(python=shlex.quote(python),
                                    trials=shlex.quote(trials)).encode())
    argv = ["sbatch", "--wait", f"--array={','.join(map(str, todo))}",
            f"--cpus-per-task={cpus}", f"--output={trials}/%{DIGITS}a/train.log", script]
    log(f"submitting {' '.join(shlex.quote(a) for a in argv)}")
    try:
        code = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    except FileNotFoundError:
        raise UsageError("--executor slurm: no sbatch on PATH (is this a Slurm login "
                         "node?)") from None
    if code.returncode != 0:
        log(f"sbatch exited with status {code.returncode}: a trial failed (see its "
            "train.log)")
    return {}


def score_trial(where: str, steps: int, val_names: list[str]) -> dict[str, float]:
    """{validation set: loss} at the trial's last step, from its metrics.jsonl."""
    path = os.path.join(where, "metrics.jsonl")
    found = None
    try:
        for row in read_metrics(path):
            if row.get("step") == steps and "event" not in row and all(
                    f"val/{n}/loss" in row for n in val_names):
                found = row
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e.strerror or e}") from None
    except ValueError as e:
        raise DataError(str(e)) from None
    if found is None:
        raise DataError(f"{path}: no validation loss at step {steps}")
    return {n: float(found[f"val/{n}/loss"]) for n in val_names}


def failure_line(where: str) -> str:
    """The last non-empty line of a trial's train.log (its error, usually)."""
    try:
        with open(os.path.join(where, "train.log"), "rb") as f:
            lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines()]
    except OSError:
        return "no train.log"
    return next((ln for ln in reversed(lines) if ln), "empty train.log")


def parse_objective(spec: str, val_names: list[str]) -> dict[str, float]:
    """`mean` (every validation set alike) or `NAME=W,NAME=W`: weights per set."""
    if spec == "mean":
        return dict.fromkeys(val_names, 1.0 / len(val_names))
    weights = {}
    for part in spec.split(","):
        name, eq, value = part.strip().partition("=")
        try:
            weights[name] = float(value)
        except ValueError:
            raise UsageError(f"--objective: expected mean or NAME=W,..., got {spec!r}") from None
        if not eq or name not in val_names:
            raise UsageError(f"--objective: {name!r} is no validation set (they are: "
                             f"{', '.join(val_names)})")
    total = sum(weights.values())
    if total <= 0 or min(weights.values()) < 0:
        raise UsageError(f"--objective: weights must be >= 0 and not all 0, got {spec!r}")
    return {n: w / total for n, w in weights.items()}


@dataclass
class Outcome:
    rows: list[dict]              # the scored trials, trials.jsonl's rows
    failed: dict[int, str]        # trial -> why it is left out
    fit: object | None            # llmtk.mix.fit.Fit, None with too few trials
    proposal: dict[str, float]    # name -> weight
    predicted: float | None
    verified: list[dict] = field(default_factory=list)  # --verify: verify.jsonl's rows


EXECUTORS = ("local", "slurm", "ray")


@dataclass
class Runs:
    """How the mixtures are trained: the proxy, the sources, the validation sets and the
    engine; `score` trains what is missing under a root folder and reads the losses."""

    sources: list[Source]
    val: list[tuple[str, str]]
    proxy: Proxy
    executor: str
    jobs: int
    log: Callable[[str], None]
    address: str | None = None  # Ray's

    def score(self, root: str, weights: list[list[float]], what: str = "trial"):
        """([row per scored mixture], {index: why it failed})."""
        names = [s.name for s in self.sources]
        val_names = [n for n, _ in self.val]
        todo = [k for k in range(len(weights))
                if not _finished(trial_dir(root, k), self.proxy.steps, val_names)]
        for k in todo:
            write_trial_config(trial_dir(root, k), self.proxy, self.sources, weights[k],
                               self.val)
        codes: dict[int, int] = {}
        if todo:
            self.log(f"{len(todo)} of {len(weights)} {what}(s) to run ({len(weights) - len(todo)}"
                     " done before)" + (f", {self.jobs} at once" if self.executor == "local"
                                        else ""))
            threads = self.proxy.threads
            if self.executor == "local":
                codes = run_local(todo, root, python_for_trials(), self.jobs, self.log)
            elif self.executor == "slurm":
                codes = run_slurm(todo, root, python_for_trials(), threads, self.log)
            else:
                codes = run_ray(todo, root, self.jobs, threads, self.address, self.log)
        rows, failed = [], {}
        for k, w in enumerate(weights):
            where = trial_dir(root, k)
            if codes.get(k, 0) != 0:
                failed[k] = f"exit {codes[k]}: {failure_line(where)}"
                continue
            try:
                rows.append(_trial_row(where, k, dict(zip(names, w, strict=True)),
                                       self.proxy.steps, val_names))
            except DataError as e:
                failed[k] = f"{e}: {failure_line(where)}"
        for k, why in failed.items():
            self.log(f"{what} {k} left out: {why} (see {trial_dir(root, k)}/train.log)")
        return rows, failed


def search(sources: list[Source], val: list[tuple[str, str]], proxy: Proxy, out: str,
           lo, hi, trials: int, seed: int, jobs: int, objective: str,
           log: Callable[[str], None], executor: str = "local", verify: int = 0,
           address: str | None = None) -> Outcome:
    """Plan (or reload) the trials, run the missing ones, score, fit and propose; with
    verify, train the proposal and verify - 1 mixtures near it, and score them too."""
    import numpy as np

    if executor not in EXECUTORS:
        raise UsageError(f"--executor: expected {', '.join(EXECUTORS)}, got {executor!r}")
    names = [s.name for s in sources]
    obj = parse_objective(objective, [n for n, _ in val])
    plan = load_plan(out, make_plan(sources, val, proxy, lo, hi, trials, seed))
    runs = Runs(sources, val, proxy, executor, jobs, log, address)
    rows, failed = runs.score(os.path.join(out, "trials"), plan["weights"])
    if not rows:
        raise LlmtkError(f"every trial failed; the first: trial {min(failed)}: "
                         f"{failed[min(failed)]}")
    for row in rows:
        row["objective"] = _objective(row, obj)
    W = np.array([[row["weights"][n] for n in names] for row in rows])
    W /= W.sum(axis=1, keepdims=True)
    Y = np.array([[row[f"val/{n}/loss"] for n in obj] for row in rows])
    if len(rows) < len(names) + 2:  # the log-linear law has n + 1 free parameters
        log(f"{len(rows)} scored trial(s): too few to fit {len(names)} sources (at least "
            f"{len(names) + 2}); no proposal")
        return Outcome(rows, failed, None, {}, None)
    from llmtk.mix.fit import choose, minimise, models

    candidates, left_out = models(len(rows))
    if left_out:
        log(left_out)
    fit = choose(W, Y, np.array(list(obj.values())), candidates)
    for row, p in zip(rows, fit.held_out, strict=True):
        row["predicted"] = float(p)
    best = minimise(fit.model, np.asarray(lo), np.asarray(hi), seed, natural_shares(sources))
    proposal = {n: round(float(x), 4) for n, x in zip(names, best, strict=True)}
    outcome = Outcome(rows, failed, fit, proposal,
                      float(fit.model.predict(best[None])[0]))
    if verify:
        outcome.verified = _verify(runs, out, fit, proposal, lo, hi, verify, seed, obj)
    return outcome


def _objective(row: dict, obj: dict[str, float]) -> float:
    return sum(w * row[f"val/{n}/loss"] for n, w in obj.items())


VERIFY_SPREAD = 0.05  # how far (per weight, before projection) the points near the proposal lie


def _verify(runs: Runs, out: str, fit, proposal: dict, lo, hi, n: int, seed: int,
            obj: dict) -> list[dict]:
    """Train the proposal and n - 1 mixtures near it; each row with its prediction.
    A folder whose mixture is not this proposal's (the fit changed) is trained again."""
    import shutil

    import numpy as np

    from llmtk.mix.simplex import project

    names = list(proposal)
    center = np.array([proposal[n_] for n_ in names])
    rng = np.random.default_rng(seed + 1)
    near = project(center + rng.normal(0, VERIFY_SPREAD, (n - 1, len(names))), lo, hi) \
        if n > 1 else np.zeros((0, len(names)))
    points = [[round(float(x), 4) for x in w] for w in [center, *near]]
    root = os.path.join(out, "verify")
    for k, w in enumerate(points):
        where = trial_dir(root, k)
        trained = _mixture_of(where)
        if trained is not None and trained != {n_: x for n_, x in zip(names, w, strict=True)
                                                if x > 0}:
            shutil.rmtree(where)
    rows, _ = runs.score(root, points, what="verify run")
    for row in rows:
        row["objective"] = _objective(row, obj)
        W = np.array([[row["weights"][n_] for n_ in names]])
        row["predicted"] = float(fit.model.predict(W / W.sum())[0])
        row["proposal"] = row["trial"] == 0
    return rows


def _mixture_of(where: str) -> dict[str, float] | None:
    """{source: weight} that a folder's train.toml trains (None: no such file)."""
    import tomllib

    try:
        with open(os.path.join(where, "train.toml"), "rb") as f:
            data = tomllib.load(f)["data"]
    except (OSError, tomllib.TOMLDecodeError, KeyError):
        return None
    return {d.split("=", 1)[0]: float(d.rsplit(":", 1)[1]) for d in data}


def _finished(where: str, steps: int, val_names: list[str]) -> bool:
    """Scored before (trial.json), or trained to its last evaluation (by any engine)."""
    if os.path.exists(os.path.join(where, TRIAL_FILE)):
        return True
    try:
        score_trial(where, steps, val_names)
    except DataError:
        return False
    return True


def _trial_row(where: str, k: int, weights: dict, steps: int, val_names: list[str]) -> dict:
    """The trial's scores: read from its metrics.jsonl once (then kept in trial.json), in
    one key order whichever way they were read (trials.jsonl is the same bytes on a rerun)."""
    path = os.path.join(where, TRIAL_FILE)
    if os.path.exists(path):
        with open(path, "rb") as f:
            saved = orjson.loads(f.read())
        losses = {n: saved[f"val/{n}/loss"] for n in val_names}
    else:
        losses = score_trial(where, steps, val_names)
    row = {"trial": k, "weights": weights,
           "val_loss": sum(losses.values()) / len(losses),
           **{f"val/{n}/loss": v for n, v in losses.items()}}
    if not os.path.exists(path):
        write_json_atomically(path, row)
    return row


def write_outputs(out: str, sources: list[Source], val: list[tuple[str, str]],
                  outcome: Outcome, objective: str, plot: bool = True) -> list[str]:
    """trials.jsonl, proposal.toml (when there is a proposal) and search.png; their paths."""
    written = [os.path.join(out, "trials.jsonl")]
    with atomic_file(written[0]) as f:
        for row in outcome.rows:
            f.write(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE))
    if outcome.verified:
        written.append(os.path.join(out, "verify.jsonl"))
        with atomic_file(written[-1]) as f:
            for row in outcome.verified:
                f.write(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE))
    if outcome.proposal:
        written.append(os.path.join(out, "proposal.toml"))
        with atomic_file(written[-1]) as f:
            f.write(proposal_toml(sources, val, outcome, objective).encode())
    if plot and outcome.fit is not None:
        written.append(os.path.join(out, "search.png"))
        draw(written[-1], [s.name for s in sources], outcome)
    return written


def _toml_string(s: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped; other
    characters as they are (TOML is UTF-8)."""
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def proposal_toml(sources: list[Source], val: list[tuple[str, str]], outcome: Outcome,
                  objective: str) -> str:
    fit = outcome.fit
    score = fit.scores[fit.name]
    best = min(outcome.rows, key=lambda r: r["objective"])
    lines = [
        "# llmtk mix search: the mixture with the lowest predicted objective "
        f"({objective} validation loss)",
        f"# fit: {fit.name}, leave-one-out Spearman {score['spearman']:.3f}, RMSE "
        f"{score['loo_rmse']:.4f} over {len(outcome.rows)} trials",
        f"# predicted objective {outcome.predicted:.4f}; best trial {best['trial']}: "
        f"{best['objective']:.4f}",
        "# use: llmtk train --config THIS --out RUN (plus the model's flags), or copy it",
        "data = [",
    ]
    for s in sources:
        w = outcome.proposal[s.name]
        entry = _toml_string(f"{s.name}={s.path}:{w:g}")
        lines.append(f"  {entry}," if w > 0 else f"  # {entry} (weight 0: left out)")
    lines.append("]")
    lines.append("val_data = [" + ", ".join(_toml_string(f"{n}={p}") for n, p in val) + "]")
    return "\n".join(lines) + "\n"


def draw(path: str, names: list[str], outcome: Outcome) -> None:
    """Left: each trial's held-out prediction against its measured objective (on the
    diagonal when the fit ranks and predicts trials it has not seen). Right: the measured
    objective against each source's weight, the proposal's weights marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = outcome.rows
    measured = [r["objective"] for r in rows]
    predicted = [r["predicted"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    left.scatter(measured, predicted, s=18)
    low, high = min(measured + predicted), max(measured + predicted)
    left.plot([low, high], [low, high], color="grey", lw=0.8)
    score = outcome.fit.scores[outcome.fit.name]
    left.set(xlabel="measured objective", ylabel="predicted (trial held out)",
             title=f"{outcome.fit.name}: Spearman {score['spearman']:.2f}")
    for i, name in enumerate(names):
        color = f"C{i % 10}"
        right.scatter([r["weights"][name] for r in rows], measured, s=14, color=color,
                      label=name)
        right.axvline(outcome.proposal[name], color=color, ls="--", lw=0.8)
    right.axhline(outcome.predicted, color="black", ls=":", lw=0.8)
    right.set(xlabel="weight (dashed: the proposal; dotted: its prediction)",
              ylabel="measured objective",
              title="objective over the weights")
    right.legend(fontsize=8)
    fig.tight_layout()
    with atomic_file(path) as f:
        fig.savefig(f, format="png", dpi=110)
    plt.close(fig)
