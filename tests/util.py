"""Helpers for tests that run llmtk as a command, two ways:

- in this process, through `llmtk.cli.main` with fds 0/1/2 on temporary files
  (`_run_in_process`: `llmtk()` for cheap commands or with in_process=True, `InProcess`,
  `invoke`), where that is the same as a process;
- as a real process (`run_module`, `popen_module`, `shell`), where a pipe, a signal or
  torch is involved: forked from the tests' server (tests/forkserver.py), or a fresh
  `python -m llmtk` with LLMTK_TEST_FORKSERVER=0 (`make test-integration`)."""

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# `python -m llmtk` from the repository root runs this checkout's code.
LLMTK = [sys.executable, "-m", "llmtk"]


def env(**extra: str) -> dict:
    """The environment of a command a test starts: this checkout on PYTHONPATH, and the
    tests' fork server for scripts and torchrun (tests/forkserver.py)."""
    from tests import forkserver

    e = dict(os.environ)
    e.pop("LLMTK_DEBUG", None)
    e["PYTHONPATH"] = str(ROOT)
    if forkserver.enabled():
        e.update(forkserver.env_vars())
    e.update(extra)
    return e


# Commands cheap to run inside the test process (no torch state, no process pools, no
# signals): `llmtk()` runs them in-process unless a test asks for a real process. A process
# start costs about a second on the 2-core CI machine; the suite makes hundreds of calls.
IN_PROCESS = {"cat", "clean", "dedup", "mix", "contam-check", "stats", "estimate", "diagnose",
              "inspect"}
REAL_FLAGS = {"--workers", "--ppl-model", "--measure", "--executor"}


def llmtk(*args: str, input: bytes | None = None, check: bool = False, cwd=None,
          real: bool = False, in_process: bool = False, **extra_env: str):
    """Run `llmtk ARGS` and return a CompletedProcess (bytes stdout/stderr, returncode).

    In this process (same bytes, same exit status) for the commands in IN_PROCESS, or in
    a real one with real=True, for other commands, flags in REAL_FLAGS, or everywhere
    with LLMTK_TEST_PROCESSES=1 (to check that both agree). in_process=True runs any
    command here, train and eval included: for a test that needs no process boundary
    (no signal, no kill, no pipe) and accepts that torch's state is this process's."""
    argv = [str(a) for a in args]
    if os.environ.get("LLMTK_TEST_PROCESSES") == "1" or real or not (in_process or (
            argv and argv[0] in IN_PROCESS and not REAL_FLAGS.intersection(argv))):
        return run_module("llmtk", argv, input=input, check=check, cwd=cwd,
                          environ=env(**extra_env))
    result = _run_in_process(argv, input or b"", cwd or ROOT, extra_env)
    if check and result.returncode != 0:
        raise subprocess.CalledProcessError(result.returncode, argv, result.stdout,
                                            result.stderr)
    return result


