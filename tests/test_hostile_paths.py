"""Hostile output paths: nothing lost, nothing overwritten, nobody let in.

Special files are made inside tmp_path (os.mkfifo; a character device with
os.mknod where permitted); no test points an output at the real /dev/null.
Most tests run in this process through llmtk.cli.main (tests/util.invoke); the ones
about fds 0 and 1 (/dev/stdout, closed stdin, process substitution) need real processes.
"""

import errno
import os
import stat
import subprocess
import threading

import orjson
import pytest

from llmtk.errors import LlmtkError
from llmtk.io import expand_inputs
from llmtk.io.atomic import sweep_stale
from llmtk.io.writer import Sink
from tests.util import invoke, llmtk, shell

RECORDS = [{"id": f"d{i}", "text": f"Document number {i} with some words in it."}
           for i in range(40)]


def jsonl(records) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


cli = invoke


def leftovers(*dirs) -> list[str]:
    return [n for d in dirs for n in os.listdir(d) if ".tmp-" in n]


@pytest.fixture
def src(tmp_path):
    p = tmp_path / "in.jsonl"
    p.write_bytes(jsonl(RECORDS))
    return p


def _read_fifo(path, into: list) -> threading.Thread:
    def reader():
        with open(path, "rb") as f:
            into.append(f.read())

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    return t


# -- item 1: special files are written through, links are not replaced -------------------

def test_output_to_a_fifo_is_written_through(tmp_path, src):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    t = _read_fifo(fifo, got)
    code, msg = cli("cat", src, "-o", fifo, "-q")
    t.join(10)
    assert code == 0, msg
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still a FIFO
    assert got == [src.read_bytes()]
    assert leftovers(tmp_path) == []


def test_output_to_a_character_device_is_written_through(tmp_path, src):
    dev = tmp_path / "null"
    try:
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, OSError) as e:
        pytest.skip(f"cannot create a character device here: {e}")
    code, msg = cli("cat", src, "-o", dev, "--stats", dev, "-q")  # /dev/null twice is fine
    assert code == 0, msg
    assert stat.S_ISCHR(os.lstat(dev).st_mode)
    assert leftovers(tmp_path) == []


@pytest.mark.integration
def test_output_dev_stdout_is_stdout_and_not_replaced(tmp_path, src):
    r = llmtk("cat", src, "-o", "/dev/stdout", "-q")
    assert r.returncode == 0, r.stderr
    assert r.stdout == src.read_bytes()
    out = tmp_path / "redirected.jsonl"
    out.write_bytes(b"")
    before = os.stat(out).st_ino
    r = shell(f"llmtk cat {src} --output /dev/stdout -q > {out}")
    assert r.returncode == 0, r.stderr
    assert os.stat(out).st_ino == before and out.read_bytes() == src.read_bytes()


