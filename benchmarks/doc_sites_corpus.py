"""Build the documentation-sites set: real HTML manuals from generators nobody tuned on.

Reproduce (Debian/Ubuntu with apt-get and dpkg-deb; nothing is installed):

    .venv/bin/python benchmarks/doc_sites_corpus.py DATA_DIR  # -> pages.jsonl, pages.warc.gz
    .venv/bin/python benchmarks/doc_sites.py DATA_DIR    # the scores

It runs `apt-get download` for one Debian -doc package per site (SITES below: MkDocs in its
own theme and in Material, Doxygen three times, RDoc, AsciiDoc, javadoc, texinfo/makeinfo,
gtk-doc, Node.js's doc tool, SQLite's own Tcl generator; the Sphinx and DocBook manuals the
older rules were fitted on are not among them; and LATER: API references added once the first
held-out half had been read, javadoc (its current and its older JDK 8 markup), Doxygen,
haddock and odoc, in a `dev` group and a fresh held-out group `held2`), unpacks them into
DATA_DIR/debs with `dpkg-deb -x` and takes up to --per-site (40) pages of each, chosen by a
hash of the path.

The truth, per page:
  * `truth`: the page's own content, the element(s) the generator puts the document in
    (CONTENT below: MkDocs's `[role=main]`, Doxygen's `.header` and `.contents`, javadoc's
    `main`, ...), less the navigation the generator puts inside it (DROP: an in-page table
    of contents, Doxygen's "Classes | Functions" summary, texinfo's node menu), rendered
    to text by resiliparse with every block kept. The generator's structure says what the
    document is; the extractors under test never see these selectors. (Git's and Node's
    packages also ship the AsciiDoc/Markdown sources, but as markup with include macros
    and front matter, further from the page than its own content element.)
  * `nav`: the page's navigation lines: lines of the whole page's rendering (two words or
    more, or 12 characters) found on at least half of the site's pages and not in the
    page's own truth text (whitespace ignored).
Pages left out: those over 1 MiB (Node's all.html, the whole manual on one page), those
without the content element, with fewer than 30 words of truth, or whose content element is
more than half link text (tables of contents, indexes: a page that is all navigation has no
main text to score).

Written: DATA_DIR/pages.jsonl, one record per page
  {"url", "site" (the package), "group" (LATER's group, else null: doc_sites.py splits those
   by hash), "generator", "content_type", "text" (the HTML), "truth", "nav"}
and the same pages as DATA_DIR/pages.warc.gz, one gzip member per `response` record, as
Common Crawl packs them (benchmarks/extract_quality.py's `response`). URLs are
https://PACKAGE.docs.example/PATH.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import debian_packages  # noqa: E402

# package -> (generator, folder of its HTML inside the package, content selectors, drop)
SITES = {
    "mkdocs-doc": ("mkdocs", "usr/share/doc/mkdocs/html", "[role=main]", ""),
    "mkdocs-literate-nav-doc": ("mkdocs-material", "usr/share/doc/mkdocs-literate-nav-doc/html",
                                "article.md-content__inner", ".md-content__button"),
    "doxygen-doc": ("doxygen", "usr/share/doc/doxygen/html", ".header, .contents",
                    ".toc, .summary, .navpath"),
    "libjsoncpp-doc": ("doxygen", "usr/share/doc/libjsoncpp-doc", ".header, .contents",
                       ".toc, .summary, .navpath"),
    "libssh-doc": ("doxygen", "usr/share/doc/libssh-dev/html", ".header, .contents",
                   ".toc, .summary, .navpath"),
    "asciidoctor-doc": ("rdoc", "usr/share/doc/asciidoctor-doc/html", "main", ""),
    "git-doc": ("asciidoc", "usr/share/doc/git-doc", "#header, #content", ""),
    "libcommons-lang3-java-doc": ("javadoc", "usr/share/doc/libcommons-lang3-java/api", "main",
                                  ""),
    "libgcrypt20-doc": ("texinfo", "usr/share/doc/libgcrypt20-doc/html", "body",
                        ".header, .nav-panel, table.menu, .mini-toc, .contents, .shortcontents"),
    "libglib2.0-doc": ("gtk-doc", "usr/share/gtk-doc/html/glib", "body",
                       "table.navigation, .footer, .toc"),
    "nodejs-doc": ("node-doc", "usr/share/doc/nodejs/api", "#apicontent", "#toc"),
    "sqlite3-doc": ("sqlite-tcl", "usr/share/doc/sqlite3", "body",
                    ".nosearch > a, .tagline, .menu, .searchmenu, .fancy_toc"),
}
# Added later, for the API reference pages the first sites lost recall on, with their group
# fixed here instead of by the hash: `dev` sites the rules may be fitted on, and `held2`, a
# fresh held-out group no rule was looked at on (the first held-out half had been read).
_JAVADOC = ("javadoc", "main", "")
_DOXYGEN = ("doxygen", ".header, .contents", ".toc, .summary, .navpath")
_HADDOCK = ("haddock", "#content", "#synopsis, #table-of-contents")
LATER = {  # package -> (group, folder, generator, content, drop)
    "libcommons-io-java-doc": ("dev", "usr/share/doc/libcommons-io-java/api", *_JAVADOC),
    "libjsoup-java-doc": ("dev", "usr/share/doc/libjsoup-java/api", *_JAVADOC),
    "libcommons-collections4-java-doc": ("dev", "usr/share/doc/libcommons-collections4-java/api",
                                         *_JAVADOC),
    # (built by an older javadoc: no `main`, the class in `.header` and `.contentContainer`)
    "libcommons-math3-java-doc": ("dev", "usr/share/doc/libcommons-math3-java/api", "javadoc8",
                                  ".header, .contentContainer, .classUseContainer", ""),
    "lmdb-doc": ("dev", "usr/share/doc/lmdb-doc/html", *_DOXYGEN),
    "liblog4cplus-doc": ("dev", "usr/share/doc/liblog4cplus-dev/html", *_DOXYGEN),
    "libghc-aeson-doc": ("dev", "usr/share/doc/libghc-aeson-doc/html", *_HADDOCK),
    "libcalendar-ocaml-doc": ("dev", "usr/share/doc/libcalendar-ocaml/_html", "odoc",
                              ".odoc-preamble, .odoc-content", ".odoc-toc"),
    "libcommons-codec-java-doc": ("held2", "usr/share/doc/libcommons-codec-java/api",
                                  *_JAVADOC),
    "junit4-doc": ("held2", "usr/share/doc/junit4/api", *_JAVADOC),
    "libcommons-beanutils-java-doc": ("held2", "usr/share/doc/libcommons-beanutils-java/api",
                                      *_JAVADOC),
    "libjackson2-annotations-java-doc": ("held2",
                                         "usr/share/doc/libjackson2-annotations-java/api",
                                         *_JAVADOC),
    "libnftnl-dev-doc": ("held2", "usr/share/doc/libnftnl-dev/html", *_DOXYGEN),
    "libdvbv5-doc": ("held2", "usr/share/doc/libdvbv5-dev/html", *_DOXYGEN),
    "libghc-megaparsec-doc": ("held2", "usr/share/doc/libghc-megaparsec-doc/html", *_HADDOCK),
    "libghc-cpphs-doc": ("held2", "usr/share/doc/libghc-cpphs-doc/html", *_HADDOCK),
}
GROUPS = {pkg: group for pkg, (group, *_) in LATER.items()}
SITES.update({pkg: (gen, folder, content, drop)
              for pkg, (_, folder, gen, content, drop) in LATER.items()})
MIN_WORDS = 30
MAX_BYTES = 1 << 20
NAV_SHARE = 0.5
_WORD = re.compile(r"\w+")
_SPACE = re.compile(r"\s+")
_OPTIONS = dict(preserve_formatting=True, main_content=False, list_bullets=False,
                alt_texts=False, noscript=False, form_fields=False, comments=False)


def bare(text: str) -> str:
    return _SPACE.sub("", text)


def render(html: str) -> str:
    from resiliparse.extract.html2text import extract_plain_text

    return extract_plain_text(html, **_OPTIONS)


def truth_of(raw: str, content: str, drop: str) -> tuple[str, float] | None:
    """(the page's own content as text, its share of link text), None without it."""
    from resiliparse.parse.html import HTMLTree

    tree = HTMLTree.parse(raw)
    if tree.body is None:
        return None
    if drop:
        for node in tree.body.query_selector_all(drop):
            if node.parent is not None:
                node.parent.remove_child(node)
    nodes = [tree.body] if content == "body" else tree.body.query_selector_all(content)
    if not nodes:
        return None
    html = "".join(n.html for n in nodes)
    text = render(html)
    links = sum(len(a.text.strip()) for n in nodes for a in n.query_selector_all("a[href]"))
    chars = sum(len(n.text.strip()) for n in nodes) or 1
    return text, links / chars


def nav_candidates(raw: str) -> set[str]:
    lines = (_SPACE.sub(" ", x).strip() for x in render(raw).splitlines())
    return {x for x in lines if len(_WORD.findall(x)) >= 2 or len(x) >= 12}


def site_pages(pkg: str, base: Path, per_site: int) -> list[dict]:
    generator, folder, content, drop = SITES[pkg]
    from llmtk.io.warc import decode_html

    root = base / f"x_{pkg}" / folder
    paths = sorted(root.rglob("*.html"), key=lambda p: hashlib.sha1(
        str(p.relative_to(root)).encode()).hexdigest())
    pages = []
    for path in paths:
        if path.stat().st_size > MAX_BYTES:  # one-page copies of a whole manual
            continue
        raw, _ = decode_html(path.read_bytes())
        if not raw:
            continue
        got = truth_of(raw, content, drop)
        if got is None:
            continue
        truth, link_share = got
        if len(_WORD.findall(truth)) < MIN_WORDS or link_share > 0.5:
            continue
        rel = path.relative_to(root)
        pages.append({"url": f"https://{pkg}.docs.example/{rel}", "site": pkg,
                      "group": GROUPS.get(pkg), "generator": generator, "content_type": "text/html",
                      "text": raw, "truth": truth, "bytes": path.read_bytes()})
        if len(pages) >= per_site:
            break
    # navigation: lines on at least half of the site's pages, not in the page's own text
    seen = Counter()
    lines = [nav_candidates(p["text"]) for p in pages]
    for ls in lines:
        seen.update(ls)
    common = {x for x, n in seen.items() if n >= max(2, NAV_SHARE * len(pages))}
    for page, ls in zip(pages, lines, strict=True):
        own = bare(page["truth"])
        page["nav"] = sorted(x for x in ls & common if bare(x) not in own)
    return pages


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path, help="output folder (debs/ is kept there)")
    ap.add_argument("--per-site", type=int, default=40)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from extract_quality import response

    debs = args.data / "debs"
    debian_packages(debs, list(SITES))
    args.data.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(args.data / "pages.jsonl", "w", encoding="utf-8") as out, \
            open(args.data / "pages.warc.gz", "wb") as warc:
        for pkg in SITES:
            pages = site_pages(pkg, debs, args.per_site)
            for page in pages:
                body = page.pop("bytes")
                warc.write(gzip.compress(response(page["url"], body), mtime=0))
                out.write(json.dumps(page, ensure_ascii=False) + "\n")
            n += len(pages)
            navs = sum(bool(p["nav"]) for p in pages)
            print(f"{pkg:<28} {SITES[pkg][0]:<16} {len(pages):>3} pages, "
                  f"{navs} with navigation lines", file=sys.stderr)
    print(f"{n} pages -> {args.data}/pages.jsonl, pages.warc.gz", file=sys.stderr)


if __name__ == "__main__":
    main()
