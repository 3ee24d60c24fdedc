"""Cluster entry points: the Slurm array scripts in bin/ (on a fake sbatch that runs the
array here, task by task) and `llmtk run` on a local Ray instance."""

import os
import stat
import subprocess
import sys

import orjson
import pytest
import zstandard

from tests.test_clean import jsonl, mixed_corpus
from tests.util import ROOT, env, llmtk, llmtk_command

ARRAY = ROOT / "bin" / "llmtk-array.sbatch"
PIPELINE = ROOT / "bin" / "llmtk-pipeline.sh"

# A stand-in for sbatch: runs every task of the array now, in order, with the Slurm
# variables set, and fails like afterok would when a task fails; prints a job id.
FAKE_SBATCH = r"""#!/bin/bash
set -u
array="" dep=""
while [[ $1 == --* ]]; do
  case $1 in
    --array=*) array=${1#--array=} ;;
    --dependency=*) dep=${1#--dependency=} ;;
  esac
  shift
done
echo "$dep $*" >> "$SBATCH_LOG"
count=$(( ${array#*-} + 1 ))
for ((i = 0; i < count; i++)); do
  SLURM_ARRAY_TASK_ID=$i SLURM_ARRAY_TASK_MIN=0 SLURM_ARRAY_TASK_COUNT=$count bash "$@" \
    >&2 || exit 1
done
n=$(wc -l < "$SBATCH_LOG")
echo "job$n"
"""


def test_array_script_turns_the_task_id_into_a_shard():
    r = subprocess.run(["bash", ARRAY, "echo", "--shard", "{shard}", "-o", "out/{k}.jsonl",
                        "{n}"], capture_output=True,
                       env=env(SLURM_ARRAY_TASK_ID="12", SLURM_ARRAY_TASK_MIN="10",
                               SLURM_ARRAY_TASK_COUNT="5"))
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"--shard 2/5 -o out/00002.jsonl 5\n"
    r = subprocess.run(["bash", ARRAY, "echo"], capture_output=True, env=env())
    assert r.returncode != 0 and b"SLURM_ARRAY_TASK_ID" in r.stderr


def _crawl(tmp_path):
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


@pytest.mark.slow
def test_pipeline_on_slurm_equals_the_single_machine_pipeline(tmp_path):
    crawl, ev = _crawl(tmp_path)
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    sbatch = bindir / "sbatch"
    sbatch.write_text(FAKE_SBATCH)
    sbatch.chmod(sbatch.stat().st_mode | stat.S_IEXEC)
    work = tmp_path / "work"
    run_env = env(PATH=f"{bindir}:{os.environ['PATH']}", SBATCH_LOG=str(tmp_path / "log"),
                  TASKS="3", BUCKET_TASKS="4", LLMTK=llmtk_command())
    r = subprocess.run(["bash", PIPELINE, crawl, work, ev], capture_output=True, env=run_env,
                       cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    deps = [line.split(" ", 1)[0] for line in (tmp_path / "log").read_text().splitlines()]
    assert deps == ["", *(f"afterok:job{i}" for i in range(1, 9))]
    # The single-machine pipeline.
    single = tmp_path / "single"
    single.mkdir()
    llmtk("clean", crawl, "-o", single / "clean.jsonl", "-q", check=True)
    llmtk("dedup", single / "clean.jsonl", "-o", single / "dedup.jsonl", "-q", check=True)
    r = llmtk("contam-check", single / "dedup.jsonl", "--eval", ev, "--drop", "-o",
              single / "decontam.jsonl", "--report", single / "report.json", "-q")
    assert r.returncode == 0, r.stderr
    staged = b"".join(zstandard.ZstdDecompressor().decompress(p.read_bytes(),
                                                             max_output_size=1 << 30)
                      for p in sorted((work / "decontam").glob("*.jsonl.zst")))
    assert staged == (single / "decontam.jsonl").read_bytes()
    assert orjson.loads((work / "reports" / "contam.json").read_bytes()) == orjson.loads(
        (single / "report.json").read_bytes())
    mix = llmtk("mix", "--source", f"web={single / 'decontam.jsonl'}", "-q", check=True)
    staged_mix = b"".join(zstandard.ZstdDecompressor().decompress(p.read_bytes(),
                                                                 max_output_size=1 << 30)
                          for p in sorted((work / "mix").glob("*.jsonl.zst")))
    assert sorted(staged_mix.splitlines()) == sorted(mix.stdout.splitlines())
    # A rerun skips every finished task and leaves the outputs as they are.
    before = {p: p.stat().st_mtime_ns for p in work.rglob("*.jsonl.zst")}
    r = subprocess.run(["bash", PIPELINE, crawl, work, ev], capture_output=True, env=run_env,
                       cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stderr.count(b"skipping") >= 3 * 5 + 4
    assert before == {p: p.stat().st_mtime_ns for p in work.rglob("*.jsonl.zst")}


def _task_command(tmp_path, d, out):
    """bash -c: task 1 fails on its first try (it leaves a flag), then runs `llmtk cat`."""
    flag = tmp_path / "failed-once"
    script = (f'if [ {{k}} = 00001 ] && [ ! -e {flag} ]; then touch {flag}; exit 1; fi; '
              f'exec {sys.executable} -m llmtk cat {d} --shard {{shard}} -o {out}/{{k}}.jsonl -q')
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
    command, flag = _task_command(tmp_path, d, out)
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
