"""Source code as a source: which records are code, in which language, and the code rules.

`llmtk clean --profile code` judges every record as a source file; `--profile auto` judges a
record as code when its `lang` field or its `path` names a programming language, and as
prose otherwise (one corpus can mix The Stack's records with web text). The language comes
from the `lang` field, else the path's file name or extension, else a `#!` line; the rules
per language are data (`code_langs.toml`, or the file `code.rules` names), with the source
of every threshold in docs/clean.md. Every drop has a reason `code.*`.

    rules = CodeRules(Code(profile="code"))
    lang = rules.language(doc.data)            # "python", "unknown", or None (prose)
    reason = rules.check(doc.text, lang, doc.data.get("path"))
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from llmtk.errors import ConfigError

RULES_FILE = Path(__file__).with_name("code_langs.toml")
PROFILES = ("web", "code", "auto")
UNKNOWN = "unknown"  # a code record whose language nothing names: the [default] rules


@dataclass(frozen=True)
class Code:
    """The [code] config section."""

    profile: str = "web"  # web: every record is prose; code: every record is code; auto
    path_field: str = "path"  # the record field with the file's path (The Stack: "path")
    lang_field: str = "lang"  # the record field naming the language (The Stack: "lang")
    rules: str = ""  # a TOML file in code_langs.toml's format to use instead of it


# Spellings of language names as datasets write them (The Stack: "C++", "C#", "Shell").
_ALIASES = {"c++": "cpp", "c#": "csharp", "js": "javascript", "node": "javascript",
            "ts": "typescript", "golang": "go", "py": "python", "python3": "python",
            "bash": "shell", "sh": "shell", "zsh": "shell", "yml": "yaml", "md": "markdown",
            "restructuredtext": "markdown", "make": "makefile", "docker": "dockerfile",
            "plain text": "text", "objective-c": "c"}

_XML_HEAD = "<?xml version="
# StarCoder2's encoded-data shapes, each its own scan (one alternation tried at every
# character was 60% of the code rules' time): base64 runs, runs of 8+ hex bytes written
# 0xNN or \xNN, runs of 8+ \uNNNN escapes. The hex and escape scans run only on a text
# holding their prefix.
_BASE64 = re.compile(r"[A-Za-z0-9+/\n=]{64,}")
_HEX = re.compile(r"(?:0[xX]|\\x)[0-9a-fA-F]{2}(?:[,\s]*(?:0[xX]|\\x)[0-9a-fA-F]{2}){7,}")
_UESC = re.compile(r"(?:\\u[0-9a-fA-F]{4}){8,}")
_ENCODED = ((_BASE64, ()), (_HEX, ("0x", "0X", "\\x")), (_UESC, ("\\u",)))
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:0[xX][0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)[uUlLfF]*"
                     r"(?![\w.])")
# A word starts at a word boundary: the `x1F` of `0x1F` is part of a number, not a word (it
# was counted as both, which held every hex table at exactly half numbers).
_WORD = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*")
# A line of data: number literals (decimal, float, 0x hex, 0b binary, with C/Rust/Go
# suffixes), strings of nothing but escapes ("\x89\x50"), and the punctuation between
# them, maybe an offset comment after: the lines of firmware blobs, embedded fonts and
# images, lookup tables. A separator between literals is required (no backtracking into a
# digit run).
_LIT = (r"(?:[-+]?(?:0[xX][0-9a-fA-F]+|0[bB][01]+|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)"
        r"(?:_?[uUiIfF](?:8|16|32|64|128|size)|[uUlLfF]{1,3})?"
        r"|[bB]?\"(?:\\(?:x[0-9a-fA-F]{1,2}|[0-7]{1,3}|u[0-9a-fA-F]{4}|[abfnrtv0\\\"']))+\""
        r"|[bB]?'(?:\\(?:x[0-9a-fA-F]{1,2}|[0-7]{1,3}|u[0-9a-fA-F]{4}|[abfnrtv0\\\"']))+')")
_DATA_LINE = re.compile(rf"^[ \t{{}}\[\]()]*{_LIT}(?:(?:[ \t]*[,;][ \t{{}}\[\]()]*|[ \t]+){_LIT})*"
                        r"[ \t,;{}\[\]()]*(?://[^\n]*|/\*[^\n]*?\*/|#[^\n]*)?$", re.M)
# An XML file's root element, after the prolog (declaration, comments, doctype).
_XML_ROOT = re.compile(r"\ufeff?(?:\s+|<\?.*?\?>|<!--.*?-->|<!DOCTYPE[^\[>]*(?:\[.*?\])?\s*>)*"
                       r"<([A-Za-z_][\w.:-]*)", re.S)
_HTML_DROP = re.compile(r"<(script|style)\b.*?</\1\s*>|<!--.*?-->", re.S | re.I)
_TAG = re.compile(r"<[^>]*>")

_ASCII_ALNUM = bytes(range(48, 58)) + bytes(range(65, 91)) + bytes(range(97, 123))
_ASCII_ALPHA = bytes(range(65, 91)) + bytes(range(97, 123))
_HIGH = bytes(range(128, 256))  # UTF-8 bytes of non-ASCII characters: letters, mostly
_DIGITS = bytes(range(48, 58))
_ALNUM = _ASCII_ALNUM + _HIGH
_ALPHA = _ASCII_ALPHA + _HIGH


def _share(data: bytes, chars: bytes) -> float:
    """Share of the bytes of `data` that are among `chars` (C-speed: one translate)."""
    return (len(data) - len(data.translate(None, chars))) / len(data) if data else 0.0


def _noted(vals: dict | None, key: str, share: float) -> float:
    """`share`, written to `vals[key]` (rounded) when the caller asked for the values."""
    if vals is not None:
        vals[key] = round(share, 4)
    return share


@dataclass(frozen=True)
class Lang:
    """One language's thresholds ([default] with its [lang.NAME] table on top)."""

    name: str
    max_chars: int | None
    min_chars: int | None
    max_line_length: int | None
    mean_line_length: float | None
    min_alphanum: float | None
    min_alpha: float | None
    max_comment_lines: float | None
    max_numeric_tokens: float | None
    encoded_match_chars: int | None
    encoded_share: float | None
    xml_header: bool
    min_html_text: float | None
    min_html_text_chars: int | None
    minified: bool
    max_array_share: float | None
    data_file: bool
    xml_roots: frozenset[str] | None
    line_comment: tuple[str, ...]
    block_comment: tuple[tuple[str, str], ...]


