"""Every shell block of docs/cluster.md and docs/tutorial.md, run as written.

The blocks of a page run in order, in one bash with `set -e`, in a scratch folder laid
out as the page expects (crawl/ and evals/, the repository's bin/, a demo/ folder), with
`llmtk` this checkout's, a stand-in `sbatch` that runs an array's tasks on the spot
(tests/test_cluster.py), and stand-ins for `pip` and `ray` (no network, no Ray cluster
to start). Only sizes change, each by a rule of SCALED: task counts become 2, the Ray
executor runs the same tasks locally, and the tutorial trains 2 steps on 10k tokens of a
118-document slice of the demo sample.
"""

import os
import re
import subprocess

import orjson
import pytest
import zstandard

from tests.test_cluster import FAKE_SBATCH, _crawl
from tests.util import ROOT, env, llmtk, llmtk_command

SCALED = [
    (r"--array=0-\d+", "--array=0-1"),
    (r"--tasks \d+", "--tasks 2"),
    (r"\b((?:BUCKET_)?TASKS)=\d+", r"\1=2"),
    (r"--executor ray --address auto", "--executor local"),
    (r"--steps 300\b", "--steps 2"),
    (r"--tokens 300k\b", "--tokens 10k"),
]
TASK_0_OF_1 = {"{shard}": "0/1", "{k}": "00000", "{n}": "1", "{cpus}": "1"}
SAMPLE_EVERY = 20  # the tutorial runs on every 20th document of demo/sample.jsonl.zst
STUBS = {
    "sbatch": FAKE_SBATCH,
    "llmtk": f'#!/bin/bash\nexec {llmtk_command()} "$@"\n',
    "pip": '#!/bin/bash\necho "pip (stand-in): $*"\n',
    "ray": '#!/bin/bash\necho "ray (stand-in): $*"\n',
}


def shell_blocks(page: str) -> list[str]:
    text = (ROOT / "docs" / page).read_text()
    return re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M)


def scaled(block: str) -> str:
    for pattern, replacement in SCALED:
        block = re.sub(pattern, replacement, block)
    if "{shard}" in block and not re.search(r"\bsbatch\b|llmtk run", block):
        # one task's command, as the array script would run it: task 0 of 1
        for placeholder, value in TASK_0_OF_1.items():
            block = block.replace(placeholder, value)
    return block


def page_runner(page: str, workspace):
    """run(i): block i of the page (0-based) in bash with `set -e` in the workspace."""
    fake = workspace / ".fakebin"
    fake.mkdir()
    for name, script in STUBS.items():
        (fake / name).write_text(script)
        (fake / name).chmod(0o755)
    (workspace / "bin").symlink_to(ROOT / "bin")
    blocks = shell_blocks(page)
    run_env = env(PATH=f"{fake}:{os.environ['PATH']}", SBATCH_CPUS="1",
                  SBATCH_LOG=str(workspace / ".sbatch.log"))

    def run(i: int, cwd=None) -> bytes:
        r = subprocess.run(["bash", "-c", "set -e\n" + scaled(blocks[i])], capture_output=True,
                           cwd=cwd or workspace, env=run_env)
        assert r.returncode == 0, f"{page} block {i + 1}:\n{blocks[i]}\n{r.stderr[-3000:]}"
        return r.stderr

    return run, len(blocks)


def _files(folder) -> dict:
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


def _zstd_concat(paths) -> bytes:
    return b"".join(zstandard.ZstdDecompressor().decompress(p.read_bytes(),
                                                           max_output_size=1 << 30)
                    for p in sorted(paths))


