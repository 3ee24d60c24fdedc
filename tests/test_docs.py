"""Each command's --help and its docs page agree (sqlite-utils checks its CLI reference)."""

import re

import pytest
import typer

from llmtk.cli import app
from tests.util import ROOT

COMMANDS = ["inspect", "clean", "dedup", "mix", "contam-check", "estimate", "train", "eval",
            "generate", "plot-loss",
            "diagnose"]
# The plumbing commands, listed in `llmtk -h` too, documented on the pages of their area.
PLUMBING = {"run": "cluster.md", "stats": "cluster.md", "cat": "io.md"}
PAGES = {**{name: f"{name}.md" for name in COMMANDS}, **PLUMBING}


def _click_group():
    return typer.main.get_command(app)


def _commands():
    return _click_group().commands


def test_every_command_registered():
    visible = sorted(name for name, cmd in _commands().items() if not cmd.hidden)
    assert visible == sorted(PAGES)


def test_docs_index_links_every_command():
    index = (ROOT / "docs" / "index.md").read_text()
    for name, page in PAGES.items():
        assert f"({page})" in index and f"`llmtk {name}" in index, name


def _option_names(command) -> set[str]:
    names = set()
    for param in command.params:
        for opt in getattr(param, "opts", []):
            if opt.startswith("--") and opt != "--help":
                names.add(opt)
    if hasattr(command, "commands"):  # a command group: its subcommands' options too
        for sub in command.commands.values():
            names |= _option_names(sub)
    return names


@pytest.mark.parametrize("name", [*COMMANDS, "cat"])
def test_help_opens_with_summary_and_examples_and_ends_with_exit_status(name):
    command = _commands()[name]
    first = command.help.splitlines()[0]
    assert first.endswith(".") and len(first) < 100
    assert "[bold]Example" in command.help
    assert "Exit status" in command.help + (command.epilog or "")


@pytest.mark.parametrize("name", PAGES)
def test_docs_page_matches_help(name):
    page = ROOT / "docs" / PAGES[name]
    assert page.exists(), f"docs/{PAGES[name]} is missing"
    text = page.read_text()
    command = _commands()[name]
    documented = set(re.findall(r"--[a-z][a-z0-9-]*", text))
    missing = _option_names(command) - documented
    assert not missing, f"docs/{PAGES[name]} does not describe {sorted(missing)}"
