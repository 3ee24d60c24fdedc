"""A third parallel corpus: the Debian Reference (a system administration guide), per section.

Reproduce (Debian/Ubuntu with apt-get and dpkg-deb; nothing is installed):

    python3 benchmarks/debian_reference_corpus.py   # -> benchmarks/out/debian-reference.jsonl
                                                     #    (+ debian-reference-untranslated.jsonl)

It runs `apt-get download` for debian-reference-{en,de,fr,es,ja,zh-cn} (there is no Russian
or Polish translation), unpacks them with `dpkg-deb -x` and cuts every chapter's XHTML
(usr/share/debian-reference/chNN.LANG.html, DocBook output, parsed with xml.etree) into
its second-level sections ("1.1.3. The root account"; a first-level section without
subsections is one unit), the unit of the comparison: a chapter is too long to be a web
document, and the section ids (`_the_root_account`) are the same in every language. Titles,
paragraphs, list items, definition terms and table rows one per line, `<pre>` blocks line
by line; the chapters' tables of contents, navigation and footnotes lie outside the sections.
One record per section and language, in the layout of benchmarks/manpages_corpus.py:

    {"id": "ch01/_the_root_account/de", "page": "ch01/_the_root_account", "lang": "de",
     "package": "debian-reference-de", "text": "..."}

po4a keeps a string in English when the translation lacks it, so sections with more than
--max-untranslated (0.1) of their prose paragraphs identical to English ones go to
debian-reference-untranslated.jsonl (see _parallel_corpus.py).
"""

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import debian_packages  # noqa: E402
from _parallel_corpus import Para, add_block, corpus_args, write_corpus  # noqa: E402
from _parallel_corpus import inline as shared_inline  # noqa: E402

# package suffix (and file name infix) -> our language code; English first
LANGS = {"en": "en", "de": "de", "fr": "fr", "es": "es", "ja": "ja", "zh-cn": "zh"}
MORE_LANGS = {"en": "en", "it": "it", "pt": "pt", "id": "id"}  # --more-languages
H = "{http://www.w3.org/1999/xhtml}"
LEAF = {H + t for t in ("h1", "h2", "h3", "h4", "h5", "h6", "p", "li", "dt", "dd", "td", "th",
                        "pre", "caption")}
BLOCK = LEAF | {H + t for t in ("div", "ul", "ol", "dl", "table", "thead", "tbody", "tr",
                                "blockquote")}
SKIP = {H + "img", H + "script", H + "style"}


def inline(el: ET.Element) -> str:
    return shared_inline(el, SKIP)


def lines(el: ET.Element, out: list[Para]) -> None:
    """Append the element's paragraphs to `out`, one per line, as (text, is code)."""
    if el.tag in SKIP or not isinstance(el.tag, str):
        return
    if el.tag == H + "tr" and not any(c.tag in BLOCK for cell in el for c in cell):
        # a table row of plain cells is one line, as a browser shows it
        cells = (re.sub(r"\s+", " ", inline(c)).strip() for c in el)
        out.append((" ".join(c for c in cells if c), False))
        return
    if not any(c.tag in BLOCK for c in el) and (el.tag in LEAF or (el.text or "").strip()):
        add_block(out, inline(el), code=el.tag == H + "pre")
        return
    for child in el:
        lines(child, out)


def is_section(el: ET.Element) -> bool:
    return el.tag == H + "div" and el.get("class") == "section"


def section_id(sec: ET.Element) -> str:
    return next(a.get("id") for a in sec.iter(H + "a") if a.get("id"))


def units(path: Path):
    """(section id, paragraphs) for every second-level section of a chapter (a first-level
    one without subsections is one unit)."""
    body = ET.parse(path).getroot().find(H + "body")
    chapter = next(d for d in body if d.get("class") in ("chapter", "appendix", "preface"))
    for sect1 in filter(is_section, chapter):
        subs = [c for c in sect1 if is_section(c)]
        for sec in subs or [sect1]:
            out: list[Para] = []
            lines(sec, out)
            yield section_id(sec), out


def fetch(debs: Path, langs: dict) -> Path:
    debian_packages(debs, [f"debian-reference-{x}" for x in langs])
    return debs


def main() -> None:
    args = corpus_args(__doc__.splitlines()[0], str(ROOT / "benchmarks" / "out"),
                       "debian-reference", "sections")
    langs = MORE_LANGS if args.more_languages else LANGS
    debs = fetch(Path(args.debs), langs)
    records = []
    for suffix, lang in langs.items():
        pkg = f"debian-reference-{suffix}"
        base = debs / f"x_{pkg}" / "usr" / "share" / "debian-reference"
        for path in sorted(base.glob(f"ch*.{suffix}.html")):
            chapter = path.name.split(".")[0]
            for sid, paras in units(path):
                records.append((f"{chapter}/{sid}", lang, pkg, paras))
    write_corpus(args.output, records, args.max_untranslated, args.min_chars)


if __name__ == "__main__":
    main()
