"""The llmtk command itself: help, version, stubs, start-up imports, exit codes."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from llmtk import __version__
from llmtk.cli import app
from tests.test_docs import COMMANDS
from tests.util import env, llmtk

HEAVY = ("torch", "numpy", "fasttext", "matplotlib", "datasketch", "scipy", "pandas")

IMPORT_PROBE = """
import json, sys
args = json.loads(sys.argv[1])
sys.argv = ["llmtk", *args]
try:
    from llmtk.cli import main
    main()
except SystemExit:
    pass
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(HEAVY))
sys.stderr.write("HEAVY=" + json.dumps(heavy) + "\\n")
"""


def heavy_imports(*args: str) -> list[str]:
    """The heavy top-level packages imported by running `llmtk ARGS` in a fresh interpreter."""
    code = f"HEAVY = {list(HEAVY)!r}\n" + IMPORT_PROBE
    r = subprocess.run([sys.executable, "-c", code, json.dumps(list(args))],
                       capture_output=True, env=env())
    line = [x for x in r.stderr.decode().splitlines() if x.startswith("HEAVY=")][-1]
    return json.loads(line[len("HEAVY="):])


def test_help_lists_every_command_with_summaries_and_examples():
    r = CliRunner().invoke(app, ["--help"], terminal_width=120)
    assert r.exit_code == 0
    for name in COMMANDS:
        assert name in r.output
    assert "Examples" in r.output and "| llmtk dedup" in r.output
    assert "Exit status" in r.output


def test_dash_h_is_help_and_no_default_command():
    assert CliRunner().invoke(app, ["-h"]).exit_code == 0
    r = llmtk()
    assert r.returncode in (0, 2) and b"Usage" in (r.stdout + r.stderr)


def test_version():
    r = llmtk("--version")
    assert r.returncode == 0 and r.stdout.decode().strip() == f"llmtk {__version__}"


def test_help_does_not_import_heavy_libraries():
    assert heavy_imports("--help") == []


@pytest.mark.parametrize("name", COMMANDS)
def test_command_help_does_not_import_heavy_libraries(name):
    assert heavy_imports(name, "--help") == []


def test_unknown_command_is_usage_error():
    assert llmtk("no-such-command").returncode == 2


def test_shared_stream_options_are_declared_once_and_left_out_where_they_cannot_apply():
    import typer as typer_mod

    from llmtk.commands.options import STREAM_OPTIONS

    group = typer_mod.main.get_command(app)
    names = {name: {p.name for p in cmd.params} for name, cmd in group.commands.items()}
    for command in ("cat", "contam-check"):
        assert set(STREAM_OPTIONS) <= names[command]
    assert names["mix"] >= set(STREAM_OPTIONS) - {"inputs", "workers"}
    assert not names["mix"] & {"inputs", "workers"}
    assert llmtk("mix", "-s", "a=x.jsonl", "--workers", "2").returncode == 2
