"""PII scrubbing: e-mail, phone, Chinese resident ID, bank card and IP addresses.

Each kind is replaced by a typed placeholder (`<EMAIL>`, `<PHONE>`, `<ID_NUMBER>`, `<CARD>`,
`<IP>`). Where a number carries a checksum it is verified, so numbers that merely look like
one are left alone: Chinese ID numbers need a valid birth date and the ISO 7064 MOD 11-2 check
character, card numbers a known issuer prefix and the Luhn check digit. IP addresses are
validated with the standard library's `ipaddress`.

One regular expression with named groups finds candidates in a single pass; the order of the
alternatives resolves overlaps (an 18-digit ID is tried before a phone number).
"""

from __future__ import annotations

import ipaddress
import re
from datetime import date

KINDS = ("EMAIL", "PHONE", "ID_NUMBER", "CARD", "IP")

# Three scans, each starting with a character class so that the regex engine skips quickly
# to candidate positions: e-mail (only when the text has an '@'), IPv6 (only when it has "::"
# or 7 colons), and everything made of digits. Left boundaries are checked after the first
# character with a two-character lookbehind, which keeps that fast first-character scan.
_EMAIL = re.compile(
    r"[A-Za-z0-9](?<![\w.+-][A-Za-z0-9])[A-Za-z0-9._%+-]*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*"
    r"\.[A-Za-z]{2,}(?![\w-])"
)
_IP6 = re.compile(
    r"[0-9A-Fa-f:](?<![\w:][0-9A-Fa-f:])[0-9A-Fa-f]{0,3}(?::[0-9A-Fa-f]{0,4}){2,7}(?![\w:])"
)
# Every match starts with a digit, "+" or "(": the pattern consumes that character first, as
# one character class, which lets the regex engine skip to the next candidate in C (with a
# group first it tries all five alternatives at every character: 10x slower on man pages).
# Each alternative then checks with a lookbehind which character it began with.
_TAIL = r"[3-9]\d(?:[ -]?\d{4}){2}(?!\w)"  # a Chinese mobile number after its leading "1"
_DIGITS = re.compile(
    rf"""
    [\d+(](?:
    (?P<id>(?<=\d)(?<!\w\d)\d{{16}}[\dXx](?!\w))
  | (?P<card>(?<=\d)(?<![\w-]\d)\d{{3}}(?:[ -]?\d{{4}}){{2}}(?:[ -]?\d{{1,7}})?(?![\w-]))
  | (?P<ip4>(?<=\d)(?<![\w.]\d)\d{{0,2}}(?:\.\d{{1,3}}){{3}}(?![\w]|\.\d))
  | (?P<cnmobile>(?<=\+)86[ -]?1(?<![\w+]1){_TAIL}
      | (?<=8)6[ -]?1(?<![\w+]1){_TAIL}
      | (?<=1)(?<![\w+]1){_TAIL})
  | (?P<phone>(?<=\+)(?<![\w+]\+)\d{{1,3}}[ .-]?(?:\(\d{{1,4}}\)[ .-]?)?\d{{1,4}}
        (?:[ .-]?\d{{2,4}}){{2,4}}(?!\w)
      | (?<=\()(?<!\w\()\d{{3}}\)[ .-]?\d{{3}}[ .-]\d{{4}}(?!\w)
      | (?<=\d)(?<!\w\d)\d{{2}}[.-]\d{{3}}[.-]\d{{4}}(?!\w))
    )
    """,
    re.VERBOSE,
)

_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_ID_CHECK = "10X98765432"


def valid_cn_id(s: str) -> bool:
    """18-character Chinese resident ID: a real birth date and the MOD 11-2 check character."""
    if len(s) != 18 or not s[:17].isdigit():
        return False
    try:
        born = date(int(s[6:10]), int(s[10:12]), int(s[12:14]))
    except ValueError:
        return False
    if not 1900 <= born.year <= 2100:
        return False
    total = sum(int(ch) * w for ch, w in zip(s[:17], _ID_WEIGHTS, strict=True))
    return _ID_CHECK[total % 11] == s[17].upper()


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _issuer_ok(d: str) -> bool:
    """Known card issuer prefixes (Visa, Mastercard, Amex, Discover, UnionPay, JCB, Diners)."""
    n = len(d)
    if d[0] == "4":
        return n in (13, 16, 19)
    two, four = int(d[:2]), int(d[:4])
    if 51 <= two <= 55 or 2221 <= four <= 2720:
        return n == 16
    if two in (34, 37):
        return n == 15
    if d.startswith(("6011", "65")) or 644 <= int(d[:3]) <= 649:
        return 16 <= n <= 19
    if two == 62:
        return 16 <= n <= 19
    if 3528 <= four <= 3589:
        return 16 <= n <= 19
    if two in (36, 38, 39) or 300 <= int(d[:3]) <= 305:
        return 14 <= n <= 19
    return False


def valid_card(s: str) -> bool:
    digits = s.replace(" ", "").replace("-", "")
    return 13 <= len(digits) <= 19 and _issuer_ok(digits) and luhn_ok(digits)


def _valid_ip4(s: str) -> bool:
    parts = s.split(".")
    # Leading zeros ("01.02.2024") are dates or versions, not addresses.
    return all(p == "0" or (not p.startswith("0") and int(p) <= 255) for p in parts)


def _valid_ip6(s: str) -> bool:
    if s.count(":") < 2:
        return False
    try:
        ipaddress.IPv6Address(s)
    except ValueError:
        return False
    return True


def scrub(text: str, kinds: frozenset[str] | None = None) -> tuple[str, dict[str, int]]:
    """(text with PII replaced, {kind: count}); `kinds` limits what is replaced."""
    counts: dict[str, int] = {}

    def put(kind: str, s: str) -> str:
        if kinds is not None and kind not in kinds:
            return s
        counts[kind] = counts.get(kind, 0) + 1
        return f"<{kind}>"

    def email(m: re.Match) -> str:
        if m.string.endswith("://", 0, m.start()):
            return m.group()  # the user of a URL (https://user@host/), not an address
        return put("EMAIL", m.group())

    def ip6(m: re.Match) -> str:
        s = m.group()
        return put("IP", s) if _valid_ip6(s) else s

    def digits(m: re.Match) -> str:
        group, s = m.lastgroup, m.group()
        if group == "id":
            if valid_cn_id(s):
                return put("ID_NUMBER", s)
            return put("CARD", s) if valid_card(s) else s
        if group == "card":
            return put("CARD", s) if valid_card(s) else s
        if group == "ip4":
            return put("IP", s) if _valid_ip4(s) else s
        return put("PHONE", s)  # cnmobile, phone

    if "@" in text:
        text = _EMAIL.sub(email, text)
    if "::" in text or text.count(":") >= 7:
        text = _IP6.sub(ip6, text)
    if _HAS_DIGIT.search(text):
        text = _DIGITS.sub(digits, text)
    return text, counts


_HAS_DIGIT = re.compile(r"\d")
