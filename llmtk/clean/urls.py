"""URL filtering, FineWeb's first filter: blocked domains, URL patterns, banned words in URLs.

Lists are files the user supplies (nothing is downloaded; docs/clean.md says where the
usual ones come from). A document without a URL passes. Reasons: `url.blocked_domain`,
`url.blocked_pattern`, `url.banned_word`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from llmtk.errors import ConfigError

_WORDS = re.compile(r"[^a-z0-9]+")


@dataclass(frozen=True)
class UrlFilter:
    blocklist: str = ""  # file: a domain per line (its subdomains too), or a URL prefix
    patterns: str = ""  # file: a substring per line, or `re:REGEX`
    banned_words: str = ""  # file: a word per line; a URL holding one as a word is dropped
    field: str = "url"  # the record's URL field

    @property
    def enabled(self) -> bool:
        return bool(self.blocklist or self.patterns or self.banned_words)


class UrlRules:
    """The loaded lists of a UrlFilter: `check(url) -> reason | None`."""

    def __init__(self, cfg: UrlFilter) -> None:
        self.domains: set[str] = set()
        prefixes: list[str] = []
        for entry in _lines(cfg.blocklist, "url.blocklist"):
            entry = entry.lower()
            if "/" in entry:  # a URL (UT1's `urls` files): a prefix, scheme left out
                prefixes.append(entry.split("://", 1)[-1])
            else:
                self.domains.add(entry.lstrip("."))
        self.prefixes = tuple(prefixes)  # str.startswith takes a tuple: one C call a URL
        substrings, regexes = [], []
        for entry in _lines(cfg.patterns, "url.patterns"):
            if entry.startswith("re:"):
                try:
                    regexes.append(re.compile(entry[3:]))
                except re.error as e:
                    raise ConfigError("url.patterns", f"{cfg.patterns}: bad regular expression "
                                      f"{entry[3:]!r} ({e})") from None
            else:
                substrings.append(re.escape(entry))
        parts = ([f"(?:{'|'.join(substrings)})"] if substrings else []) + \
            [f"(?:{r.pattern})" for r in regexes]
        self.pattern = re.compile("|".join(parts)) if parts else None
        self.words = frozenset(w.lower() for w in _lines(cfg.banned_words, "url.banned_words"))

    def check(self, url: str) -> str | None:
        # the URL is parsed only when there are domains to look up
        if self.domains and (host := _host(url)):
            labels = host.split(".")
            if any(".".join(labels[i:]) in self.domains for i in range(len(labels))):
                return "url.blocked_domain"
        if self.prefixes and url.lower().split("://", 1)[-1].startswith(self.prefixes):
            return "url.blocked_domain"
        if self.pattern is not None and self.pattern.search(url):
            return "url.blocked_pattern"
        if self.words and not self.words.isdisjoint(_WORDS.split(url.lower())):
            return "url.banned_word"
        return None


def _host(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").rstrip(".")
    except ValueError:
        return ""


def host_of(url: str) -> str:
    return _host(url) or "unknown"


def _lines(path: str, key: str) -> list[str]:
    """The entries of a list file: one a line, blank lines and `#` comments skipped."""
    if not path:
        return []
    try:
        with open(path, encoding="utf-8") as f:
            return [s for line in f if (s := line.strip()) and not s.startswith("#")]
    except OSError as e:
        raise ConfigError(key, f"{path}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise ConfigError(key, f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") \
            from None
