"""Helpers for tests that run llmtk as a real process."""

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
    e = dict(os.environ)
    e.pop("LLMTK_DEBUG", None)
    e["PYTHONPATH"] = str(ROOT)
    e.update(extra)
    return e


def llmtk(*args: str, input: bytes | None = None, check: bool = False, cwd=None, **extra_env: str):
    """Run `llmtk ARGS` and return the CompletedProcess (bytes stdout/stderr)."""
    return subprocess.run(
        [*LLMTK, *map(str, args)],
        input=input if input is not None else b"",
        capture_output=True,
        check=check,
        cwd=cwd or ROOT,
        env=env(**extra_env),
    )


def shell(script: str, **extra_env: str) -> subprocess.CompletedProcess:
    """Run a bash pipeline where `llmtk` means this checkout's llmtk."""
    prelude = f'llmtk() {{ "{sys.executable}" -m llmtk "$@"; }}\nset -o pipefail\n'
    return subprocess.run(
        ["bash", "-c", prelude + script], capture_output=True, cwd=ROOT, env=env(**extra_env)
    )


class InProcess:
    """`llmtk ARGS` run in this process through `llmtk.cli.main` (exit code, messages and
    all), with pytest's fd-level capture: llmtk writes stdout to fd 1 itself."""

    def __init__(self, capfd, monkeypatch):
        self.capfd, self.monkeypatch = capfd, monkeypatch

    def __call__(self, *args):
        from types import SimpleNamespace

        from llmtk.cli import main

        self.capfd.readouterr()
        self.monkeypatch.setattr(sys, "argv", ["llmtk", *map(str, args)])
        self.monkeypatch.setenv("LLMTK_DEBUG", "0")
        code = 0
        with own_signal_handlers():
            try:
                main()
            except SystemExit as e:
                code = e.code or 0
        out, err = self.capfd.readouterr()
        return SimpleNamespace(exit_code=code, stdout=out, output=err)


@contextlib.contextmanager
def own_signal_handlers():
    """Put back pytest's SIGTERM/SIGUSR1 handlers after llmtk ran in this process (the
    CLI and the trainer install their own)."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR1)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