def test_symlink_output_writes_its_target_atomically(tmp_path, src):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "data.jsonl"
    target.write_bytes(b"old\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    code, msg = cli("cat", src, "-o", link, "-q")
    assert code == 0, msg
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes() == src.read_bytes()
    assert leftovers(tmp_path, tmp_path / "real") == []


def test_dangling_symlink_output_creates_its_target(tmp_path, src):
    link = tmp_path / "link.jsonl"
    link.symlink_to(tmp_path / "new.jsonl")
    code, msg = cli("cat", src, "-o", link, "-q")
    assert code == 0, msg
    assert link.is_symlink() and (tmp_path / "new.jsonl").read_bytes() == src.read_bytes()


# -- item 2: an output that is an input or another output is refused, exit 2 -------------

BAD = b'{"text": "first"}\nnot json at all\n'  # reading it would fail with exit 1


def _conflicts(tmp_path):
    """(name, args, the files that must come through unchanged) per way of clobbering."""
    s = tmp_path / "s.jsonl"
    s.write_bytes(BAD)
    link = tmp_path / "link.jsonl"
    link.symlink_to(s)
    hard = tmp_path / "hard.jsonl"
    os.link(s, hard)
    d = tmp_path / "dir"
    d.mkdir()
    (d / "a.jsonl").write_bytes(BAD)
    x = tmp_path / "x.jsonl"
    x.write_bytes(jsonl(RECORDS[:3]))
    out = tmp_path / "out.jsonl"
    return [
        ("clean -o input", ["clean", s, "-o", s], [s]),
        ("cat --stats input", ["cat", s, "--stats", s], [s]),
        ("cat --rejects input", ["cat", s, "--on-error", "reject", "--rejects", s], [s]),
        ("-o = --stats", ["cat", s, "-o", x, "--stats", x], [s]),
        ("-o = --rejects", ["cat", s, "-o", x, "--rejects", f"{tmp_path}/./x.jsonl"], [s]),
        ("-o symlink to input", ["cat", s, "-o", link], [s]),
        ("-o hard link of input", ["cat", s, "-o", hard], [s]),
        ("-o a file of an input folder", ["cat", d, "-o", d / "a.jsonl"], [d / "a.jsonl"]),
        ("contam-check -e X X --drop -o X",
         ["contam-check", "-e", s, s, "--drop", "-o", s], [s]),
        ("contam-check --report = --eval", ["contam-check", "-e", s, x, "--report", s], [s]),
        ("dedup --clusters input", ["dedup", s, "--clusters", s, "-o", out], [s]),
        ("dedup --clusters = -o", ["dedup", s, "--clusters", out, "-o", out], [s]),
        ("dedup filter --clusters input",
         ["dedup", "filter", s, "--index", d, "--clusters", s], [s]),
        ("dedup signatures --stats input",
         ["dedup", "signatures", s, "-o", tmp_path / "sigs", "--stats", s], [s]),
        ("mix --report source", ["mix", "-s", f"a={s}", "--report", s, "-o", out], [s]),
        ("mix -o source", ["mix", "-s", f"a={s}", "-s", f"b={x}", "-o", s], [s]),
    ]


@pytest.mark.parametrize("case", range(16))
def test_output_that_is_an_input_or_another_output_is_refused(tmp_path, case):
    cases = _conflicts(tmp_path)
    assert len(cases) == 16
    name, args, kept = cases[case]
    before = {p: p.read_bytes() for p in kept}
    code, msg = cli(*args, "-q")
    assert code == 2, (name, msg)  # 2, not the 1 that reading BAD would give: nothing was read
    assert "is also" in msg and "\n" not in msg.strip(), msg
    assert {p: p.read_bytes() for p in kept} == before
    assert not (tmp_path / "out.jsonl").exists()
    assert leftovers(tmp_path) == []


@pytest.mark.integration
def test_stdout_appended_to_an_input_is_refused(tmp_path, src):
    before = src.read_bytes()
    r = shell(f"llmtk cat {src} -q >> {src}")
    assert r.returncode == 2 and b"is also an input" in r.stderr
    assert src.read_bytes() == before


def test_two_outputs_on_stdout_are_refused(src):
    code, msg = cli("cat", src, "--rejects", "-", "--on-error", "reject")
    assert code == 2 and "is also -o -" in msg


# -- item 3: exclusive temporary files, mode from the umask ------------------------------

def test_a_planted_temp_symlink_is_not_followed(tmp_path, src):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    out = tmp_path / "out.jsonl"
    os.symlink(victim, f"{out}.tmp-{os.getpid()}")
    code, msg = cli("cat", src, "-o", out, "-q")
    assert code == 1 and "refusing to follow" in msg
    assert victim.read_bytes() == b"precious\n"
    assert not out.exists() and not out.is_symlink()


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_final_mode_comes_from_the_umask(tmp_path, src, umask, mode):
    out = tmp_path / "out.jsonl"
    old = os.umask(umask)
    try:
        code, msg = cli("cat", src, "-o", out, "--stats", tmp_path / "s.json", "-q")
    finally:
        os.umask(old)
    assert code == 0, msg
    assert stat.S_IMODE(os.stat(out).st_mode) == mode
    assert stat.S_IMODE(os.stat(tmp_path / "s.json").st_mode) == mode


# -- item 4: all outputs committed together, paths validated first -----------------------

def test_missing_output_directories_are_made_as_mkdir_p_would(tmp_path, src):
    code, msg = cli("cat", src, "-o", tmp_path / "a" / "b" / "o.jsonl", "--stats",
                    tmp_path / "s" / "s.json", "-q")
    assert code == 0, msg
    assert (tmp_path / "a" / "b" / "o.jsonl").read_bytes() == src.read_bytes()
    assert (tmp_path / "s" / "s.json").exists()
    # A run that fails takes the directories it made away again (and nothing else).
    s = tmp_path / "bad.jsonl"
    s.write_bytes(BAD)  # reading it fails with exit 1
    code, msg = cli("cat", s, "-o", tmp_path / "a" / "new" / "o.jsonl", "--stats",
                    tmp_path / "no" / "deeper" / "s.json", "-q")
    assert code == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "bad.jsonl", "in.jsonl", "s"]
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["b"]


