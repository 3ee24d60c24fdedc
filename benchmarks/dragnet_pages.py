"""Main-text extraction on the Dragnet data: 1,381 English pages of 2012 with corrected text.

The data: Moz's training and test data for Dragnet (`seomoz/dragnet_data`; the data is
under the AGPLv3, the code under MIT): 1,381 real pages collected in 2012 (news, blogs,
company and product pages, forums) with the main content copied out by hand and corrected
(`Corrected/NAME.html.corrected.txt`), the page's comments after a marker line
("!@#$%^&*()  COMMENTS"), which is where the truth ends here:

    git clone https://github.com/seomoz/dragnet_data dragnet
    (cd dragnet && tar xzf dragnet_HTML.tar.gz && tar xzf dragnet_Corrected.tar.gz)
    taskset -c 0 .venv/bin/python benchmarks/dragnet_pages.py dragnet

(`HTML/NAME.html` + `Corrected/NAME.html.corrected.txt`; the layout of the merged copy in
`j-szulc/html-cleaning-dataset-merged`, `dragnet_data/input/NAME.html` +
`GoldStandard/NAME.txt`, is read too; nothing is downloaded here).

Scoring is the Article Extraction Benchmark's (benchmarks/article_extraction.py: 4-token
shingles of `\\w+` runs, per-page precision and recall averaged). Split by site as the
other benchmarks are (a hash of the host name); the pages are stored without their
address, so a page's site is its canonical or `og:url` address (808 pages), else the host
most of its links point to (`article_extraction.page_site`), else its file name. Nothing in
llmtk was chosen on these pages. llmtk's default and trafilatura on the same decoded page,
one process (`taskset -c 0` for one core).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from article_extraction import page_site, read_truth, set_main, site_half  # noqa: E402

from llmtk.io.warc import decode_html  # noqa: E402

# The line between the article and its comments; typed by hand, so its symbols vary
# ("!@#$%^&*()  COMMENTS", "!@ $%^&*()  COMMENTS", ...).
_COMMENTS = re.compile(r"^[!@#$%^&*() \t]{4,}COMMENTS\s*$", re.M)


def article(corrected: str) -> str:
    """The corrected text without the comments after the marker line."""
    m = _COMMENTS.search(corrected)
    return corrected[:m.start()] if m else corrected


def _pairs(folder: Path) -> list[tuple[str, Path, Path]]:
    """(name, page, truth) in either layout."""
    if (folder / "HTML").is_dir():
        return [(p.stem, p, folder / "Corrected" / f"{p.name}.corrected.txt")
                for p in sorted((folder / "HTML").glob("*.html"))]
    return [(p.stem, p, folder / "GoldStandard" / f"{p.stem}.txt")
            for p in sorted((folder / "input").glob("*.html"))]


def load(folder: Path) -> list[dict]:
    pages = []
    for key, path, truth in _pairs(folder):
        if not truth.is_file():
            sys.exit(f"{truth}: missing (each page needs its corrected text)")
        html, _ = decode_html(path.read_bytes())
        host = page_site(html or "") or key
        true = article(read_truth(truth))
        pages.append({"key": key, "site": host, "half": site_half(host), "true": true,
                      "html": html or ""})
    if not pages:
        sys.exit(f"{folder}: no pages (needs HTML/ and Corrected/, untarred)")
    return pages


def main() -> None:
    set_main(__doc__, load, "the dragnet_data checkout, tarballs unpacked")


if __name__ == "__main__":
    main()
