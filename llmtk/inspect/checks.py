"""Broken documents and scripts: cheap per-document tests, each a stable snake_case reason.

Every test starts with a C-speed scan (a regex search, `in`, `isascii`) so clean text costs
a few passes over its characters.
"""

from __future__ import annotations

import re

from llmtk.text.html import looks_like_html_page

# Tags of page markup (not `<b>` in prose or `<T>` in code): three of them, or a whole
# page's opening (llmtk.text.html, as clean and train decide it), make a document HTML.
_TAG = re.compile(r"</?(?:div|span|p|a|br|li|ul|ol|table|tr|td|th|script|style|meta|link"
                  r"|img|iframe|nav|footer|header|section|article|form|input|button|h[1-6])"
                  r"\b[^<>]{0,500}>", re.I)
HTML_TAGS = 3
# UTF-8 read as Latin-1/Windows-1252: a lead-byte character (U+00C2..U+00F4) followed by a
# continuation-byte character, as cp1252 shows it (`Ã¤`, `â€™`, `Â `). The same character
# pair that clean's normaliser takes as its hint to repair a text.
_MOJIBAKE = re.compile(
    "[\u00c2-\u00f4][\u0080-\u00bf\u0152\u0153\u0160\u0161\u0178\u017d\u017e"
    "\u0192\u02c6\u02dc\u2013-\u203a\u20ac\u2122]"
)
# C0 controls but tab, newline and carriage return; DEL; C1 controls.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# The ASCII bytes that are not such controls: deleting them from an ASCII text leaves its
# controls (bytes.translate, ~3x faster than the regex scan on docstrings).
_NOT_CONTROL = bytes(b for b in range(128) if not _CONTROL.match(chr(b)))
LONG_LINE = 10_000  # characters in one line: minified code, a table dumped on one line
NEAR_EMPTY = 20  # non-space characters: fewer than this is a near-empty document

REASONS = ("html", "mojibake", "replacement_char", "control_chars", "long_line", "near_empty")


def html_left(text: str) -> bool:
    """A whole page (as llmtk.text.html decides it for clean and train) or 3+ page tags."""
    return "<" in text and (looks_like_html_page(text) or _at_least(_TAG, text, HTML_TAGS))


def broken(text: str, html: bool | None = None) -> list[str]:
    """The reasons (of REASONS) for which `text` looks broken, in that order; html: whether
    the stored text was HTML left in the text (default: html_left(text))."""
    out = []
    if html_left(text) if html is None else html:
        out.append("html")
    ascii_only = text.isascii()
    if not ascii_only:
        if _MOJIBAKE.search(text):
            out.append("mojibake")
        if "\ufffd" in text:
            out.append("replacement_char")
    if has_control(text, ascii_only):
        out.append("control_chars")
    if len(text) > LONG_LINE and _longest_line(text) > LONG_LINE:
        out.append("long_line")
    if len(text) < NEAR_EMPTY * 8 and len("".join(text.split())) < NEAR_EMPTY:
        out.append("near_empty")
    return out


def has_control(text: str, ascii_only: bool | None = None) -> bool:
    """Does text hold a control character (_CONTROL)? ascii_only: text.isascii(), if known."""
    if text.isascii() if ascii_only is None else ascii_only:
        return bool(text.encode("ascii").translate(None, _NOT_CONTROL))
    return _CONTROL.search(text) is not None


def _longest_line(text: str) -> int:
    return max(map(len, text.split("\n")))


# Scripts, by Unicode block; "several scripts" counts those holding at least MIN_SCRIPT
# letters of a document (a quoted name in another script is not a mix).
_SCRIPTS = {
    "latin": re.compile(r"[A-Za-z\u00c0-\u024f]"),
    "cyrillic": re.compile(r"[\u0400-\u04ff]"),
    "greek": re.compile(r"[\u0370-\u03ff]"),
    "arabic": re.compile(r"[\u0600-\u06ff]"),
    "hebrew": re.compile(r"[\u0590-\u05ff]"),
    "devanagari": re.compile(r"[\u0900-\u097f]"),
    "thai": re.compile(r"[\u0e00-\u0e7f]"),
    # Han, kana and hangul as one: Japanese mixes the first two, Korean may hold Hanja.
    "cjk": re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]"),
}
MIN_SCRIPT = 10
_NON_LATIN = re.compile(r"[^\x00-\u024f]")


def scripts(text: str) -> list[str]:
    """The scripts with at least MIN_SCRIPT letters in `text` (ASCII text: latin or none)."""
    if text.isascii() or _NON_LATIN.search(text) is None:
        return ["latin"] if _at_least(_SCRIPTS["latin"], text, MIN_SCRIPT) else []
    return [name for name, pattern in _SCRIPTS.items() if _at_least(pattern, text, MIN_SCRIPT)]


def several_scripts(text: str) -> bool:
    """len(scripts(text)) > 1, without counting Latin letters in a text that has no other
    script's character (most texts: that is a scan per document saved)."""
    if text.isascii() or _NON_LATIN.search(text) is None:
        return False
    return len(scripts(text)) > 1


def _at_least(pattern: re.Pattern, text: str, k: int) -> bool:
    """Does `pattern` occur at least k times in text (stopping at the k-th)?"""
    n = 0
    for _ in pattern.finditer(text):
        n += 1
        if n >= k:
            return True
    return False
