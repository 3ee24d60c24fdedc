"""Pipelines that fail loudly (docs/io.md): a tool cannot know that the one before it in a
pipe died, so every documented pipeline runs under pipefail, and the documented Makefile
pattern leaves no target when any tool of a recipe fails."""

import re
import shutil
import subprocess
import sys

import pytest

from tests.util import ROOT, env

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```(\w*)\n(.*?)```", re.S)
PIPE = re.compile(r"(?<!\|)\|(?!\|)")  # a pipe, not `||`


def _blocks(lang: str):
    for page in PAGES:
        text = page.read_text()
        for m in BLOCK.finditer(text):
            if m.group(1) == lang:
                yield f"{page.name}:{text[:m.start()].count(chr(10)) + 1}", m.group(2)


def test_every_documented_pipeline_runs_under_pipefail():
    """A shell example that pipes llmtk into or out of something sets pipefail first."""
    def pipes_llmtk(block: str) -> bool:
        commands = block.replace("\\\n", " ").splitlines()  # continuation lines joined
        return any(PIPE.search(c.split(" #")[0]) and "llmtk" in c for c in commands)

    bare = [where for where, block in _blocks("sh") if pipes_llmtk(block)
            and "set -o pipefail" not in block and "set -euo pipefail" not in block]
    assert not bare, f"pipelines without `set -o pipefail`: {bare}"


def _documented_makefile() -> str:
    (makefile,) = [block for _, block in _blocks("make") if ".DELETE_ON_ERROR" in block]
    return makefile


def _make(tmp_path, makefile: str) -> subprocess.CompletedProcess:
    """make in a folder holding MAKEFILE, a crawl whose zstd stream is cut short (clean
    fails on it after writing what it read) and `llmtk` on PATH."""
    import zstandard

    lines = b"".join(b'{"text": "document %d has words enough to read"}\n' % i
                     for i in range(2000))
    packed = zstandard.ZstdCompressor().compress(lines)
    (tmp_path / "crawl.jsonl.zst").write_bytes(packed[:len(packed) * 2 // 3])
    (tmp_path / "Makefile").write_text(makefile)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "llmtk").write_text(f'#!/bin/sh\nexec {sys.executable} -m llmtk "$@"\n')
    (bin_dir / "llmtk").chmod(0o755)
    e = env(PATH=f"{bin_dir}:{env()['PATH']}", LLMTK_TEST_FORKSERVER="0")
    return subprocess.run(["make", "-s"], cwd=tmp_path, env=e, capture_output=True)


@pytest.mark.integration
@pytest.mark.skipif(not shutil.which("make") or not shutil.which("bash"),
                    reason="needs make and bash")
def test_the_documented_makefile_leaves_no_target_when_upstream_dies(tmp_path):
    documented = _documented_makefile()
    r = _make(tmp_path, documented)
    assert r.returncode != 0
    assert b"truncated" in r.stderr  # clean said why it stopped
    assert not (tmp_path / "web.jsonl.zst").exists(), r.stderr.decode()

    # The hazard it guards against: the same recipe with make's defaults (sh, no pipefail)
    # succeeds, and dedup commits what reached it as a finished target.
    plain = "\n".join(line for line in documented.splitlines()
                      if not line.startswith(("SHELL", ".SHELLFLAGS", ".DELETE_ON_ERROR")))
    r = _make(tmp_path / "", plain + "\n")
    assert r.returncode == 0, r.stderr.decode()
    assert (tmp_path / "web.jsonl.zst").exists()