_FACTS = ("extensions", "names", "shebang")
_BOOLS = ("xml_header", "minified", "data_file")
# Keys added after rules files were written: a file without them has those rules off.
_OPTIONAL = {"max_array_share": False, "data_file": False, "xml_roots": False}


class Table:
    """A rules file, parsed: languages and how to find them, and the file-name lists."""

    def __init__(self, data: dict, source: str) -> None:
        default = data.get("default", {})
        self.langs: dict[str, Lang] = {}
        self.by_ext: dict[str, str] = {}
        self.by_name: dict[str, str] = {}
        self.by_shebang: dict[str, str] = {}
        self.aliases = dict(_ALIASES)
        fields = set(Lang.__dataclass_fields__) - {"name"}
        for name, table in {UNKNOWN: {}, **data.get("lang", {})}.items():
            values = {**_OPTIONAL, **default,
                      **{k: v for k, v in table.items() if k not in _FACTS}}
            unknown = set(values) - fields
            if unknown:
                raise ConfigError(f"lang.{name}", f"unknown key(s) {sorted(unknown)}",
                                  source=source)
            missing = fields - set(values)
            if missing:
                raise ConfigError("default", f"missing key(s) {sorted(missing)}", source=source)
            values = {k: (None if v is False and k not in _BOOLS else v)
                      for k, v in values.items()}
            if values["xml_roots"] is not None:
                values["xml_roots"] = frozenset(values["xml_roots"])
            values["line_comment"] = tuple(values["line_comment"])
            values["block_comment"] = tuple(tuple(p) for p in values["block_comment"])
            self.langs[name] = Lang(name=name, **values)
            for ext in table.get("extensions", []):
                self.by_ext[ext] = name
            for file in table.get("names", []):
                self.by_name[file] = name
            for prog in table.get("shebang", []):
                self.by_shebang[prog] = name
            self.aliases.setdefault(name, name)
        files = data.get("files", {})
        self.lock = frozenset(files.get("lock", []))
        self.generated_names = tuple(files.get("generated", []))
        self.minified_names = tuple(files.get("minified", []))
        self.generated_head = int(files.get("generated_head", 2000))
        self.markers = tuple(m.lower() for m in files.get("generated_markers", []))
        self.generated_lines = int(files.get("generated_lines", 5))
        self.first_line_markers = tuple(m.lower() for m in files.get("generated_first_lines", []))

    def from_name(self, path: str) -> str | None:
        base = path.rsplit("/", 1)[-1]
        if base in self.by_name:
            return self.by_name[base]
        ext = base.rsplit(".", 1)[-1] if "." in base.lstrip(".") else ""
        if not ext:
            return None
        return self.by_ext.get(ext) or self.by_ext.get(ext.lower())

    def from_shebang(self, text: str) -> str | None:
        if not text.startswith("#!"):
            return None
        words = text[2 : text.find("\n") if "\n" in text else len(text)].split()
        if not words:
            return None
        prog = words[0].rsplit("/", 1)[-1]
        if prog == "env":
            rest = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
            if not rest:
                return None
            prog = rest[0].rsplit("/", 1)[-1]
        return self.by_shebang.get(prog) or self.by_shebang.get(prog.rstrip("0123456789.-"))


