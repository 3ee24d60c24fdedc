"""Shared helpers for benchmarks: timing child processes by wall and CPU time."""

import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LLMTK = [sys.executable, "-m", "llmtk"]


def timed(cmd, shell: bool = False) -> tuple[float, float]:
    """Run a command; return (wall seconds, CPU seconds of it and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, shell=shell, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def one_core(cmd: list[str], core: int = 0) -> list[str]:
    """Pin a command to one CPU when taskset exists (the per-core comparison)."""
    return ["taskset", "-c", str(core), *cmd] if shutil.which("taskset") else cmd


def corpus_bytes(path: str) -> bytes:
    """A JSONL file's bytes, zstd-decompressed (across frames) when it is zstd.

    Standard library + zstandard only: datatrove's virtualenv imports this too.
    """
    raw = Path(path).read_bytes()
    if raw[:4] == b"\x28\xb5\x2f\xfd":
        import io

        import zstandard

        raw = zstandard.ZstdDecompressor().stream_reader(
            io.BytesIO(raw), read_across_frames=True).read()
    return raw


def read_corpus(path: str, limit: int = 0) -> list[dict]:
    """The first `limit` records (all with 0) of a JSONL(.zst) file."""
    import orjson

    docs = [orjson.loads(line) for line in corpus_bytes(path).splitlines() if line.strip()]
    return docs[:limit] if limit else docs


# datatrove, the peer of clean and dedup, lives in its own virtualenv (never in .venv).
DATATROVE_VENV = ROOT / "benchmarks" / ".venvs" / "datatrove"
# spaCy: datatrove's English word tokenizer; xxhash<4: datatrove 0.10.1 hashes str, which
# xxhash 4 refuses ("Strings must be encoded before hashing").
# jieba, sudachipy, sudachidict-core: the word tokenizers datatrove gives Chinese (cmn_Hani)
# and Japanese (jpn_Jpan), FineWeb-2's (cjk_words_vs_datatrove.py).
DATATROVE_PACKAGES = ["datatrove==0.10.1", "spacy", "regex", "tokenizers", "xxhash<4", "orjson",
                      "zstandard", "jieba", "sudachipy", "sudachidict-core"]


def datatrove_python() -> Path:
    """The datatrove venv's python, created (or completed) on first use with pip."""
    python = DATATROVE_VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {DATATROVE_VENV.relative_to(ROOT)} (datatrove + spaCy; a few minutes)",
              file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(DATATROVE_VENV)], check=True)
    probe = subprocess.run(
        [str(python), "-c", "import datatrove, spacy, regex, tokenizers, xxhash, orjson, jieba, "
         "sudachipy, sudachidict_core"],
        capture_output=True)
    if probe.returncode != 0:
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *DATATROVE_PACKAGES],
                       check=True)
    return python


def debian_packages(debs: Path, pkgs: list[str]) -> None:
    """`apt-get download` the packages not in DEBS yet and unpack each (`dpkg-deb -x`)
    into DEBS/x_PACKAGE; nothing is installed. Used by the corpus builders."""
    debs.mkdir(parents=True, exist_ok=True)
    have = {p.name.split("_")[0] for p in debs.glob("*.deb")}
    missing = [p for p in pkgs if p not in have]
    if missing:
        subprocess.run(["apt-get", "download", *missing], cwd=debs, check=True)
    for pkg in pkgs:
        target = debs / f"x_{pkg}"
        if not target.exists():
            deb = sorted(debs.glob(f"{pkg}_*.deb"))[-1]
            subprocess.run(["dpkg-deb", "-x", str(deb), str(target)], check=True)
