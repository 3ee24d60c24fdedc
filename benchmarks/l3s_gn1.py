"""Main-text extraction on L3S-GN1: 621 English news pages of 2008, labelled by people.

The data: the L3S-GN1 set of Kohlschütter et al., "Boilerplate Detection using Shallow Text
Features" (WSDM 2010; boilerpipe's evaluation set; L3S grants a licence for research use
only, so it is read from its own copy and never redistributed): 621 news articles from 408
sites found through Google News in 2008, each text block labelled by human assessors as
headline, full text, supplemental (captions), related content, comments or not content.
The official copy is a WARC file from L3S; `geodrome/page-signal` holds the same pages
converted to HTML files with the address of each:

    git clone https://github.com/geodrome/page-signal
    taskset -c 0 .venv/bin/python benchmarks/l3s_gn1.py \\
        page-signal/L3S-GN1-20100130203947-00001

(the folder needs `original/`, `annotated/` and `url-mapping.txt`; nothing is downloaded).

Truth is the text of the blocks labelled headline or full text (`x-nc-sel1`, `x-nc-sel2`
spans of the annotated copy), a block a line: the article, as the Article Extraction
Benchmark's truth is, plus its headline. Scoring is that benchmark's
(benchmarks/article_extraction.py: 4-token shingles of `\\w+` runs, per-page precision and
recall averaged). Split by site as the other benchmarks are (a hash of the host name of
the page's address in `url-mapping.txt`). Nothing in llmtk was chosen on these pages.
llmtk's default and trafilatura on the same decoded page, one process (`taskset -c 0`).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from article_extraction import half, set_main  # noqa: E402

from llmtk.io.warc import decode_html  # noqa: E402

ARTICLE = ("x-nc-sel1", "x-nc-sel2")  # headline, full text


def labelled_text(annotated: str, labels=ARTICLE) -> str:
    """The text of the annotated page's blocks whose label is one of `labels`, in page order,
    a block a line."""
    import lxml.html

    root = lxml.html.fromstring(annotated)
    blocks = []
    for span in root.iter("span"):
        if set((span.get("class") or "").split()) & set(labels):
            text = " ".join(span.text_content().split())
            if text:
                blocks.append(text)
    return "\n".join(blocks)


def urls(folder: Path) -> dict[str, str]:
    """uuid -> address, from url-mapping.txt (`<urn:uuid:UUID>` TAB address)."""
    out = {}
    for n, line in enumerate((folder / "url-mapping.txt").read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            urn, url = line.split("\t")
        except ValueError:
            sys.exit(f"{folder / 'url-mapping.txt'}:{n}: expected '<urn:uuid:...>' TAB address")
        out[urn.strip("<>").removeprefix("urn:uuid:")] = url.strip()
    return out


def load(folder: Path) -> list[dict]:
    address = urls(folder)
    pages = []
    for path in sorted((folder / "original").glob("*.html")):
        note = folder / "annotated" / path.name
        if path.stem not in address or not note.is_file():
            sys.exit(f"{path}: no annotated copy or no address in url-mapping.txt")
        html, _ = decode_html(path.read_bytes())
        labelled, _ = decode_html(note.read_bytes())
        url = address[path.stem]
        pages.append({"key": path.stem, "url": url, "half": half(url),
                      "true": labelled_text(labelled or ""), "html": html or ""})
    if not pages:
        sys.exit(f"{folder}: no original/*.html")
    return pages


def main() -> None:
    set_main(__doc__, load, "the L3S-GN1 folder (original/, annotated/)")


if __name__ == "__main__":
    main()
