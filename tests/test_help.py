"""Every command's --help as a user reads it in an 80-column terminal.

Rendered in-process through the same command tree `llmtk` runs (cli.build_command):
no Python type names as placeholders, no line wider than 80 columns, nothing cut off
with `…` (an option name or a path too wide for its column), and every example of a
help text appears whole on one line (never wrapped mid-command).
"""

import re

import pytest

from llmtk.cli import build_command

TYPE_NAMES = re.compile(r"<(bool|str|int|float|list\[|path|int range|float range)[^>]*>")


def all_commands(command=None, path=()):
    command = command or build_command()
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        if not sub.hidden:
            yield from all_commands(sub, (*path, name))


COMMANDS = [(" ".join(p) or "llmtk", c) for p, c in all_commands()]
# The plumbing commands, hidden from `llmtk -h` but documented in docs/cluster.md.
COMMANDS += [(" ".join(p), c) for name in ("run", "stats", "cat")
             for p, c in all_commands(build_command().commands[name], (name,))]


def render(path: str, monkeypatch, capsys) -> str:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv("NO_COLOR", raising=False)
    args = [*path.split(), "--help"] if path != "llmtk" else ["--help"]
    status = build_command().main(args, prog_name="llmtk", standalone_mode=False)
    assert status in (0, None)
    return capsys.readouterr().out


def examples(command) -> list[str]:
    """The example command lines of a help text: the indented lines after 'Examples'."""
    text = command.help or ""
    if "Examples" not in text:
        return []
    body = text.split("Examples", 1)[1]
    return [line.strip() for line in body.splitlines()
            if line.startswith("  ") and line.strip()]


def unfinished_examples(command) -> list[tuple[str, str]]:
    """Example lines followed by a more indented line (its continuation) that do not end
    with a backslash: pasted into a shell, the command would stop there."""
    text = command.help or ""
    if "Examples" not in text:
        return []
    lines = text.split("Examples", 1)[1].splitlines()
    indent = [len(x) - len(x.lstrip()) if x.strip() else 0 for x in lines]
    return [(lines[i], lines[i + 1]) for i in range(len(lines) - 1)
            if lines[i].strip() and lines[i + 1].strip() and indent[i + 1] > indent[i] > 0
            and not lines[i].rstrip().endswith("\\")]


@pytest.mark.parametrize("path,command", COMMANDS, ids=[p for p, _ in COMMANDS])
def test_help_reads_at_80_columns(path, command, monkeypatch, capsys):
    out = render(path, monkeypatch, capsys)
    assert "Usage:" in out
    assert not TYPE_NAMES.search(out), TYPE_NAMES.search(out).group(0)
    wide = [line for line in out.splitlines() if len(line) > 80]
    assert not wide, wide[0]
    cut = [line for line in out.splitlines() if "…" in line]  # rich cut an option or a path
    assert not cut, cut[0]
    assert "...." not in out  # a metavar with typer's "..." added twice (COMMAND......)
    unfinished = unfinished_examples(command)
    assert not unfinished, f"example continues without a backslash: {unfinished[0]}"
    flat = " ".join(out.split())
    for example in examples(command):
        assert len(example) <= 76, f"example longer than 76 columns: {example}"
        assert " ".join(example.split()) in flat, f"example wrapped: {example}"


def test_commands_are_listed_in_pipeline_order(monkeypatch, capsys):
    out = render("llmtk", monkeypatch, capsys)
    listed = [n for n in ("clean", "dedup", "contam-check", "mix", "estimate", "train",
                          "plot-loss", "diagnose") if f"│ {n} " in out]
    positions = [out.index(f"│ {n} ") for n in listed]
    assert len(listed) == 8 and positions == sorted(positions)


BRACKETED = re.compile(r"\\?\[[^\]\[]*\]")


@pytest.mark.parametrize("path,command", COMMANDS, ids=[p for p, _ in COMMANDS])
def test_no_option_help_loses_its_brackets(path, command, monkeypatch, capsys):
    """rich reads `[default: 16]` in a help text as a style tag and drops it, leaving
    "or none ." behind: every bracketed part of an option's help is shown as written."""
    monkeypatch.setenv("COLUMNS", "1000")  # one line per option: no wrapping to undo
    args = [*path.split(), "--help"] if path != "llmtk" else ["--help"]
    build_command().main(args, prog_name="llmtk", standalone_mode=False)
    shown = " ".join(capsys.readouterr().out.split())
    for param in command.params:
        for part in BRACKETED.findall(getattr(param, "help", None) or ""):
            if part.startswith("[dim]") or part in ("[/dim]", "[bold]", "[/bold]"):
                continue
            assert part.lstrip("\\") in shown, (param.name, part)
    assert not re.search(r"\w \.(\s|$)| ;", shown), re.search(r".{30}\w \.(\s|$).{0,10}| ;", shown)
