"""A second parallel corpus of another genre: GNOME's desktop user help, as plain text.

Reproduce (Debian/Ubuntu with apt-get and dpkg-deb; nothing is installed):

    python3 benchmarks/gnome_help_corpus.py       # -> benchmarks/out/gnome-help.jsonl
                                                   #    (+ gnome-help-untranslated.jsonl)

It runs `apt-get download gnome-user-docs`, unpacks it with `dpkg-deb -x` and converts
every Mallard page of the GNOME Help and the GNOME System Administration Guide
(usr/share/help/<LANG>/{gnome-help,system-admin-guide}/*.page; C is the English original)
to plain text: titles, paragraphs, list and table items one per line, code blocks line by
line. Left out: the <info> block (links, revisions, authors' and translators' credits, the
licence include), editorial <comment>s, <media> (images, video captions), automatic
<links>, and of each <if:choose> every branch but the first (the same branch in every
language, so the texts stay parallel). One record per page and language, in the layout of
benchmarks/manpages_corpus.py:

    {"id": "gnome-help/files-copy/de", "page": "gnome-help/files-copy", "lang": "de",
     "package": "gnome-user-docs", "text": "..."}

Untranslated strings: a translated .page file keeps a paragraph in English when its
translation catalogue lacks it, so a page with more than --max-untranslated (0.1) of its
prose paragraphs identical to English ones goes to gnome-help-untranslated.jsonl instead of
the corpus (see _parallel_corpus.py); the table printed at the end gives the counts per
language.
"""

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import debian_packages  # noqa: E402
from _parallel_corpus import Para, add_block, corpus_args, write_corpus  # noqa: E402
from _parallel_corpus import inline as shared_inline  # noqa: E402

PACKAGE = "gnome-user-docs"
GUIDES = ("gnome-help", "system-admin-guide")
# usr/share/help/<dir> -> our language code (C is the English original)
LANGS = {"C": "en", "de": "de", "fr": "fr", "es": "es", "ru": "ru", "zh_CN": "zh", "ja": "ja",
         "pl": "pl"}
# --more-languages: the other translations with a FineWeb-2 entry in llmtk's thresholds
MORE_LANGS = {"C": "en", "it": "it", "nl": "nl", "pt_BR": "pt", "cs": "cs", "uk": "uk",
              "hu": "hu", "sv": "sv", "da": "da", "fi": "fi", "ro": "ro", "el": "el",
              "id": "id", "vi": "vi", "tr": "tr", "ko": "ko", "ca": "ca", "sl": "sl",
              "lt": "lt", "hr": "hr", "he": "he", "hi": "hi"}
MAL = "{http://projectmallard.org/1.0/}"
IF = "{http://projectmallard.org/if/1.0/}"
# Subtrees that are not running text of the page (see the docstring).
SKIP = {MAL + "info", MAL + "comment", MAL + "media", MAL + "links"}
# Elements whose content is one line of text (a paragraph), unless they hold blocks.
LEAF = {MAL + t for t in ("p", "title", "subtitle", "desc", "code", "screen", "cite")}
# Block-level elements: an element holding one of them is a container, not a line.
BLOCK = LEAF | {MAL + t for t in ("section", "list", "steps", "terms", "tree", "item", "note",
                                  "table", "thead", "tbody", "tfoot", "tr", "td", "th",
                                  "example", "figure", "quote", "synopsis", "listing", "div",
                                  "links")} | {IF + "choose", IF + "when", IF + "if",
                                               IF + "else"}
PRE = {MAL + "screen"}  # preformatted: keep its lines
JOINED = {MAL + "keyseq": "+", MAL + "guiseq": " ▸ "}


def inline(el: ET.Element) -> str:
    """The element's text with skipped subtrees left out; key and menu sequences joined as
    GNOME's help viewer shows them (Ctrl+C, Settings ▸ Network)."""
    return shared_inline(el, SKIP, JOINED)


def lines(el: ET.Element, out: list[Para]) -> None:
    """Append the element's paragraphs to `out`, one per line, as (text, is code)."""
    if el.tag in SKIP or not isinstance(el.tag, str):
        return
    if el.tag == IF + "choose":
        branches = [c for c in el if c.tag in (IF + "when", IF + "else")]
        if branches:
            lines(branches[0], out)
        return
    holds_blocks = any(c.tag in BLOCK for c in el)
    if not holds_blocks and (el.tag in LEAF or (el.text or "").strip()):
        add_block(out, inline(el), code=el.tag in PRE or el.tag == MAL + "code")
        return
    for child in el:
        lines(child, out)


def page_text(path: Path) -> list[Para]:
    """The page's paragraphs as (text, is code)."""
    out: list[Para] = []
    lines(ET.parse(path).getroot(), out)
    return out


def fetch(debs: Path) -> Path:
    debian_packages(debs, [PACKAGE])
    return debs / f"x_{PACKAGE}" / "usr" / "share" / "help"


def main() -> None:
    args = corpus_args(__doc__.splitlines()[0], str(ROOT / "benchmarks" / "out"),
                       "gnome-help", "pages")
    help_dir = fetch(Path(args.debs))
    records = []
    langs = MORE_LANGS if args.more_languages else LANGS
    for sub, lang in langs.items():  # C first: the English pages are the reference
        for guide in GUIDES:
            for path in sorted((help_dir / sub / guide).glob("*.page")):
                records.append((f"{guide}/{path.stem}", lang, PACKAGE, page_text(path)))
    write_corpus(args.output, records, args.max_untranslated, args.min_chars)


if __name__ == "__main__":
    main()
