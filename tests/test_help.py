"""Every command's --help as a user reads it in an 80-column terminal.

Rendered in-process through the same command tree `llmtk` runs (cli.build_command):
no Python type names as placeholders, no line wider than 80 columns, nothing cut off
with `…` (an option name or a path too wide for its column), and every example of a
help text appears whole on one line (never wrapped mid-command).
"""

import re

import pytest

from llmtk.cli import build_command
from tests.util import ROOT

TYPE_NAMES = re.compile(r"<(bool|str|int|float|list\[|path|int range|float range)[^>]*>")


def all_commands(command=None, path=()):
    command = command or build_command()
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        if not sub.hidden:
            yield from all_commands(sub, (*path, name))


COMMANDS = [(" ".join(p) or "llmtk", c) for p, c in all_commands()]


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


# `llmtk X` where a command line starts (or after a pipe, `$`, `(` or `--`), in the
# fenced blocks and inline code of README.md and docs/*.md: what a user is told to type.
TYPED = re.compile(r"(?:^|[|;&(]\s*|\$\s*|--\s+)llmtk ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?")


def typed_commands() -> set[tuple[str, str | None]]:
    found = set()
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text()
        lines = [line.strip() for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
                 for line in block.splitlines()]
        lines += re.findall(r"`(llmtk [^`\n]+)`", text)
        for line in lines:
            found.update(m.groups() for m in TYPED.finditer(line))
    return found


def test_every_command_the_docs_tell_users_to_type_is_listed_in_the_help(monkeypatch,
                                                                         capsys):
    """`llmtk -h` lists every command README and docs show (run, stats and cat too), and a
    command's help lists its subcommands that the docs show (train tokenize, ...)."""
    root = build_command()
    typed = typed_commands()
    names = {name for name, _ in typed}
    assert {"clean", "train", "run", "stats", "cat"} <= names  # the scan finds them
    assert names <= set(root.commands), names - set(root.commands)
    listed = render("llmtk", monkeypatch, capsys)
    for name in sorted(names):
        assert f"│ {name} " in listed, f"llmtk -h does not list {name}"
    for name, sub in sorted(typed, key=str):
        group = root.commands[name]
        if sub in getattr(group, "commands", {}):
            out = render(name, monkeypatch, capsys)  # a Commands panel, or the "Also" list
            assert f"│ {sub} " in out or f"llmtk {name} {sub}" in " ".join(out.split()), \
                f"llmtk {name} -h does not list {sub}"


def test_train_tokenizer_and_tokenize_are_told_apart_at_a_glance(monkeypatch, capsys):
    out = render("train", monkeypatch, capsys)
    rows = {line.split()[2]: line for line in out.splitlines()
            if line.strip().startswith("llmtk train ")}
    assert "BPE tokenizer" in rows["tokenizer"] and "token shards" in rows["tokenize"], rows
    for name in ("tokenizer", "tokenize"):  # both take documents the same way
        usage = next(line for line in render(f"train {name}", monkeypatch, capsys)
                     .splitlines() if "Usage:" in line)
        assert usage.split() == ["Usage:", "llmtk", "train", name, "[OPTIONS]",
                                 "[FILES...]"], usage


def test_a_placeholder_says_file_only_for_options_that_name_files(monkeypatch, capsys):
    out = render("clean", monkeypatch, capsys)
    profile = next(line for line in out.splitlines() if "--profile" in line)
    assert "FILE" not in profile, profile
    flat = " ".join(out.split())
    for word in ("WARC", ".xz", ".bz2", ".ndjson", "Parquet"):  # what FILES may be
        assert word in flat.split("FILES", 2)[2][:400], word
