"""Progress in a pipeline: one stage draws on the shared terminal at a time, and every
summary arrives as one block. Run under a real pseudo-terminal."""

import os
import pty
import re
import subprocess
import sys
import time

import pytest

from llmtk.io.progress import TerminalClaim
from tests.util import ROOT, env, llmtk_command


@pytest.mark.integration
def test_one_claim_per_terminal_until_released():
    master, slave = pty.openpty()
    try:
        a, b = TerminalClaim(slave), TerminalClaim(slave)
        assert a.try_claim() and a.try_claim()  # holding it: still ours
        assert not b.try_claim()
        a.release()
        assert b.try_claim()
        b.release()
    finally:
        os.close(master)
        os.close(slave)


def test_not_a_terminal_is_never_claimed(tmp_path):
    with open(tmp_path / "f", "w") as f:
        assert not TerminalClaim(f.fileno()).try_claim()


PRODUCER = """
import json, random, sys, time
rng = random.Random(0)
words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(6))
         for _ in range(5000)]
# ~6 MB of distinct documents (no near-duplicates) in bursts over ~2 s: enough that
# every stage's 1 MiB output buffer fills and the later stages have work while it runs
for burst in range(24):
    lines = []
    for i in range(burst * 800, (burst + 1) * 800):
        text = " ".join(rng.choice(words) for _ in range(40))
        lines.append(json.dumps({"id": i, "text": text}))
    sys.stdout.write("\\n".join(lines) + "\\n")
    sys.stdout.flush()
    time.sleep(0.05)
"""


@pytest.mark.integration
@pytest.mark.slow
def test_three_stage_pipeline_draws_one_progress_line_at_a_time(tmp_path):
    ev = tmp_path / "ev.jsonl"
    ev.write_text('{"text": "an evaluation item that is nowhere in the training data at all"}\n')
    out = tmp_path / "out.jsonl"
    producer = tmp_path / "producer.py"
    producer.write_text(PRODUCER)
    llmtk = llmtk_command()
    script = (f"'{sys.executable}' {producer} | {llmtk} cat | {llmtk} dedup "
              f"| {llmtk} contam-check -e {ev} > {out}")
    master, slave = pty.openpty()
    p = subprocess.Popen(["bash", "-c", "set -o pipefail; " + script], stdin=subprocess.DEVNULL,
                         stderr=slave, stdout=subprocess.DEVNULL, cwd=ROOT,
                         env=env(COLUMNS="100", TERM="xterm", NO_COLOR="1"))
    os.close(slave)
    seen = b""
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every writer has closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert p.wait(timeout=60) == 0, seen.decode(errors="replace")
    text = seen.decode(errors="replace")
    assert len(out.read_text().splitlines()) == 24 * 800

    # who drew progress, in order: each stage's drawing is one contiguous run
    drawers = re.findall(r"llmtk (cat|dedup|contam-check): (?:\d+% · )?[\d,]+ records", text)
    assert drawers, text
    runs = [d for i, d in enumerate(drawers) if i == 0 or drawers[i - 1] != d]
    assert len(runs) == len(set(runs)), runs

    # every summary is one block: its title, then its rows, no other tool in between
    for tool in ("cat", "dedup", "contam-check"):
        start = text.index(f"llmtk {tool}  ") if f"llmtk {tool}  " in text else None
        if start is None:  # contam-check prints its own report
            continue
        block = text[start:text.index("time", start)]
        others = {"cat", "dedup", "contam-check"} - {tool}
        assert not any(f"llmtk {o}" in block for o in others), block


def test_progress_line_shows_share_and_time_left_from_bytes_on_disk(tmp_path):
    """A tool reading files of known size shows how far it is and how long is left."""
    from llmtk.io.progress import Progress, clock
    from llmtk.io.summary import Summary

    summary = Summary("clean")
    summary.records_in, summary.records_out, summary.bytes_in = 1_000, 900, 4_000_000
    p = Progress("clean", summary, total_bytes=2_000_000)  # stderr is no terminal here
    assert p.line(summary.started + 2.0).startswith("llmtk clean: 1,000 records")  # no position
    p.update(1 << 20, 500_000)  # a quarter read in 2 s: 6 s left
    line = p.line(summary.started + 2.0)
    assert line.startswith("llmtk clean: 25% · 1,000 records, 4.0 MB (2.0 MB/s), 900 out")
    assert line.endswith("· 0:06 left")
    p.update(1 << 20, None)  # inside a Parquet file: the last known share stays
    assert "25%" in p.line(summary.started + 2.0)
    assert [clock(5.2), clock(754), clock(3 * 3600 + 121)] == ["0:05", "12:34", "3:02:01"]
    assert len(p.line(summary.started + 2.0)) <= 80


def test_reader_reports_bytes_on_disk_across_files_and_none_for_a_pipe(tmp_path):
    import zstandard

    from llmtk.io.reader import read_docs

    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl.zst"
    a.write_bytes(b'{"text": "x"}\n' * 10)
    b.write_bytes(zstandard.ZstdCompressor().compress(b'{"text": "y"}\n' * 10))
    seen = []
    docs = list(read_docs([str(a), str(b)], on_bytes=lambda size, done: seen.append(done)))
    assert len(docs) == 20
    assert seen[-1] == a.stat().st_size + b.stat().st_size  # the end of the last file
    assert seen[0] == a.stat().st_size
    r, w = os.pipe()
    os.write(w, b'{"text": "z"}\n')
    os.close(w)
    fifo_seen = []
    list(read_docs([f"/dev/fd/{r}"], on_bytes=lambda size, done: fifo_seen.append(done)))
    os.close(r)
    assert fifo_seen == [None]
