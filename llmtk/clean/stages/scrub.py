"""Stages: secrets, then PII, replaced by placeholders (llmtk.text.secrets, llmtk.text.pii).

They run last, on both roads, so that placeholders do not change what the filters measure;
secrets go before PII so that a password in `user:pw@host` is not taken for an e-mail
address.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmtk.clean.stages.base import CODE, WEB, Flag, Stage, Work, one_of
from llmtk.errors import ConfigError

PII_KINDS = ("EMAIL", "PHONE", "ID_NUMBER", "CARD", "IP")
SECRET_SCRUB = ("code", "all", "off")


@dataclass(frozen=True)
class Secrets:
    # Which records lose their secrets (llmtk.text.secrets): code records only (the
    # default: prose rarely holds keys, and the rules then cost nothing), every record, none.
    scrub: str = "code"
    kinds: list[str] = field(default_factory=list)  # empty: every kind of secrets.toml


@dataclass(frozen=True)
class Pii:
    enabled: bool = True
    kinds: list[str] = field(default_factory=lambda: list(PII_KINDS))


class SecretsStage(Stage):
    name = "secrets"
    config = Secrets
    help = "replace private keys, API tokens and passwords with placeholders"
    roads = (WEB, CODE)
    flags = (
        Flag("scrub", ("--secrets",), "Replace private keys, API tokens and passwords in URLs "
             "and connection strings with placeholders in: code (code records), all, or off."),
    )

    def __init__(self, cfg: Secrets, whole) -> None:
        super().__init__(cfg, whole)
        self.kinds = frozenset(cfg.kinds) if cfg.kinds else None

    @classmethod
    def validate(cls, cfg: Secrets) -> None:
        one_of("secrets.scrub", cfg.scrub, SECRET_SCRUB)
        if cfg.kinds:
            from llmtk.text.secrets import kinds

            _known_kinds("secrets.kinds", cfg.kinds, kinds())

    @classmethod
    def on(cls, cfg: Secrets, whole) -> bool:
        return cfg.scrub != "off"

    def check(self, work: Work) -> str | None:
        if work.road == CODE or self.cfg.scrub == "all":
            from llmtk.text.secrets import scrub_secrets

            _replace(work, "secrets", scrub_secrets, self.kinds)
        return None


class PiiStage(Stage):
    name = "pii"
    config = Pii
    help = "replace e-mails, phones, ID and card numbers, IPs with placeholders"
    roads = (WEB, CODE)
    flags = (
        Flag("enabled", ("--pii/--no-pii",), "Replace e-mails, phones, ID and card numbers, "
             "IPs with placeholders."),
    )

    def __init__(self, cfg: Pii, whole) -> None:
        super().__init__(cfg, whole)
        self.kinds = frozenset(cfg.kinds)

    @classmethod
    def validate(cls, cfg: Pii) -> None:
        _known_kinds("pii.kinds", cfg.kinds, PII_KINDS)

    @classmethod
    def on(cls, cfg: Pii, whole) -> bool:
        return cfg.enabled

    def check(self, work: Work) -> str | None:
        from llmtk.text.pii import scrub

        _replace(work, "pii", scrub, self.kinds)
        return None


def _replace(work: Work, name: str, scrubber, kinds: frozenset[str] | None) -> None:
    """Put placeholders in the text; --stats counts them per kind (`pii.EMAIL`)."""
    work.text, counts = scrubber(work.text, kinds)
    for kind, n in counts.items():
        work.doc.count(f"{name}.{kind}", n)
    work.scrubbed = True


def _known_kinds(key: str, given: list[str], known) -> None:
    bad = set(given) - set(known)
    if bad:
        raise ConfigError(key, f"unknown kind(s) {sorted(bad)} (expected {', '.join(known)})")
