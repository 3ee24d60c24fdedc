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

import bisect
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
    near: int = 0  # lines either side of the match's line that `context` may be on


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
            near=int(r.get("near", 0)),
        ))
    return tuple(out)


def kinds() -> tuple[str, ...]:
    """Every kind the rules can report, in rule order."""
    return tuple(dict.fromkeys(r.kind for r in rules()))


def _line_of(text: str, start: int, end: int, near: int = 0) -> str:
    """The line(s) holding text[start:end], with `near` lines either side."""
    a = text.rfind("\n", 0, start)
    for _ in range(near):
        if a < 0:
            break
        a = text.rfind("\n", 0, a)
    b = text.find("\n", end)
    for _ in range(near):
        if b < 0:
            break
        b = text.find("\n", b + 1)
    return text[a + 1 : b if b >= 0 else len(text)]


# Where code splits one string into several: "AKIA12" + "34", "ab" "cd" (C, Python),
# "ab" . "cd" (PHP, Perl), "ab" .. "cd" (Lua), "ab" & "cd" (VB), across a line break too.
# Only a joint between token characters can split a token (not `"Hello " + "world"`).
_BETWEEN = r"""[ \t]*(?:\+|\.\.?|&)?[ \t]*(?:\\?\r?\n[ \t]*(?:\+|\.\.?|&)?[ \t]*)?"""
_JOINT = re.compile(rf"""(["'])(?<=[\w+/=.-]["']){_BETWEEN}\1(?=[\w+/=.-])""")
# The same joints, one alternative per quote character (no group, no backreference), so
# that `_anything` can start every alternative with a literal.
_JOINT_EITHER = "|".join(rf"{q}(?<=[\w+/=.-]{q}){_BETWEEN}{q}(?=[\w+/=.-])" for q in "\"'")
_WINDOW = 600  # characters either side of a joint that a split secret can reach


def _accept(rule: Rule, m: re.Match, value: str, text: str) -> bool:
    if rule.skip is not None and rule.skip.fullmatch(value):
        return False
    return rule.context is None or rule.context.search(
        _line_of(text, m.start(), m.end(), rule.near)) is not None


@cache
def _selected(only: frozenset[str] | None) -> tuple[tuple[Rule, bool], ...]:
    """The rules of the kinds in `only` (every rule for None), each with whether its pattern
    names the `secret` group: decided once, not per record and match."""
    return tuple((r, "secret" in r.pattern.groupindex) for r in rules()
                 if only is None or r.kind in only)


def _span(m: re.Match, named: bool) -> tuple[int, int]:
    """Where the secret of a match is: its `secret` group, or for a pattern of two
    alternatives the `secret2` group of the one that matched; else the whole match."""
    if not named:
        return m.span()
    if m.start("secret") >= 0 or "secret2" not in m.re.groupindex:
        return m.span("secret")
    return m.span("secret2")


@cache
def _keywords(only: frozenset[str] | None) -> tuple[str, ...]:
    """Every keyword of the selected rules, once (several rules share theirs)."""
    return tuple(dict.fromkeys(k for r, _ in _selected(only) for k in r.keywords))


# Characters from common to rare in prose and code (English letter frequency, then the
# punctuation of code, then capitals); anything not listed counts as rarest. It only decides
# which character of a keyword `_any_keyword` scans for, so it changes speed, never results.
_COMMON = " etaoinsrhld.,cumwfgyp_-bv(k)=:/jxqz'\"ETAOINSRHLDCUMWFGYPBVKJXQZ"


def _anchor(keyword: str) -> int:
    """The index of the keyword's rarest character (the first of equals)."""
    rank = [_COMMON.find(c) % (len(_COMMON) + 1) for c in keyword]  # not listed: -1 -> rarest
    return rank.index(max(rank))


@cache
def _any_keyword(only: frozenset[str] | None) -> re.Pattern:
    """One pattern that matches where a keyword of the selected rules occurs.

    Each keyword is written as its rarest character followed by lookarounds for the rest
    (`c(?<=ec)(?=ret)` for `ecret`), grouped by that character, so every alternative starts
    with a literal: the regex engine then skips in C to the few positions holding one of
    those characters. One search tells that a text (most texts) holds no keyword at all, ~3x
    faster than one `in` test per keyword (47 of them).
    """
    groups: dict[str, list[str]] = {}
    for k in _keywords(only):
        i = _anchor(k)
        behind = f"(?<={re.escape(k[: i + 1])})" if i else ""
        ahead = f"(?={re.escape(k[i + 1 :])})" if i + 1 < len(k) else ""
        groups.setdefault(k[i], []).append(behind + ahead)
    alternatives = [re.escape(c) if "" in rest else f"{re.escape(c)}(?:{'|'.join(rest)})"
                    for c, rest in groups.items()]
    return re.compile("|".join(alternatives) or "(?!)")


