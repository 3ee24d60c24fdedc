"""The llmtk command itself: help, version, stubs, start-up imports, exit codes."""

import json
import subprocess
import sys

import pytest

from llmtk import __version__
from llmtk.cli import app
from tests.test_docs import COMMANDS
from tests.util import ROOT, env, llmtk

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
commands = sorted(m for m in sys.modules if m.startswith("llmtk.commands."))
sys.stderr.write("COMMANDS=" + json.dumps(commands) + "\\n")
"""


def probe(*args: str) -> dict[str, list[str]]:
    """What running `llmtk ARGS` in a fresh interpreter imported: {"HEAVY": the heavy
    top-level packages, "COMMANDS": the llmtk.commands modules}."""
    code = f"HEAVY = {list(HEAVY)!r}\n" + IMPORT_PROBE
    r = subprocess.run([sys.executable, "-c", code, json.dumps([str(a) for a in args])],
                       capture_output=True, env=env())
    lines = r.stderr.decode().splitlines()
    return {key: json.loads([x for x in lines if x.startswith(key + "=")][-1][len(key) + 1:])
            for key in ("HEAVY", "COMMANDS")}


def heavy_imports(*args: str) -> list[str]:
    """The heavy top-level packages imported by running `llmtk ARGS` in a fresh interpreter."""
    return probe(*args)["HEAVY"]


def test_help_lists_every_command_with_summaries_and_examples():
    r = llmtk("--help", in_process=True, COLUMNS="120")
    text = r.stdout.decode()
    assert r.returncode == 0
    for name in COMMANDS:
        assert name in text
    assert "Examples" in text and "| llmtk dedup" in text
    assert "Exit status" in text


def test_dash_h_is_help_and_no_default_command():
    assert llmtk("-h", in_process=True).returncode == 0
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


def test_a_command_imports_no_other_command(tmp_path):
    """`llmtk clean FILE` loads llmtk.commands.clean and no other command's module (their
    imports and options cost a tenth of a short run); --help and a misspelt command, which
    name every command, load them all."""
    docs = tmp_path / "docs.jsonl"
    docs.write_text(json.dumps({"text": "One short document."}) + "\n")
    ran = probe("clean", docs, "--filters", "none", "--no-langid", "--no-pii", "-q",
                "-o", tmp_path / "out.jsonl")
    assert (tmp_path / "out.jsonl").read_text().count("\n") == 1
    assert ran["HEAVY"] == []
    loaded = {m.rsplit(".", 1)[1] for m in ran["COMMANDS"]}
    assert "clean" in loaded and not loaded & {"train", "dedup", "estimate", "mix", "cat"}
    from llmtk.cli import COMMANDS

    for args in (["--help"], ["no-such-command"]):
        loaded = {m.rsplit(".", 1)[1] for m in probe(*args)["COMMANDS"]}
        assert set(COMMANDS.values()) <= loaded, args


def test_unknown_command_is_usage_error():
    assert llmtk("no-such-command").returncode == 2


def test_shared_stream_options_are_declared_once_and_left_out_where_they_cannot_apply():
    import typer as typer_mod

    from llmtk.commands.groups import DEFAULT
    from llmtk.commands.options import STREAM_OPTIONS

    group = typer_mod.main.get_command(app)
    # a command with subcommands (mix: mix search) is its hidden default command
    names = {name: {p.name for p in getattr(cmd, "commands", {}).get(DEFAULT, cmd).params}
             for name, cmd in group.commands.items()}
    for command in ("cat", "contam-check"):
        assert set(STREAM_OPTIONS) <= names[command]
    assert names["mix"] >= set(STREAM_OPTIONS) - {"inputs", "workers"}
    assert not names["mix"] & {"inputs", "workers"}
    assert llmtk("mix", "-s", "a=x.jsonl", "--workers", "2").returncode == 2


def run_main(monkeypatch, capsys, *args, debug=False):
    """`llmtk ARGS` through cli.main in-process: (exit status, stdout, stderr)."""
    from llmtk import cli

    monkeypatch.setattr(sys, "argv", ["llmtk", *args])
    # "0" is off; setenv (not delenv) so that --debug's os.environ write is undone
    monkeypatch.setenv("LLMTK_DEBUG", "0")
    with pytest.raises(SystemExit) as e:
        cli.main()
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


@pytest.mark.parametrize("args,message", [
    (["--bogus"], "No such option: --bogus (see 'llmtk -h')"),
    (["clean", "--bogus"], "No such option: --bogus (see 'llmtk clean -h')"),
    (["diagnose"], "Missing argument 'LOGS'"),
    (["no-such-command"], "No such command 'no-such-command'"),
])
def test_usage_errors_are_one_line_like_every_other_error(monkeypatch, capsys, args, message):
    status, out, err = run_main(monkeypatch, capsys, *args)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("llmtk: error: ") and message in err, err
    assert "╭" not in err


def test_no_arguments_shows_help_and_exits_2(monkeypatch, capsys):
    status, out, err = run_main(monkeypatch, capsys)
    assert status == 2 and "Usage: llmtk" in out + err and "error" not in err


def test_debug_flag_shows_the_traceback(monkeypatch, capsys, tmp_path):
    missing = str(tmp_path / "missing.jsonl")
    status, _, err = run_main(monkeypatch, capsys, "cat", missing)
    assert status == 2 and "Traceback" not in err
    from llmtk.errors import LlmtkError

    monkeypatch.setattr(sys, "argv", ["llmtk", "--debug", "cat", missing])
    from llmtk import cli

    with pytest.raises(LlmtkError):  # re-raised: Python prints the traceback
        cli.main()


@pytest.mark.integration
@pytest.mark.skipif(not (ROOT / ".venv" / "bin" / "llmtk").exists(),
                    reason="needs the checkout's .venv (make setup)")
def test_make_install_puts_llmtk_on_path_of_a_new_shell(tmp_path):
    subprocess.run(["make", "-s", "install", f"PREFIX={tmp_path}"], cwd=ROOT, check=True,
                   capture_output=True)
    # a new login-less shell that knows nothing of the venv: only PREFIX/bin and the system
    p = subprocess.run(["env", "-i", f"PATH={tmp_path}/bin:/usr/bin:/bin", "bash", "-c",
                        "cd / && llmtk --version"], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.startswith("llmtk "), p.stderr


def test_train_tokenizer_takes_its_documents_as_train_tokenize_does(tmp_path):
    """Positional FILES, like every data tool; --data, the older spelling, still works and
    trains the same tokenizer."""
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"text": f"the cat sat on mat number {i} " * 3}) + "\n"
                            for i in range(60)))
    made = []
    for args in ([docs], ["--data", docs]):
        out = tmp_path / f"tok{len(made)}.json"
        r = llmtk("train", "tokenizer", *args, "--vocab-size", "300", "-q", "-o", out,
                  in_process=True)
        assert r.returncode == 0, r.stderr
        made.append(out.read_bytes())
    assert made[0] == made[1]
