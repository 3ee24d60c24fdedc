"""Cluster entry points: the Slurm array scripts in bin/ (on a fake sbatch that runs the
array here, task by task) and `llmtk run` on a local Ray instance."""

import os
import stat
import subprocess
import sys

import pytest

from tests.test_clean import jsonl, mixed_corpus
from tests.util import ROOT, env, llmtk, llmtk_command

ARRAY = ROOT / "bin" / "llmtk-array.sbatch"
PIPELINE = ROOT / "bin" / "llmtk-pipeline.sh"

# A stand-in for sbatch: runs every task of the array now, in order, with the variables
# Slurm sets (an --array=2 resubmission gets MIN=2 and COUNT=1, as on Slurm;
# SLURM_CPUS_PER_TASK from --cpus-per-task or the script's #SBATCH line), and fails like
# afterok would when a task fails; prints a job id. A job without --array is only logged.
FAKE_SBATCH = r"""#!/bin/bash
set -u
array="" dep="" cpus=""
while [[ $1 == --* ]]; do
  case $1 in
    --array=*) array=${1#--array=} ;;
    --dependency=*) dep=${1#--dependency=} ;;
    --cpus-per-task=*) cpus=${1#--cpus-per-task=} ;;
  esac
  shift
done
echo "$dep $*" >> "$SBATCH_LOG"
[ -n "$cpus" ] || cpus=$(sed -n 's/^#SBATCH --cpus-per-task=//p' "$1")
cpus=${SBATCH_CPUS:-$cpus}  # a test's override: a few CPUs in place of the allocation
ids=()
IFS=, read -ra parts <<< "${array%%%*}"
for p in "${parts[@]}"; do
  if [[ $p == *-* ]]; then ids+=($(seq "${p%-*}" "${p#*-}")); else ids+=("$p"); fi
done
min=$(printf '%s\n' "${ids[@]}" | sort -n | head -n 1)
for i in "${ids[@]}"; do
  SLURM_ARRAY_TASK_ID=$i SLURM_ARRAY_TASK_MIN=$min SLURM_ARRAY_TASK_COUNT=${#ids[@]} \
    SLURM_CPUS_PER_TASK=${cpus:-1} bash "$@" >&2 || exit 1
done
n=$(wc -l < "$SBATCH_LOG")
echo "job$n"
"""


def _fake_sbatch(tmp_path, base: dict | None = None) -> dict:
    """The environment of a script that calls `sbatch`: the stand-in first on PATH."""
    bindir = tmp_path / "fakebin"
    bindir.mkdir(exist_ok=True)
    sbatch = bindir / "sbatch"
    sbatch.write_text(FAKE_SBATCH)
    sbatch.chmod(sbatch.stat().st_mode | stat.S_IEXEC)
    return {**(os.environ if base is None else base), "PATH": f"{bindir}:{os.environ['PATH']}",
            "SBATCH_LOG": str(tmp_path / "log")}


@pytest.mark.integration
def test_array_script_turns_the_task_id_into_a_shard():
    def array(*args, **slurm):
        return subprocess.run(["bash", ARRAY, *args], capture_output=True,
                              env={**os.environ, **slurm})

    # K is the task id itself, N is --tasks: the array's range (MIN, COUNT) plays no part.
    r = array("--tasks", "16", "echo", "--shard", "{shard}", "-o", "out/{k}.jsonl", "{n}",
              "-j", "{cpus}", SLURM_ARRAY_TASK_ID="12", SLURM_ARRAY_TASK_MIN="12",
              SLURM_ARRAY_TASK_COUNT="1", SLURM_CPUS_PER_TASK="6")
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"--shard 12/16 -o out/00012.jsonl 16 -j 6\n"
    for args, slurm, message in [
            (["echo"], {"SLURM_ARRAY_TASK_ID": "1"}, b"give the task count first: --tasks N"),
            (["--tasks", "4", "echo"], {}, b"SLURM_ARRAY_TASK_ID is unset"),
            (["--tasks", "4", "echo"], {"SLURM_ARRAY_TASK_ID": "4"},
             b"array index 4 is not below --tasks 4 (submit --array=0-3)"),
            (["--tasks", "four", "echo"], {"SLURM_ARRAY_TASK_ID": "1"},
             b"--tasks: expected a positive whole number, got 'four'")]:
        r = array(*args, **slurm)
        assert r.returncode == 2 and r.stdout == b"", (args, r.stderr)
        assert r.stderr.startswith(b"llmtk-array.sbatch: error: ") and message in r.stderr