@pytest.mark.parametrize("blocker", ["file", "dangling_link"])
def test_a_file_or_dangling_link_where_a_directory_goes_is_refused(tmp_path, src, blocker):
    where = tmp_path / "d"
    if blocker == "file":
        where.write_bytes(b"x")
    else:
        where.symlink_to(tmp_path / "elsewhere")
    code, msg = cli("cat", src, "-o", where / "sub" / "o.jsonl", "-q")
    assert code == 2, msg
    assert ("not a directory" if blocker == "file" else "dangling symbolic link") in msg.lower()
    assert not (tmp_path / "elsewhere").exists() and leftovers(tmp_path) == []


def test_an_output_that_is_a_directory_is_refused(tmp_path, src):
    code, msg = cli("cat", src, "--stats", tmp_path, "-q")
    assert code == 2 and "is a directory" in msg


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into any directory")
def test_an_unwritable_output_directory_is_refused(tmp_path, src):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        code, msg = cli("cat", src, "-o", locked / "o.jsonl", "-q")
    finally:
        locked.chmod(0o700)
    assert code == 2 and "not writable" in msg


@pytest.mark.parametrize("failing", ["rejects", "stats", "output"])
def test_disk_full_on_any_output_commits_none(tmp_path, monkeypatch, failing):
    p = tmp_path / "in.jsonl"
    p.write_bytes(jsonl(RECORDS) + b"bad line\n")
    paths = {"output": tmp_path / "o.jsonl.zst", "rejects": tmp_path / "r.jsonl",
             "stats": tmp_path / "s.json"}
    real = Sink._write_all

    def write_all(self, data):
        if self.path == str(paths[failing]):
            raise LlmtkError(f"{self.path}: write failed: {os.strerror(errno.ENOSPC)}")
        real(self, data)

    monkeypatch.setattr(Sink, "_write_all", write_all)
    code, msg = cli("cat", p, "-o", paths["output"], "--on-error", "reject",
                    "--rejects", paths["rejects"], "--stats", paths["stats"], "-q")
    assert code == 1 and "No space left" in msg and "\n" not in msg.strip()
    assert [q for q in paths.values() if q.exists()] == []
    assert leftovers(tmp_path) == []


def test_fsync_failure_commits_none(tmp_path, monkeypatch, src):
    out, rej = tmp_path / "o.jsonl", tmp_path / "r.jsonl"
    calls = []
    real = os.fsync

    def fsync(fd):
        calls.append(fd)
        if len(calls) == 2:  # the second output's flush to disk
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    code, msg = cli("cat", src, "-o", out, "--rejects", rej, "-q")
    assert code == 1 and "No space left" in msg
    assert not out.exists() and not rej.exists() and leftovers(tmp_path) == []


# -- item 8: the directory walk ---------------------------------------------------------

def test_walk_enters_each_real_directory_once(tmp_path):
    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    (d / "sub" / "a.jsonl").write_bytes(jsonl(RECORDS[:5]))
    (d / "sub" / "loop").symlink_to(d)  # a loop back to the top
    (d / "again").symlink_to(d / "sub")  # a second name for sub
    assert expand_inputs([str(d)]) == [str(d / "again" / "a.jsonl")]
    code, msg = cli("cat", d, "-o", tmp_path / "o.jsonl", "-q")
    assert code == 0, msg
    assert (tmp_path / "o.jsonl").read_bytes() == jsonl(RECORDS[:5])


def test_walk_rule_for_dotfiles_and_plain_json(tmp_path):
    d = tmp_path / "d"
    (d / ".git").mkdir(parents=True)
    for name in ("a.jsonl", "b.jsonl.zst", "c.json.gz", "d.jsonl.gz", ".hidden.jsonl",
                 ".git/e.jsonl", "meta.json", "notes.txt", "f.json.zst"):
        (d / name).write_bytes(b"")
    (d / "g.jsonl").symlink_to(d / "a.jsonl")  # the same file under a second name
    got = [os.path.relpath(p, d) for p in expand_inputs([str(d)])]
    assert got == ["a.jsonl", "b.jsonl.zst", "c.json.gz", "d.jsonl.gz", "f.json.zst"]


# -- item 11: inputs that are not regular files; stale temporary files -------------------

@pytest.mark.integration
def test_closed_stdin_is_a_clear_error():
    r = shell("llmtk cat -q <&-")
    assert r.returncode == 2 and r.stderr == b"llmtk: error: stdin is closed: give input " \
                                             b"files, or pipe records in\n"