@cache
def _anything(only: frozenset[str] | None) -> re.Pattern:
    """Where a joint or a keyword of the selected rules occurs: one scan that tells that
    `scrub_secrets` has nothing to do (most texts), instead of the joint scan and then the
    keyword scan (~1.4x faster on docstrings, where most texts hold a quote)."""
    return re.compile(f"{_any_keyword(only).pattern}|{_JOINT_EITHER}")


@cache
def _by_anchor(only: frozenset[str] | None) -> dict[str, tuple[tuple[str, int], ...]]:
    """Character -> the selected keywords anchored at it, each with the anchor's index."""
    groups: dict[str, list[tuple[str, int]]] = {}
    for k in _keywords(only):
        i = _anchor(k)
        groups.setdefault(k[i], []).append((k, i))
    return {c: tuple(ks) for c, ks in groups.items()}


def present_keywords(text: str, only: frozenset[str] | None = None) -> set[str]:
    """The keywords of the selected rules that occur in `text` (the set `k in text` gives).

    Every occurrence of a keyword is a match of `_any_keyword` at its anchor character
    (one character wide, so none is skipped); the keywords anchored at that character
    are then tested there. One scan, where a test per keyword (47) scanned the text 47
    times."""
    found: set[str] = set()
    anchored = _by_anchor(only)
    for m in _any_keyword(only).finditer(text):
        at = m.start()
        for k, i in anchored[text[at]]:
            if at >= i and text.startswith(k, at - i):
                found.add(k)
    return found


def scrub_secrets(text: str, only: frozenset[str] | None = None) -> tuple[str, dict[str, int]]:
    """(text with secrets replaced by <KIND>, {kind: count}); `only` limits the kinds."""
    counts: dict[str, int] = {}
    if _anything(only).search(text) is None:  # no joint, no keyword: no rule can match
        return text, counts
    # split secrets first: the first half of one can be a whole token's shape by itself
    text = _scrub_split(text, only, counts)
    present = present_keywords(text, only)
    if not present:
        return text, counts
    for rule, named in _selected(only):
        if not any(k in present for k in rule.keywords):
            continue

        def put(m: re.Match, rule: Rule = rule, named: bool = named, text: str = text) -> str:
            s, e = _span(m, named)
            if not _accept(rule, m, text[s:e], text):
                return m.group()
            counts[rule.kind] = counts.get(rule.kind, 0) + 1
            if not named:
                return f"<{rule.kind}>"
            base = m.start()
            whole = m.group()
            return whole[: s - base] + f"<{rule.kind}>" + whole[e - base :]

        text = rule.pattern.sub(put, text)
    return text, counts


def _scrub_split(text: str, only: frozenset[str] | None, counts: dict[str, int]) -> str:
    """`_scrub_joined` on the windows of text around string joints."""
    if "'" not in text and '"' not in text:  # every joint starts at a quote (two memchr)
        return text
    windows: list[list[int]] = []  # around the joints, merged where they overlap
    for m in _JOINT.finditer(text):
        a, b = max(0, m.start() - _WINDOW), m.end() + _WINDOW
        if windows and a <= windows[-1][1]:
            windows[-1][1] = b
        else:
            windows.append([a, b])
    for a, b in reversed(windows):  # from the end: earlier offsets stay valid
        text = text[:a] + _scrub_joined(text[a:b], only, counts) + text[b:]
    return text


def _scrub_joined(text: str, only: frozenset[str] | None, counts: dict[str, int]) -> str:
    """Secrets split across string literals (`"AKIA12" + "34"`) in a window of text around
    joints: the rules run on the window with the joints taken out, and a secret that spans a
    joint is replaced in the original, joints and all."""
    seg_joined, seg_orig, pieces = [0], [0], []
    pos = 0
    for m in _JOINT.finditer(text):
        pieces.append(text[pos : m.start()])
        pos = m.end()
        seg_joined.append(seg_joined[-1] + len(pieces[-1]))
        seg_orig.append(pos)
    pieces.append(text[pos:])
    joined = "".join(pieces)

    def orig(x: int, end: bool = False) -> int:
        # an end offset maps from its last character, so a joint just after stays out
        k = bisect.bisect_right(seg_joined, x - 1 if end else x) - 1
        base = x - 1 if end else x
        return seg_orig[k] + (base - seg_joined[k]) + (1 if end else 0)

    spans: list[tuple[int, int, str]] = []
    for rule, named in _selected(only):
        if not any(k in joined for k in rule.keywords):
            continue
        for m in rule.pattern.finditer(joined):
            s, e = _span(m, named)
            a, b = orig(s), orig(e, end=True)
            if b - a == e - s:  # spans no joint: the first pass judged it already
                continue
            if any(a < y and x < b for x, y, _ in spans):
                continue
            if not _accept(rule, m, joined[s:e], joined):
                continue
            spans.append((a, b, rule.kind))
            counts[rule.kind] = counts.get(rule.kind, 0) + 1
    for a, b, kind in sorted(spans, reverse=True):
        text = text[:a] + f"<{kind}>" + text[b:]
    return text
