"""Stage: the URL filter, FineWeb's first (llmtk.clean.urls holds the lists and rules)."""

from __future__ import annotations

from llmtk.clean.stages.base import Flag, Stage, Work
from llmtk.clean.urls import UrlFilter, UrlRules, host_of


class UrlStage(Stage):
    name = "url"
    config = UrlFilter
    help = "drop records whose URL is on a blocklist, matches a pattern or holds a banned word"
    reasons = ("url.blocked_domain", "url.blocked_pattern", "url.banned_word")
    flags = (
        Flag("blocklist", ("--url-blocklist",), "File of blocked domains (subdomains match "
             "too) or URL prefixes, one a line: url.blocked_domain."),
        Flag("patterns", ("--url-patterns",), "File of URL substrings (or re:REGEX), one a "
             "line: url.blocked_pattern."),
        Flag("banned_words", ("--url-banned-words",), "File of words, one a line; a URL "
             "holding one as a word is dropped (FineWeb's rule): url.banned_word."),
    )

    def __init__(self, cfg: UrlFilter, whole) -> None:
        super().__init__(cfg, whole)
        self.rules = UrlRules(cfg)

    @classmethod
    def on(cls, cfg: UrlFilter, whole) -> bool:
        return cfg.enabled

    def check(self, work: Work) -> str | None:
        url = work.data.get(self.cfg.field)
        if not isinstance(url, str) or not url:
            return None  # a record without a URL passes
        reason = self.rules.check(url)
        if reason is not None:
            work.doc.count(f"url_dropped.{host_of(url)}")  # per domain, in --stats
        return reason
