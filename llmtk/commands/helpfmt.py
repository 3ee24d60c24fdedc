"""One look for every command's help: placeholders as words, commands in pipeline order.

typer shows an option's Python type as its placeholder (`<str>`, `<list[str]>`,
`<int range>`, `<bool>` on a flag). `polish()` walks the built click command tree
once and gives every parameter without an explicit metavar a word instead: flags
get none, numbers `N` or `X`, paths `FILE`, other text `TEXT` — the way man pages
and clig.dev write them. Options that name their metavar keep it.
"""

from __future__ import annotations

import copy

# The order a user meets the tools in (docs/index.md, the README's pipeline);
# commands not listed follow in the order they were registered.
PIPELINE_ORDER = ("inspect", "clean", "dedup", "contam-check", "mix", "estimate", "train",
                  "eval", "generate", "plot-loss", "diagnose", "run", "stats", "cat")

_FILE_WORDS = ("output", "rejects", "stats", "clusters", "report", "config", "index",
               "model", "tokenizer", "data", "file", "dir", "out", "eval", "log", "path")


def placeholder(param) -> str:
    """The metavar a parameter shows in help when it names none itself."""
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return ""
    name = (param.name or "").lower()
    ptype = param.type  # the click parameter type typer made from the annotation
    kind = ptype.name
    if kind == "choice":
        word = "|".join(str(getattr(c, "value", c)) for c in ptype.choices)
    elif kind.startswith("int"):  # int, int range
        word = "N"
    elif kind.startswith("float"):  # float, float range
        word = "X"
    elif kind in ("path", "file", "directory") or _names_a_file(name):
        word = "FILE"
    else:
        word = "TEXT"
    if param.param_type_name == "argument":
        return name.upper() if name else word  # typer adds "..." for several
    return word


def _names_a_file(name: str) -> bool:
    """A parameter whose name has a file word as one of its parts (`out_dir`, `eval_paths`,
    `log_to`); a part, not a substring: `profile` names no file."""
    parts = name.split("_")
    return any(p in _FILE_WORDS or p.rstrip("s") in _FILE_WORDS for p in parts)


def _usage_name(param) -> str:
    """FILE... or [FILES...] in the usage line."""
    name = param.metavar + ("..." if param.nargs != 1 else "")
    return name if param.required else f"[{name}]"


def unwrap(text: str) -> str:
    """Join the hard-wrapped lines of prose paragraphs, so help is wrapped once, at the
    terminal's width; examples (indented) and lists keep their lines."""
    def prose(paragraph: str) -> bool:
        return not any(line[:1] in (" ", "-", "*", "|", "\t") for line in paragraph.split("\n"))

    return "\n\n".join(" ".join(p.split("\n")) if prose(p) else p for p in text.split("\n\n"))


def polish(command) -> None:
    """Give every parameter of `command` and its subcommands a word placeholder, and its
    help paragraphs one wrapping."""
    if command.help:
        command.help = unwrap(command.help)
    for param in command.params:
        if param.metavar is None:
            param.metavar = placeholder(param)
        if param.param_type_name == "argument":
            # the name column already says FILES; typer would add <str> as the type column
            # (a copy: click's types are shared by every parameter of the kind)
            param.type = copy.copy(param.type)
            param.type.get_metavar = lambda param, ctx: ""
            # and the usage line FILES... (typer writes [FILES], {FILE} for required)
            param.get_usage_pieces = lambda ctx, p=param: [_usage_name(p)]
    # click makes -h/--help lazily, on first use: give it no placeholder then
    make_help = command.get_help_option

    def get_help_option(ctx, _make=make_help):
        option = _make(ctx)
        if option is not None and option.metavar is None:
            option.metavar = ""
        return option

    command.get_help_option = get_help_option
    for sub in getattr(command, "commands", {}).values():
        polish(sub)


def pipeline_sorted(names: list[str]) -> list[str]:
    rank = {n: i for i, n in enumerate(PIPELINE_ORDER)}
    return sorted(names, key=lambda n: (rank.get(n, len(rank)), names.index(n)))