@pytest.mark.integration  # the Slurm scripts
def test_every_shell_block_of_the_cluster_page_runs(tmp_path):
    """The Slurm array, the whole pipeline script and the Ray commands of docs/cluster.md:
    the pipeline's output is the single machine's, and finished tasks are skipped."""
    crawl, ev = _crawl(tmp_path)
    (tmp_path / "evals").mkdir()
    ev.rename(tmp_path / "evals" / "eval.jsonl")
    run, blocks = page_runner("cluster.md", tmp_path)
    texts = shell_blocks("cluster.md")
    assert blocks == 5
    web_archives, array, pipeline, ray, tokens = (
        next(i for i, b in enumerate(texts) if b.startswith(w))
        for w in ("llmtk clean crawl/", "sbatch --array", "TASKS=", "pip install",
                  "llmtk train tokenizer"))
    web = _web_archives(tmp_path / "web")
    run(web_archives, cwd=web)  # llmtk clean crawl/*.warc.gz --shard 0/1 ... (own folder)
    docs = zstandard.ZstdDecompressor().stream_reader(
        (web / "work" / "clean" / "00000.jsonl.zst").open("rb")).read().splitlines()
    assert [orjson.loads(d)["url"] for d in docs] == ["http://example.org/kept"]
    work = tmp_path / "work"
    run(array)  # sbatch --array=0-1 bin/llmtk-array.sbatch --tasks 2 llmtk clean ... (no work/)
    cleaned = _files(work / "clean")
    assert len(cleaned) == 4  # 2 outputs, 2 markers
    err = run(pipeline)  # bin/llmtk-pipeline.sh: nine arrays, each after the one before
    log = (tmp_path / ".sbatch.log").read_text().splitlines()[1:]
    assert [line.split(" ", 1)[0] for line in log] == [
        "", *(f"afterok:job{i}" for i in range(2, 10))]
    assert err.count(b"skipping") == 2  # its clean tasks were done by the array above
    buckets = _files(work / "buckets")
    run(ray)  # Ray (here: llmtk run --executor local): clean and buckets, done already
    assert _files(work / "clean") == cleaned and _files(work / "buckets") == buckets
    # The single machine: clean | dedup | contam-check --drop, then mix.
    single = tmp_path / "single"
    llmtk("clean", "crawl", "-o", "single/clean.jsonl", "-q", check=True, cwd=tmp_path)
    llmtk("dedup", "single/clean.jsonl", "-o", "single/dedup.jsonl", "-q", check=True,
          cwd=tmp_path)
    r = llmtk("contam-check", "single/dedup.jsonl", "--eval", "evals", "--drop", "-o",
              "single/decontam.jsonl", "--report", "single/report.json", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert _zstd_concat((work / "decontam").glob("*.jsonl.zst")) == (
        single / "decontam.jsonl").read_bytes()
    assert orjson.loads((work / "reports" / "contam.json").read_bytes()) == orjson.loads(
        (single / "report.json").read_bytes())
    mix = llmtk("mix", "--source", f"web={single / 'decontam.jsonl'}", "-q", check=True)
    assert sorted(_zstd_concat((work / "mix").glob("*.jsonl.zst")).splitlines()) == sorted(
        mix.stdout.splitlines())
    assert (work / "stats" / "clean.json").exists()
    # Tokenize arrays (web on `llmtk run`, code as a Slurm array through the stand-in
    # sbatch) and a trial on the blend of the two token datasets.
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "a.jsonl").write_bytes(b"".join(
        orjson.dumps({"id": f"c{i}", "text": f"def f{i}(x):\n    return x * {i} + {i % 7}\n"},
                     option=orjson.OPT_APPEND_NEWLINE) for i in range(300)))
    run(tokens)
    assert " llmtk train tokenize code/ " in (tmp_path / ".sbatch.log").read_text()
    for source in ("web", "code"):
        assert sorted(p.name for p in (tmp_path / "tokens" / source).glob("*.done")) == [
            "part-00000-of-00002.done", "part-00001-of-00002.done"]
    rows = [orjson.loads(line) for line in
            (tmp_path / "runs" / "trial" / "metrics.jsonl").read_bytes().splitlines()]
    train_rows = [r for r in rows if "loss" in r]
    assert train_rows[-1]["step"] == 2 and all(
        r["tokens/web"] + r["tokens/code"] == r["tokens"] for r in train_rows)


def _web_archives(folder):
    """crawl/c.warc.gz (three pages of one English article: one kept, one on a blocked
    domain, one with a banned word in its URL) and the lists the WARC example names."""
    from tests.test_clean import ARTICLES
    from tests.warc_fixtures import members, page, record

    text = next(a["text"] for a in ARTICLES if a["id"] == "article-en")
    urls = ["http://example.org/kept", "http://blocked.example/x", "http://example.org/casino"]
    (folder / "crawl").mkdir(parents=True)
    (folder / "crawl" / "c.warc.gz").write_bytes(members(
        [record("response", url, page("Rivers", text).encode()) for url in urls])[0])
    (folder / "lists").mkdir()
    (folder / "lists" / "adult-domains.txt").write_text("blocked.example\n")
    (folder / "lists" / "banned-words.txt").write_text("casino\n")
    return folder


def test_every_shell_block_of_the_tutorial_runs(tmp_path):
    demo = tmp_path / "demo"
    demo.mkdir()
    sample = zstandard.ZstdDecompressor().stream_reader(
        (ROOT / "demo" / "sample.jsonl.zst").open("rb")).read().splitlines(keepends=True)
    (demo / "sample.jsonl.zst").write_bytes(
        zstandard.ZstdCompressor().compress(b"".join(sample[::SAMPLE_EVERY])))
    (demo / "eval.jsonl").write_bytes((ROOT / "demo" / "eval.jsonl").read_bytes())
    run, blocks = page_runner("tutorial.md", tmp_path)
    for i in range(blocks):
        run(i)
    out = tmp_path / "demo-out"
    assert (out / "loss.png").read_bytes()[:4] == b"\x89PNG"
    assert '"val_loss"' in (out / "run" / "metrics.jsonl").read_text()