@pytest.mark.integration
def test_resubmitting_one_index_rewrites_only_that_tasks_output(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    run_env = _fake_sbatch(tmp_path)
    # A task that writes what it was given, and fails if its output is there already.
    task = ["bash", "-c", f"set -o noclobber; echo {{shard}} {{n}} > {out}/{{k}}"]

    def sbatch(array):
        return subprocess.run(["sbatch", f"--array={array}", ARRAY, "--tasks", "3", *task],
                              capture_output=True, env=run_env)

    assert sbatch("0-2").returncode == 0
    assert [p.read_text() for p in sorted(out.iterdir())] == ["0/3 3\n", "1/3 3\n", "2/3 3\n"]
    # Task 2 failed and left nothing. The usual repair resubmits index 2 alone, which Slurm
    # runs with SLURM_ARRAY_TASK_MIN=2 and SLURM_ARRAY_TASK_COUNT=1: still task 2 of 3.
    (out / "00002").unlink()
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()}
    r = sbatch("2")
    assert r.returncode == 0, r.stderr
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()}
    assert after.pop("00002")[0] == b"2/3 3\n"
    assert after == before  # tasks 0 and 1: the same bytes, never rewritten
    # An index past --tasks is refused before anything runs.
    r = sbatch("3")
    assert r.returncode == 1 and b"array index 3 is not below --tasks 3" in r.stderr
    assert len(list(out.iterdir())) == 3


def _crawl(tmp_path):
    """crawl/ (4 files, duplicates among them) and an eval file that leaked into it; the
    pipeline on Slurm runs on these in tests/test_doc_commands.py."""
    d = tmp_path / "crawl"
    d.mkdir()
    corpus = mixed_corpus(80, seed=5)
    corpus += [dict(r, id=f"copy{i}") for i, r in enumerate(corpus[:30])]  # duplicates
    for f in range(4):
        (d / f"c{f}.jsonl").write_bytes(jsonl(corpus[f * 30:(f + 1) * 30]))
    ev = tmp_path / "eval.jsonl"
    kept = [r for r in corpus if len(r["text"]) > 500]
    ev.write_bytes(jsonl([{"id": "e1", "text": " ".join(kept[0]["text"].split()[:40])}]))
    return d, ev


def _task_command(tmp_path, d, out, llmtk_words: str):
    """bash -c: task 1 fails on its first try (it leaves a flag), then runs `llmtk cat`."""
    flag = tmp_path / "failed-once"
    script = (f'if [ {{k}} = 00001 ] && [ ! -e {flag} ]; then touch {flag}; exit 1; fi; '
              f'exec {llmtk_words} cat {d} --shard {{shard}} -o {out}/{{k}}.jsonl -q')
    return ["bash", "-c", script], flag