@pytest.mark.integration
def test_fifo_dev_stdin_and_process_substitution_are_inputs(tmp_path, src):
    data = src.read_bytes()
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)

    def writer():
        with open(fifo, "wb") as f:
            f.write(data)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    code, msg = cli("cat", fifo, "-o", tmp_path / "o.jsonl", "-q")
    t.join(10)
    assert code == 0, msg
    assert (tmp_path / "o.jsonl").read_bytes() == data
    r = llmtk("cat", "/dev/stdin", "-q", input=data)
    assert r.returncode == 0 and r.stdout == data, r.stderr
    r = shell(f"llmtk cat <(cat {src}) -q")
    assert r.returncode == 0 and r.stdout == data, r.stderr


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_stale_temp_files_of_dead_runs_are_swept(tmp_path, src):
    out = tmp_path / "out.jsonl"
    dead = tmp_path / f"out.jsonl.tmp-{_dead_pid()}"
    alive = tmp_path / f"out.jsonl.tmp-{os.getppid()}"  # a live process's
    other_name = tmp_path / f"out.jsonl.tmp-{_dead_pid()}.bak"  # not the exact pattern
    other_file = tmp_path / f"other.jsonl.tmp-{_dead_pid()}"  # another output's
    for p in (dead, alive, other_name, other_file):
        p.write_bytes(b"partial")
    code, msg = cli("cat", src, "-o", out, "-q")
    assert code == 0, msg
    assert not dead.exists()
    assert alive.exists() and other_name.exists() and other_file.exists()


def test_sweep_leaves_links_and_other_users_files(tmp_path):
    target = str(tmp_path / "out.jsonl")
    link = tmp_path / f"out.jsonl.tmp-{_dead_pid()}"
    link.symlink_to(tmp_path / "elsewhere")
    theirs = tmp_path / f"out.jsonl.tmp-{_dead_pid()}"
    theirs.write_bytes(b"x")
    if os.geteuid() == 0:
        os.chown(theirs, 12345, 12345)
        assert sweep_stale(target) == []
    else:
        assert sweep_stale(target) == [str(theirs)]
    assert link.is_symlink()


def test_an_output_folder_that_is_an_input_folder_is_refused(tmp_path, src):
    sigs = tmp_path / "sigs"
    code, msg = cli("dedup", "signatures", src, "-o", sigs, "-q")
    assert code == 0, msg
    meta = (sigs / "meta.json").read_bytes()
    code, msg = cli("dedup", "buckets", sigs, "-o", sigs, "-q")
    assert code == 2 and "is also an input" in msg
    assert (sigs / "meta.json").read_bytes() == meta
    idx = tmp_path / "idx"
    code, msg = cli("dedup", src, "-o", tmp_path / "o.jsonl", "--save-index", idx, "-q")
    assert code == 0, msg
    code, msg = cli("dedup", src, "-o", tmp_path / "p.jsonl", "--index", idx,
                    "--save-index", idx, "-q")
    assert code == 2 and "is also an input" in msg
    assert not (tmp_path / "p.jsonl").exists()


def test_train_quality_model_over_its_training_data_is_refused(tmp_path, src):
    neg = tmp_path / "neg.jsonl"
    neg.write_bytes(jsonl(RECORDS[:5]))
    before = src.read_bytes()
    code, msg = cli("clean", "train-quality", "--positive", src, "--negative", neg, "-o", src)
    assert code == 2 and "is also an input" in msg
    assert src.read_bytes() == before


def test_no_script_or_test_points_an_output_at_dev_null():
    """An output option naming the null device, run as root, used to turn the machine's
    /dev/null into a regular file: never again."""
    import re
    from pathlib import Path

    from tests.util import ROOT

    flag = re.compile(r"""(-o|--output|--rejects|--stats|--report|--clusters)["',\s]+"""
                      r"""(os\.devnull|/dev/null)""")
    here = Path(__file__).resolve()
    out = ROOT / "benchmarks" / "out"  # what the benchmarks download and write (ignored)
    files = [p for d in ("benchmarks", "tests", "bin") for p in (ROOT / d).rglob("*")
             if p.is_file() and p.suffix in (".py", ".sh", "") and p.resolve() != here
             and not any(part.startswith(".") for part in p.relative_to(ROOT).parts)
             and out not in p.parents]
    hits = [f"{p}:{i}" for p in [*files, ROOT / "Makefile"]
            for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
            if flag.search(line)]
    assert hits == []
