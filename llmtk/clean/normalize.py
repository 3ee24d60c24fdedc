"""Text normalisation: mojibake, escapes, control characters, Unicode, width.

Each step has a cheap test first (ASCII text cannot hold mojibake, no ESC byte means no ANSI
sequence), so clean text costs a few C-speed scans.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

# CSI (ESC [ ... final), OSC (ESC ] ... BEL or ESC \), and two-byte ESC sequences.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
# C0 controls except tab and newline, DEL, C1 controls, zero-width and BOM characters.
_CONTROL_TABLE = {
    c: None
    for c in [*range(0, 9), *range(11, 32), *range(127, 160), 0x200B, 0xFEFF, 0x2060]
}
_CONTROL_TABLE[0x0D] = None  # \r: line endings are made \n before this table runs
# Unicode spaces (NBSP, ideographic space, ...) and line/paragraph separators.
_SPACES = {c: " " for c in [0xA0, 0x1680, *range(0x2000, 0x200B), 0x202F, 0x205F, 0x3000]}
_SPACES.update({0x2028: "\n", 0x2029: "\n", 0x85: "\n", 0x0B: "\n", 0x0C: "\n"})
# The same character sets as regular expressions: a char-class scan is C-speed, and `sub`
# touches only the characters it replaces, while `str.translate` with a dict looks up every
# character of a non-ASCII text (a third of normalisation's time on the man pages).
# (A run is written `[x][x]*`, not `[x]+`: a pattern that starts with a class lets the
# engine skip to that class's characters; one that starts with a repeat is tried at every
# position, four times slower on text without them.)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b\ufeff\u2060]"
                      r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b\ufeff\u2060]*")
_TO_SPACE = re.compile(r"[\xa0\u1680\u2000-\u200a\u202f\u205f\u3000]")
_TO_NEWLINE = re.compile(r"[\u2028\u2029\x85\x0b\x0c]")
_WIDE = {"all": re.compile(r"[\uff01-\uff5e][\uff01-\uff5e]*"),
         "alnum": re.compile(r"[\uff10-\uff19\uff21-\uff3a\uff41-\uff5a]"
                             r"[\uff10-\uff19\uff21-\uff3a\uff41-\uff5a]*")}
# Any character of the three sets: one scan tells whether a non-ASCII text needs any of them
# (most do not, and each scan costs as much as this one).
_SPECIAL = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\xa0\u1680\u2000-\u200b\u2028\u2029\u202f\u205f\u2060\u3000"
    r"\ufeff\uff01-\uff5e]"
)
# UTF-8 read as Latin-1/Windows-1252 leaves a lead-byte character (U+00C2..U+00F4) next to a
# continuation-byte character; only then is ftfy's (slower) check worth running.
_MOJIBAKE_HINT = re.compile(
    "[\u00c2-\u00f4][\u0080-\u00bf\u0152\u0153\u0160\u0161\u0178\u017d\u017e"
    "\u0192\u02c6\u02dc\u2013-\u203a\u20ac\u2122]"
)
_TRAILING_WS = re.compile(r"[ \t]+$", re.M)
_INNER_WS = re.compile(r"(?<=\S)[ \t]{2,}(?=\S)")
_BLANK_LINES = re.compile(r"\n{3,}")

# Full-width ASCII-range forms U+FF01..FF5E -> U+0021..007E.
_WIDTH_ALNUM = {
    c: c - 0xFEE0
    for c in [*range(0xFF10, 0xFF1A), *range(0xFF21, 0xFF3B), *range(0xFF41, 0xFF5B)]
}
_WIDTH_ALL = {c: c - 0xFEE0 for c in range(0xFF01, 0xFF5F)}


_OPENCC: dict[str, object] = {}


@dataclass(frozen=True)
class Normalize:
    enabled: bool = True
    unicode: str = "NFC"  # NFC, NFKC or none
    fix_mojibake: bool = True
    strip_ansi: bool = True
    strip_control: bool = True
    whitespace: bool = True  # unify spaces and line endings, trim lines, <= 1 blank line
    fold_width: str = "alnum"  # none, alnum (letters and digits) or all (incl. punctuation)
    zh_convert: str = "none"  # none, t2s or s2t (OpenCC)

    def __call__(self, text: str, inner_spaces: bool = True) -> str:
        """`inner_spaces=False` leaves runs of spaces inside a line as they are: text
        extracted from HTML has them only in code (the extractor collapsed the rest)."""
        if self.strip_ansi and "\x1b" in text:
            text = _ANSI.sub("", text)
        ascii_only = text.isascii()
        if self.fix_mojibake and not ascii_only:
            text = _fix_mojibake(text)
        # (the steps below cannot make a character of _SPECIAL, so one test serves them all)
        special = ascii_only or _SPECIAL.search(text) is not None
        if self.whitespace:
            if "\r" in text:
                text = text.replace("\r\n", "\n").replace("\r", "\n")
            if not ascii_only and special:  # = text.translate(_SPACES)
                text = _TO_NEWLINE.sub("\n", _TO_SPACE.sub(" ", text))
        if self.strip_control and special:  # = text.translate(_CONTROL_TABLE)
            text = _CONTROL.sub("", text)
        if not ascii_only:
            if self.fold_width != "none" and special:  # = translate(_WIDTH_ALL / _WIDTH_ALNUM)
                kind = "all" if self.fold_width == "all" else "alnum"
                table = _WIDTH_ALL if kind == "all" else _WIDTH_ALNUM
                text = _WIDE[kind].sub(lambda m: m.group().translate(table), text)
            if self.unicode != "none" and not unicodedata.is_normalized(self.unicode, text):
                text = unicodedata.normalize(self.unicode, text)
            if self.zh_convert != "none":
                text = self._convert_zh(text)
        if self.whitespace:
            if " \n" in text or "\t\n" in text or text.endswith((" ", "\t")):
                text = _TRAILING_WS.sub("", text)
            if inner_spaces and ("  " in text or "\t" in text):
                text = _INNER_WS.sub(" ", text)
            if "\n\n\n" in text:
                text = _BLANK_LINES.sub("\n\n", text)
            text = text.strip()
        return text

    def _convert_zh(self, text: str) -> str:
        converter = _OPENCC.get(self.zh_convert)
        if converter is None:  # once per process, kept across --workers chunks
            import opencc

            converter = _OPENCC[self.zh_convert] = opencc.OpenCC(self.zh_convert)
        return converter.convert(text)


def _fix_mojibake(text: str) -> str:
    """Undo UTF-8 decoded as Latin-1/Windows-1252 (ftfy), where ftfy sees damage in a line
    that holds a mojibake hint. (ftfy's test on the lines alone, not the whole text: most
    hints are a letter before a no-break space or a soft hyphen, and the test costs ~2 ms
    on a page's text, 0.04 ms on a line of 200 characters.)"""
    first = _MOJIBAKE_HINT.search(text)
    if first is None:
        return text
    from ftfy import fix_encoding
    from ftfy.badness import is_bad

    lines = set()  # (the start of each line tested)
    for hint in _MOJIBAKE_HINT.finditer(text, first.start()):  # (not scanned again)
        start = text.rfind("\n", 0, hint.start()) + 1
        if start not in lines:
            lines.add(start)
            end = text.find("\n", hint.end())
            if is_bad(text[start:end] if end >= 0 else text[start:]):
                return fix_encoding(text)
    return text