def run_module(module: str, argv: list[str], input: bytes | None = None, check=False,
               cwd=None, environ: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m MODULE ARGV` as a real process: forked from the tests' server, which has
    torch imported already (tests/forkserver.py), or started from scratch with
    LLMTK_TEST_FORKSERVER=0."""
    from tests import forkserver

    e = environ if environ is not None else env()
    if forkserver.enabled():
        result = forkserver.run(module, argv, input=input or b"", env=e, cwd=cwd or ROOT)
    else:
        result = subprocess.run([sys.executable, "-m", module, *argv], input=input or b"",
                                capture_output=True, cwd=cwd or ROOT, env=e)
    if check and result.returncode != 0:
        raise subprocess.CalledProcessError(result.returncode, argv, result.stdout,
                                            result.stderr)
    return result


def popen_module(module: str, argv: list[str], environ: dict, stderr_pipe: bool = False):
    """`python -m MODULE ARGV` left running as a real process (stdin and stdout on
    /dev/null): a tests/forkserver.py child, or a subprocess.Popen with
    LLMTK_TEST_FORKSERVER=0. Both have pid, send_signal, wait and communicate."""
    from tests import forkserver

    if forkserver.enabled():
        return forkserver.spawn(module, argv, environ, ROOT, stderr_pipe=stderr_pipe)
    return subprocess.Popen([sys.executable, "-m", module, *argv], cwd=ROOT, env=environ,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE if stderr_pipe else subprocess.DEVNULL)


def _run_in_process(argv: list[str], stdin: bytes, cwd, extra_env: dict):
    """`llmtk ARGV` through llmtk.cli.main with fds 0/1/2 (and sys.std*) on temporary
    files, the environment and working directory of the would-be process, and the
    process-wide state it may change (signal handlers, argv, torch threads) put back."""
    import io
    import tempfile
    import traceback

    from llmtk.cli import main

    saved_env, saved_cwd, saved_argv = dict(os.environ), os.getcwd(), sys.argv
    saved_std = sys.stdin, sys.stdout, sys.stderr
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved_fds = [os.dup(fd) for fd in (0, 1, 2)]
    files = [tempfile.TemporaryFile() for _ in range(3)]
    try:
        files[0].write(stdin)
        files[0].seek(0)
        for fd, f in enumerate(files):
            os.dup2(f.fileno(), fd)
        # Python-level writes go to the same fds (pytest's capture replaces sys.std*).
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        sys.stdout, sys.stderr = (io.TextIOWrapper(io.FileIO(fd, "w", closefd=False),
                                                   write_through=True) for fd in (1, 2))
        os.environ.clear()
        os.environ.update(env(**extra_env))
        os.chdir(cwd)
        sys.argv = ["llmtk", *argv]
        code = 0
        with own_signal_handlers():
            try:
                main()
            except SystemExit as e:
                if isinstance(e.code, str):
                    print(e.code, file=sys.stderr)
                code = 1 if isinstance(e.code, str) else (e.code or 0)
            except Exception:  # what an uncaught exception does to a process
                traceback.print_exc()
                code = 1
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved_std
        for fd, saved in enumerate(saved_fds):
            os.dup2(saved, fd)
            os.close(saved)
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        sys.argv = saved_argv
        if threads is not None:
            torch.set_num_threads(threads)
    out, err = [_read_all(f) for f in files[1:]]
    files[0].close()
    return subprocess.CompletedProcess(["llmtk", *argv], code, out, err)


def _read_all(f) -> bytes:
    f.seek(0)
    data = f.read()
    f.close()
    return data


def shell(script: str, **extra_env: str) -> subprocess.CompletedProcess:
    """Run a bash pipeline where `llmtk` means this checkout's llmtk."""
    prelude = f'llmtk() {{ {llmtk_command()} "$@"; }}\nset -o pipefail\n'
    return subprocess.run(
        ["bash", "-c", prelude + script], capture_output=True, cwd=ROOT,
        env=env(**extra_env)
    )


def llmtk_command() -> str:
    """`llmtk` for a shell script (whose environment is env()), as words without quotes:
    a client of the tests' fork server (tests/fork_client.py), or `python -m llmtk`."""
    from tests import forkserver

    python = forkserver.client_command() if forkserver.enabled() else [sys.executable]
    return " ".join([*python, "-m", "llmtk"])


class InProcess:
    """`llmtk ARGS` run in this process exactly as `llmtk(..., in_process=True)` runs it
    (through `llmtk.cli.main`, exit code, messages and all), in the test's working
    directory, with text results: `.exit_code`, `.stdout`, `.output` (stderr)."""

    def __init__(self, *unused_fixtures) -> None:
        pass  # older fixtures pass (capfd, monkeypatch); nothing here needs them

    def __call__(self, *args):
        from types import SimpleNamespace

        r = _run_in_process([str(a) for a in args], b"", os.getcwd(), {})
        return SimpleNamespace(exit_code=r.returncode,
                               stdout=r.stdout.decode("utf-8", "replace"),
                               output=r.stderr.decode("utf-8", "replace"))


@contextlib.contextmanager
def own_signal_handlers():
    """Put back pytest's signal handlers after llmtk ran in this process (the CLI and the
    trainer install their own for SIGTERM/SIGUSR1; torchrun's launcher, run here by
    `train --nproc-per-node`, for SIGTERM, SIGINT, SIGHUP and SIGQUIT)."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR1,
                                                    signal.SIGINT, signal.SIGHUP,
                                                    signal.SIGQUIT)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def invoke(*args) -> tuple[int, str]:
    """`llmtk ARGS` in this process, as `llmtk(..., in_process=True)` runs it: (exit status,
    the `llmtk: error: …` line when it failed, else what it wrote to stdout and stderr)."""
    r = _run_in_process([str(a) for a in args], b"", os.getcwd(), {})
    err = r.stderr.decode("utf-8", "replace")
    if r.returncode != 0:
        return r.returncode, err.rstrip("\n")
    return 0, r.stdout.decode("utf-8", "replace") + err
