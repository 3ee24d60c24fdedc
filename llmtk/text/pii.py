"""PII scrubbing: e-mail, phone, Chinese resident ID, bank card and IP addresses.

Each kind is replaced by a typed placeholder (`<EMAIL>`, `<PHONE>`, `<ID_NUMBER>`, `<CARD>`,
`<IP>`). Where a number carries a checksum it is verified, so numbers that merely look like
one are left alone: Chinese ID numbers need a valid birth date and the ISO 7064 MOD 11-2 check
character, card numbers a known issuer prefix and the Luhn check digit.

Technical text and code are full of things shaped like addresses and phone numbers that are
nobody's personal data, so each candidate must also read as what it looks like:
  - an IP address must be public (`ipaddress`' `is_global`, not multicast; IPv6 only in the
    global unicast range 2000::/3, which keeps `A::B`, `be::` and `dead::beef` out) and must
    not read as a version or section number: not every part small (`1.2.0.1`, `21.3.5.7`),
    not after a word such as "version", "release" or "section" or a version specifier's
    operator (`pkg==93.184.216.34`, `~> `), not glued to a name
    (`linux-2.6.35.5`), an epoch (`1:3.0.1.2`) or a suffix (`4.19.0.2-1`, `.in-addr`),
    and not a network (`10.1.0.0`, `2a00:1450::`), a placeholder (`123.45.67.89`,
    `101.102.103.104`) or a public service everybody's configuration names (the public
    DNS resolvers, the root name servers);
  - a phone number after "+" must start with an assigned country code, have 8-15 digits
    in all (10 when written without separators) and a national part of at least 3
    distinct digits, and not be a signed decimal (`+3.140000`), a dotted thousands group
    (`+12.345.678`) or a counting placeholder (`+1234567890`); a North American number
    keeps one kind of separator (`252.227-7013` is a clause); a Chinese mobile number is
    not the tail of a decimal and not a round number (`15000000000`).
benchmarks/pii_precision.py measures both sides on real text and code (docs/clean.md).

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
# Only global unicast (2000::/3) can be a public IPv6 address: its first group is 2xxx or
# 3xxx, written with four digits, which is also what the scan starts on.
_IP6 = re.compile(
    r"[23](?<![\w:][23])[0-9A-Fa-f]{3}(?::[0-9A-Fa-f]{0,4}){2,7}(?![\w:])"
)
# Every match starts with a digit, "+" or "(": the pattern consumes that character first, as
# one character class, which lets the regex engine skip to the next candidate in C (with a
# group first it tries all five alternatives at every character: 10x slower on man pages).
# Each alternative then checks with a lookbehind which character it began with.
_TAIL = r"[3-9]\d(?:[ -]?\d{4}){2}(?!\w)"  # a Chinese mobile number after its leading "1"
_DIGITS = re.compile(
    rf"""
    [\d+(](?:
    (?P<id>(?<=\d)(?<![\w./]\d)\d{{16}}[\dXx](?!\w|\.\d))
  | (?P<card>(?<=\d)(?<![\w./-]\d)(?:\d{{3}}(?:[ -]?\d{{4}}){{2}}(?:[ -]?\d{{1,7}})?
        | \d{{3}}[ -]\d{{6}}[ -]\d{{4,5}})(?![\w-]|\.\d))  # 4-4-4-4 or Amex/Diners 4-6-5
  | (?P<ip4>(?<=\d)(?<![\w.]\d)\d{{0,2}}(?:\.\d{{1,3}}){{3}}(?![\w]|\.\w))
  | (?P<cnmobile>(?<=\+)86[ -]?1(?<![\w+]1){_TAIL}
      | (?<=8)6[ -]?1(?<![\w+]1){_TAIL}
      | (?<=1)(?<![\w+.]1){_TAIL})
  | (?P<phone>(?<=\+)(?<![\w+~=./*^-]\+)\d{{1,3}}[ .-]?(?:\(\d{{1,4}}\)[ .-]?)?\d{{1,4}}
        (?:[ .-]?\d{{2,4}}){{2,4}}(?!\w|\.\d)
      | (?<=\()(?<!\w\()\d{{3}}\)[ .-]?\d{{3}}[ .-]\d{{4}}(?!\w)
      | (?<=\d)(?<![\w.]\d)\d{{2}}[.-]\d{{3}}[.-]\d{{4}}(?!\w|\.\d))
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
    if len(digits) > 16 and digits == s and not digits.startswith("62"):
        return False  # 17-19 digits in one run: a 64-bit integer, unless UnionPay's
    return 13 <= len(digits) <= 19 and _issuer_ok(digits) and luhn_ok(digits)


# Assigned ITU-T E.164 country codes; no code is the prefix of another, so a number's
# first 1, 2 or 3 digits name at most one.
_CC1 = frozenset("17")
_CC2 = frozenset("20 27 30 31 32 33 34 36 39 40 41 43 44 45 46 47 48 49 51 52 53 54 55 56 57 "
                 "58 60 61 62 63 64 65 66 81 82 84 86 90 91 92 93 94 95 98".split())
_CC3 = frozenset(str(n) for lo, hi in (
    (211, 213), (216, 216), (218, 258), (260, 269), (290, 291), (297, 299), (350, 359),
    (370, 378), (380, 383), (385, 387), (389, 389), (420, 421), (423, 423), (500, 509),
    (590, 599), (670, 670), (672, 683), (685, 692), (800, 800), (808, 808), (850, 850),
    (852, 853), (855, 856), (870, 870), (878, 878), (880, 883), (886, 886), (888, 888),
    (960, 968), (970, 977), (979, 979), (992, 996), (998, 998)) for n in range(lo, hi + 1))


def _country_code(digits: str) -> int:
    """Length of the assigned country code `digits` starts with; 0 if none."""
    if digits[:1] in _CC1:
        return 1
    if digits[:2] in _CC2:
        return 2
    return 3 if digits[:3] in _CC3 else 0


def _phone_ok(s: str) -> bool:
    """A "+" number shaped like a phone number: not a signed decimal or a padded count."""
    digits = _NON_DIGIT.sub("", s)
    cc = _country_code(digits)
    if not cc or not 8 <= len(digits) <= 15 or len(set(digits[cc:])) < 3:
        return False
    if digits in _COUNTING:  # "+1234567890": a placeholder, not a number anyone has
        return False
    if s[1:].isdigit():  # written as one run ("+14155552671"), as E.164 numbers are
        return len(digits) >= 10  # "+31557600" is a signed count
    groups = re.split(r"[ .()-]+", s[1:])
    seps = set(re.findall(r"[ .()-]", s))
    if seps == {"-"} and len(groups) == 3 and len(groups[1]) == len(groups[2]) == 2:
        return False  # an ISO 8601 date with a long year: "+10000-12-31"
    if seps == {"."}:
        # "+3.140000" is a decimal, "+12.345.678" a number in thousands
        return len(groups) > 2 and any(len(g) != 3 for g in groups[1:])
    return True


# A word before a dotted number that makes it a version, section or other numbering.
_NUMBERING = frozenset(
    "version versions ver v vers release releases rel revision rev r build update patch "
    "firmware fw kernel linux section sections sect sec subsection subclause clause chapter "
    "chap ch paragraph para par item step figure fig table tab appendix annex rfc policy "
    "standard standards oid part article art rule level no number tag milestone sp "
    "§".split())
_WORD_BEFORE = re.compile(r"(?<!\w)([A-Za-z]+|§)[\s:=(#,.]*\Z")  # a word, not a name's end
# A version specifier's operator (pip, Poetry, Bundler): what follows it is a version. A
# single "=" is left out: "ip=93.184.216.34" is an address.
_PIN_BEFORE = re.compile(r"(?:[=!<>~]=|~>)\s*\Z")


# Public services everybody's resolver configuration names: the public DNS resolvers
# (Google, Cloudflare, Quad9, OpenDNS) and the root name servers. Nobody's personal data.
_SERVICES = tuple(ipaddress.ip_network(n) for n in (
    "8.8.8.8/32", "8.8.4.4/32", "1.1.1.1/32", "1.0.0.1/32", "9.9.9.9/32", "149.112.112.0/24",
    "208.67.216.0/21", "2001:4860:4860::/48", "2606:4700:4700::/48", "2620:fe::/48",
    "2620:119::/32", "198.41.0.4/32", "199.9.14.201/32", "170.247.170.2/32", "192.33.4.12/32",
    "199.7.91.13/32", "192.203.230.10/32", "192.5.5.241/32", "192.112.36.4/32",
    "198.97.190.53/32", "192.36.148.17/32", "192.58.128.30/32", "193.0.14.129/32",
    "199.7.83.42/32", "202.12.27.33/32", "2001:500::/30", "2001:7fd::/32", "2001:7fe::/32",
    "2001:dc3::/32", "2801:1b8:10::/48"))


_DOC6 = ipaddress.ip_network("3fff::/20")


def _service(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return any(ip in n for n in _SERVICES if n.version == ip.version)


def _ip4_ok(text: str, start: int, end: int) -> bool:
    """A public IPv4 address, in a place where it reads as one."""
    parts = text[start:end].split(".")
    # leading zeros ("01.02.2024") are dates or versions, not addresses
    if not all(p == "0" or (not p.startswith("0") and int(p) <= 255) for p in parts):
        return False
    a, b, c, d = nums = [int(p) for p in parts]
    if d == 0:  # a network ("10.1.0.0"), not a host
        return False
    # small parts: a version or section number ("1.2.0.1", "21.3.5.7", "2.39.90.1",
    # "4.6.0.152", "115.0.2.1"); random public addresses are this small 0.8% of the time
    if max(a, b, c, d) <= 31 or (a <= 9 and max(b, c) <= 99) or max(b, c) <= 9:
        return False
    if len({x - i for i, x in enumerate(nums)}) == 1 or len(set(nums)) == 1 or "".join(
            parts) in _COUNTING:
        return False  # a placeholder: "101.102.103.104", "123.123.123.123", "123.45.67.89"
    ip = ipaddress.IPv4Address(text[start:end])
    if not ip.is_global or ip.is_multicast or _service(ip):
        return False
    before = text[max(0, start - 2):start]
    if (before[-1:] == "-" and before[:1].isalnum()) or (before[-1:] == ":"
                                                         and before[:1].isdigit()):
        return False  # "linux-2.6.35.5", an epoch "1:3.0.1.2", "rfc4880:5.2.3.16"
    if re.match(r"[-+~]\w", text[end:end + 2]):
        return False  # "4.6.0.152-fe9c", "3.0.1.2-5", "1.2.3.4+svn"
    if _PIN_BEFORE.search(text, max(0, start - 4), start):
        return False  # a pinned version: "pkg==93.184.216.34", "gem 'x', '~> 93.1.1.2'"
    m = _WORD_BEFORE.search(text, max(0, start - 32), start)
    if m is not None:
        word = m.group(1).lower()
        if word in _NUMBERING or word.endswith("version"):
            return False
    return True


def _ip6_ok(s: str) -> bool:
    if s.endswith("::"):
        return False  # a prefix ("2a00:1450::/32"), not a host
    try:
        ip = ipaddress.IPv6Address(s)
    except ValueError:
        return False
    # 2000::/3 by the pattern; is_global leaves out documentation, Teredo etc., but not
    # 3fff::/20, documentation since RFC 9637 (2024)
    return ip.is_global and ip not in _DOC6 and not _service(ip)


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
        return put("IP", s) if _ip6_ok(s) else s

    def digits(m: re.Match) -> str:
        group, s = m.lastgroup, m.group()
        if group == "id":
            if valid_cn_id(s):
                return put("ID_NUMBER", s)
            return put("CARD", s) if valid_card(s) else s
        if group == "card":
            return put("CARD", s) if valid_card(s) else s
        if group == "ip4":
            return put("IP", s) if _ip4_ok(m.string, m.start(), m.end()) else s
        if group == "cnmobile":
            return put("PHONE", s) if len(set(_NON_DIGIT.sub("", s)[-10:])) >= 3 else s
        if s[0] == "+":
            return put("PHONE", s) if _phone_ok(s) else s
        if s[0] != "(" and s[3] != s[7]:
            return s  # "252.227-7013": a North American number keeps one separator
        return put("PHONE", s) if len(set(_NON_DIGIT.sub("", s)[-7:])) >= 3 else s

    if "@" in text:
        text = _EMAIL.sub(email, text)
    if "::" in text or text.count(":") >= 7:
        text = _IP6.sub(ip6, text)
    if _HAS_DIGIT.search(text):
        text = _DIGITS.sub(digits, text)
    return text, counts


_HAS_DIGIT = re.compile(r"\d")
_NON_DIGIT = re.compile(r"\D")
_COUNTING = "01234567890123456789 98765432109876543210"