def _inputs(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    rows = [{"id": i, "text": f"document {i}"} for i in range(300)]
    for f in range(5):
        (d / f"f{f}.jsonl").write_bytes(jsonl(rows[f * 60:(f + 1) * 60]))
    out = tmp_path / "out"
    out.mkdir()
    return d, out


@pytest.mark.parametrize("executor", [
    "local", pytest.param("ray", marks=pytest.mark.slow)])
def test_run_executes_every_task_and_retries_a_failed_one(tmp_path, executor):
    if executor == "ray":
        pytest.importorskip("ray", reason="ray is not installed (pip install 'llmtk[ray]')")
    d, out = _inputs(tmp_path)
    # local: the tasks are the tests' fork-server clients (a real process each, without a
    # fresh interpreter's start-up); Ray's workers start them from their own environment.
    words = llmtk_command() if executor == "local" else f"{sys.executable} -m llmtk"
    command, flag = _task_command(tmp_path, d, out, words)
    r = llmtk("run", "--executor", executor, "--tasks", "3", "--parallel", "2", "--retries", "2",
              "--", *command)
    assert r.returncode == 0, r.stderr[-3000:]
    assert flag.exists()  # task 1 did fail once
    whole = llmtk("cat", d, "-q", check=True).stdout
    assert b"".join((out / f"{k:05d}.jsonl").read_bytes() for k in range(3)) == whole
    assert all((out / f"{k:05d}.jsonl.done").exists() for k in range(3))


def test_run_reports_a_task_that_keeps_failing(tmp_path):
    r = llmtk("run", "--tasks", "2", "--retries", "1", "--", "bash", "-c", "test {k} = 00000")
    assert r.returncode == 1
    assert b"llmtk: error: task 1 of 2 exited with status 1, after 2 tries" in r.stderr
    assert llmtk("run", "--tasks", "2").returncode == 2


def test_run_never_retries_a_usage_error(tmp_path):
    """A task that exits 2 would fail the same way every time: one try, and the tasks not
    started yet are not started."""
    tries = tmp_path / "tries"
    r = llmtk("run", "--tasks", "3", "--retries", "3", "--", "bash", "-c",
              f"echo {{k}} >> {tries}; exit 2", in_process=True)
    assert r.returncode == 2
    assert r.stderr.decode().splitlines() == [
        "llmtk: error: task 0 of 3 exited with status 2 (bad usage; not retried)"]
    assert tries.read_text() == "00000\n"


def test_single_machine_path_never_imports_ray(tmp_path):
    d, out = _inputs(tmp_path)
    probe = ("import sys, runpy; sys.argv = ['llmtk', 'cat', sys.argv[1], '-q', '--shard', "
             "'0/2', '-o', sys.argv[2]]\n"
             "from llmtk.cli import main\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n"
             "sys.stderr.write('RAY=' + str('ray' in sys.modules))")
    r = subprocess.run([sys.executable, "-c", probe, str(d), str(out / "x.jsonl")],
                       capture_output=True, env=env())
    assert r.stderr.endswith(b"RAY=False"), r.stderr


def test_cluster_page_describes_the_plumbing_commands_options():
    import re

    import typer

    from llmtk.cli import app

    text = (ROOT / "docs" / "cluster.md").read_text()
    documented = set(re.findall(r"--[a-z][a-z0-9-]*", text))
    commands = typer.main.get_command(app).commands
    for cmd in (commands["run"], commands["stats"].commands["merge"]):
        options = {o for p in cmd.params for o in getattr(p, "opts", [])
                   if o.startswith("--") and o != "--help"}
        assert options <= documented, sorted(options - documented)


def test_a_finished_task_rerun_with_other_options_is_refused(tmp_path):
    d, out = _inputs(tmp_path)
    task = ["clean", d, "--shard", "0/2", "-o", out / "0.jsonl", "--no-pii"]
    r = llmtk(*task, "--filters", "none", "-q")
    assert r.returncode == 0, r.stderr
    done = (out / "0.jsonl").read_bytes(), (out / "0.jsonl.done").read_bytes()
    # Same options (how much is printed is not one of them): skipped.
    r = llmtk(*task, "--filters", "none")
    assert r.returncode == 0 and b"is done" in r.stderr and b"skipping" in r.stderr
    # Other options that change the output: refused, nothing rewritten.
    r = llmtk(*task[:-1], "--filters", "c4", "--text-field", "text")
    assert r.returncode == 2
    assert r.stderr.decode().splitlines() == [
        f"llmtk: error: {out / '0.jsonl'} was finished with other options (--filters \"c4\" "
        "now, \"none\" then; --pii (not given) now, false then); delete "
        f"{out / '0.jsonl.done'} to redo it with these"]
    assert ((out / "0.jsonl").read_bytes(), (out / "0.jsonl.done").read_bytes()) == done
