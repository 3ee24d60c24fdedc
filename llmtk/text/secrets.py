"""Secret scrubbing: private keys, cloud and API tokens, passwords in URLs and connection
strings, replaced by typed placeholders (`<PRIVATE_KEY>`, `<AWS_KEY>`, ...) like PII.

The rules are data (`secrets.toml`, beside this module): a provider's published token shape,
the strings a text must hold for the rule to run at all (most texts hold none, so a text
costs a few substring searches), and for credentials in context (URLs, connection strings)
a `skip` pattern for templates and placeholders. There is deliberately no entropy rule: it
is what makes generic scanners flag every quoted SHA digest and UUID.

    text, counts = scrub_secrets(text)          # counts: {"AWS_KEY": 1, ...}
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

RULES_FILE = Path(__file__).with_name("secrets.toml")


@dataclass(frozen=True)
class Rule:
    kind: str
    pattern: re.Pattern
    keywords: tuple[str, ...]
    skip: re.Pattern | None = None
    context: re.Pattern | None = None


@cache
def rules() -> tuple[Rule, ...]:
    with open(RULES_FILE, "rb") as f:
        table = tomllib.load(f)
    out = []
    for r in table["rule"]:
        out.append(Rule(
            kind=r["kind"],
            pattern=re.compile(r["pattern"]),
            keywords=tuple(r["keywords"]),
            skip=re.compile(r["skip"], re.IGNORECASE) if "skip" in r else None,
            context=re.compile(r["context"]) if "context" in r else None,
        ))
    return tuple(out)


def kinds() -> tuple[str, ...]:
    """Every kind the rules can report, in rule order."""
    return tuple(dict.fromkeys(r.kind for r in rules()))


def _line_of(text: str, start: int, end: int) -> str:
    return text[text.rfind("\n", 0, start) + 1 : (text.find("\n", end) + 1 or len(text) + 1) - 1]


@cache
def _selected(only: frozenset[str] | None) -> tuple[tuple[Rule, bool], ...]:
    """The rules of the kinds in `only` (every rule for None), each with whether its pattern
    names the `secret` group: decided once, not per record and match."""
    return tuple((r, "secret" in r.pattern.groupindex) for r in rules()
                 if only is None or r.kind in only)


def scrub_secrets(text: str, only: frozenset[str] | None = None) -> tuple[str, dict[str, int]]:
    """(text with secrets replaced by <KIND>, {kind: count}); `only` limits the kinds."""
    counts: dict[str, int] = {}
    for rule, named in _selected(only):
        if not any(k in text for k in rule.keywords):
            continue

        def put(m: re.Match, rule: Rule = rule, named: bool = named, text: str = text) -> str:
            value = m.group("secret") if named else m.group()
            if rule.skip is not None and rule.skip.fullmatch(value):
                return m.group()
            if rule.context is not None and not rule.context.search(
                    _line_of(text, m.start(), m.end())):
                return m.group()
            counts[rule.kind] = counts.get(rule.kind, 0) + 1
            if not named:
                return f"<{rule.kind}>"
            s, e = m.span("secret")
            base = m.start()
            whole = m.group()
            return whole[: s - base] + f"<{rule.kind}>" + whole[e - base :]

        text = rule.pattern.sub(put, text)
    return text, counts
