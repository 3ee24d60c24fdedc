"""Hard-wrapped text (books, manuals, RFCs, e-mail): its lines are a typesetting accident.

The line-based rules (C4's terminal punctuation and sentence count, FineWeb's line
punctuation and short lines, Gopher's duplicate lines, bullet and ellipsis lines) were made
for web text, where a line is a paragraph. In text wrapped at 72 columns most lines end in
the middle of a sentence, so the verdict depends on where the wrap falls, and on the
language (a translation wraps elsewhere). When a text is hard-wrapped those rules see
paragraphs instead: the lines of a paragraph joined into one logical line.

The rule, from the line-length distribution of the non-blank lines:
  - at least MIN_LINES of them, and W, the 90th percentile of their lengths, is a wrap
    column: between MIN_WIDTH and MAX_WIDTH characters (no web paragraph is that short
    that often; a text of one-line paragraphs has a far longer tail);
  - of the lines followed by another line of the same paragraph, at least FULL_SHARE are
    filled: the next line's first word would not have fitted within W (give or take SLACK
    columns), which is what greedy wrapping does and verse does not; and at least
    OPEN_SHARE of them end without terminal punctuation (they break mid-sentence).
A line joins the one before it when that one is filled (its first word would not have
fitted there), the line does not start a list item or an attribution ("-- Author"), and
it is not an indented first line (the way many books and e-mails open a
paragraph; the second line of a hanging indent does join). CJK lines join without a space.
"""

from __future__ import annotations

import re

MIN_LINES = 8
MIN_WIDTH, MAX_WIDTH = 40, 100
FULL_SHARE, SLACK = 0.6, 3
OPEN_SHARE = 0.5
_ENDS = tuple(".!?。！？｡．؟۔।॥:;\"'»”)")
_ITEM = re.compile(r"\s*(?:--?\s|[*•·+–]\s|\d{1,3}[.)]\s|[a-z][.)]\s)")
_CJK_END = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff\uff00-\uffef]$")
_CJK_START = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff\uff00-\uffef]")


def _first_word(line: str) -> int:
    """Length of the first word of a line (of the whole line if it has one word)."""
    line = line.lstrip()
    end = line.find(" ")
    return len(line) if end < 0 else end


def width(lines: list[str]) -> int | None:
    """The wrap column of a hard-wrapped text's lines (see the module doc), else None."""
    sized = [len(s.rstrip()) for s in lines if s.strip()]
    if len(sized) < MIN_LINES:
        return None
    w = sorted(sized)[int(0.9 * (len(sized) - 1))]
    if not MIN_WIDTH <= w <= MAX_WIDTH:
        return None
    # (a line without its trailing blanks, the next line) for two non-blank lines in a row
    pairs = [(a, b) for a, b in zip(map(str.rstrip, lines), lines[1:], strict=False)
             if a.strip() and b.strip()]
    if len(pairs) < MIN_LINES // 2:
        return None
    # Filled: the next line's first word would not have fitted (greedy wrapping), give or
    # take SLACK columns (two spaces after a full stop, justified text). Verse is not.
    full = sum(1 for a, b in pairs if len(a) + 1 + _first_word(b) > w - SLACK)
    open_ = sum(1 for a, _ in pairs if not a.endswith(_ENDS))
    if full < FULL_SHARE * len(pairs) or open_ < OPEN_SHARE * len(pairs):
        return None
    return w


def paragraphs(lines: list[str], w: int) -> list[tuple[str, list[str]]]:
    """[(logical line, its physical lines)], blank lines kept as ("", [line])."""
    out: list[tuple[str, list[str]]] = []
    prev = 0  # length of the last physical line; 0 after a blank one
    indent = 0  # of the last physical line
    for raw in lines:
        line = raw.strip()
        if not line:
            out.append(("", [raw]))
            prev = 0
            continue
        spaced = raw.expandtabs(8) if "\t" in raw else raw
        this = len(spaced) - len(spaced.lstrip())
        # An indented first line opens a paragraph, unless it is the second line of a
        # hanging indent (a list item or definition: the first line is the one further out).
        new_para = this > indent and len(out[-1][1]) > 1 if out else False
        filled = prev and prev + 1 + _first_word(line) > w - SLACK
        if filled and not new_para and not _ITEM.match(raw):
            text, block = out[-1]
            glue = "" if _CJK_END.search(text) and _CJK_START.match(line) else " "
            block.append(raw)  # in place: copying it each line is quadratic in a paragraph
            out[-1] = (text + glue + line, block)
        else:
            out.append((line, [raw]))
        prev, indent = len(raw.rstrip()), this
    return out