@cache
def _load(path: str) -> Table:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise ConfigError("code.rules", f"cannot read {path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("code.rules", f"{path}: {e}") from None
    return Table(data, path)


class CodeRules:
    """The code stage of one run: picks a record's language and judges it."""

    def __init__(self, cfg: Code) -> None:
        self.cfg = cfg
        self.table = _load(cfg.rules or str(RULES_FILE))

    def language(self, data: dict, text: str | None = None) -> str | None:
        """The record's programming language; None when it is prose (profile web, or auto
        with nothing naming a language); `unknown` for a code record of no known one."""
        cfg, table = self.cfg, self.table
        if cfg.profile == "web":
            return None
        named = data.get(cfg.lang_field)
        if isinstance(named, str) and named:
            key = named.strip().lower()
            found = table.aliases.get(key) or table.by_ext.get(key)
            if found:
                return found
        path = data.get(cfg.path_field)
        if isinstance(path, str) and path:
            found = table.from_name(path)
            if found:
                return found
        if text is not None:
            found = table.from_shebang(text)
            if found:
                return found
        if cfg.profile == "code":
            return UNKNOWN
        return None

    def check(self, text: str, lang: str, path: str | None = None,
              vals: dict | None = None) -> str | None:
        """None to keep, else the reason (`code.*`)."""
        t = self.table
        r = t.langs.get(lang) or t.langs[UNKNOWN]
        if isinstance(path, str) and path:
            base = path.rsplit("/", 1)[-1]
            if base in t.lock:
                return "code.lock_file"
            if base.endswith(t.generated_names):
                return "code.generated"
            if base.endswith(t.minified_names):
                return "code.minified"
        if r.data_file:  # a data format, whatever its size (CSV, TSV)
            return f"code.{r.name}_data"
        if r.xml_roots is not None and _xml_root(text) not in r.xml_roots:
            return "code.xml_data"
        n = len(text)
        if r.max_chars and n > r.max_chars:
            return "code.too_large"
        if r.min_chars and n < r.min_chars:
            return "code.too_small"
        if r.xml_header and _XML_HEAD in text[:100]:
            return "code.xml_header"
        head = text[: t.generated_head].lower()
        if any(m in head for m in t.markers) and _marker_in_comment(head, t.markers):
            return "code.generated"
        if t.first_line_markers:
            first = "\n".join(head.split("\n", t.generated_lines)[: t.generated_lines])
            if any(m in first for m in t.first_line_markers):
                return "code.generated"
        # the UTF-8 bytes and their digit share, once, for the rules that read them
        data, digits = b"", 0.0
        if r.max_array_share or r.max_numeric_tokens or r.min_alphanum or r.min_alpha:
            data = text.encode("utf-8", "surrogatepass")
            digits = _share(data, _DIGITS)
        if r.max_array_share and _array_share(text, digits, vals) > r.max_array_share:
            return "code.data_array"

        lines = text.split("\n")
        longest = max(map(len, lines))
        mean = (n - len(lines) + 1) / len(lines)
        if vals is not None:
            vals["max_line_length"] = longest
            vals["mean_line_length"] = round(mean, 2)
        if r.max_line_length and longest > r.max_line_length:
            return "code.minified" if r.minified else "code.max_line_length"
        if r.mean_line_length and mean > r.mean_line_length:
            return "code.minified" if r.minified else "code.mean_line_length"

        if r.encoded_match_chars or r.encoded_share:
            reason = _encoded(text, r)
            if reason:
                return reason
        if r.max_numeric_tokens or r.min_alphanum or r.min_alpha:
            if r.max_numeric_tokens and digits > 0.1:
                numbers = len(_NUMBER.findall(text))
                words = len(_WORD.findall(text))
                share = numbers / (numbers + words) if numbers + words else 0.0
                if _noted(vals, "numeric_tokens", share) > r.max_numeric_tokens:
                    return "code.numeric_table"
            if r.min_alphanum and _noted(vals, "alphanum", _share(data, _ALNUM)) < r.min_alphanum:
                return "code.alphanum"
            if r.min_alpha and _noted(vals, "alpha", _share(data, _ALPHA)) < r.min_alpha:
                return "code.alpha"
        if r.max_comment_lines and (r.line_comment or r.block_comment):
            share = comment_share(lines, r.line_comment, r.block_comment)
            if _noted(vals, "comment_lines", share) > r.max_comment_lines:
                return "code.comment_share"
        if r.min_html_text or r.min_html_text_chars:
            visible = len(_TAG.sub("", _HTML_DROP.sub("", text)).strip())
            if vals is not None:
                vals["html_text"] = round(visible / n, 4) if n else 0.0
            if (r.min_html_text_chars and visible < r.min_html_text_chars) or (
                    r.min_html_text and visible < r.min_html_text * n):
                return "code.html_text"
        return None


# How a comment line starts, in the languages of code_langs.toml and the generators' outputs
# (C, shell, SQL/Lua/Haskell, Lisp/asm, HTML/XML, TeX, m4, Pascal/OCaml, BASIC).
_COMMENT_STARTS = ("//", "#", "/*", "*", "--", ";", "<!--", "%", "dnl", "(*", "{-", "'", "rem ",
                   '"""', "!")


def _marker_in_comment(head: str, markers: tuple[str, ...]) -> bool:
    """Is one of the markers on a comment line? A generator program holds the very words
    in a string it writes out (`fmt.Fprintln(w, "// Code generated ... DO NOT EDIT.")`)."""
    for line in head.split("\n"):
        if line.lstrip().startswith(_COMMENT_STARTS) and any(m in line for m in markers):
            return True
    return False


def _xml_root(text: str) -> str | None:
    """The local name of an XML text's root element (`stylesheet` of `<xsl:stylesheet`)."""
    m = _XML_ROOT.match(text)
    return m.group(1).rsplit(":", 1)[-1] if m else None


def _array_share(text: str, digits: float, vals: dict | None) -> float:
    """Share of the characters on data lines (`_DATA_LINE`). A text under 4% digits
    (`digits`, the digit share of its UTF-8 bytes) has too few numbers for a table to be
    most of it, and is not scanned."""
    if digits <= 0.04:
        return 0.0
    share = sum(m.end() - m.start() for m in _DATA_LINE.finditer(text)) / len(text)
    return _noted(vals, "array_share", share)


def _encoded(text: str, r: Lang) -> str | None:
    """StarCoder2's rule: one encoded run over `encoded_match_chars`, or encoded runs over
    `encoded_share` of the file."""
    total = 0
    for pattern, needs in _ENCODED:
        if needs and not any(k in text for k in needs):
            continue
        for m in pattern.finditer(text):
            size = m.end() - m.start()
            if r.encoded_match_chars and size > r.encoded_match_chars:
                return "code.encoded_data"
            total += size
    if r.encoded_share and text and total / len(text) > r.encoded_share:
        return "code.encoded_data"
    return None


def comment_share(lines: list[str], line_comment: tuple[str, ...],
                  block: tuple[tuple[str, str], ...]) -> float:
    """Share of the non-blank lines that are comment only (a line comment, or inside or
    opening a block comment). Strings are not parsed: a comment marker inside a string at
    the start of a line is rare enough not to matter for a share."""
    comment = code = 0
    end: str | None = None  # the closing marker of the block comment we are in
    starts = tuple(b[0] for b in block)
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        if end is not None:
            comment += 1
            if end in line:
                end = None
            continue
        if line_comment and line.startswith(line_comment):
            comment += 1
            continue
        if starts and line.startswith(starts):
            for open_, close in block:
                if line.startswith(open_):
                    if close not in line[len(open_):]:
                        end = close
                    break
            comment += 1
            continue
        code += 1
    total = comment + code
    return comment / total if total else 0.0
