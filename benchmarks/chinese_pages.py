"""Main-text extraction on Chinese web pages: a hand-made Chinese content extraction set.

The data: `immortal-autumn/Chinese-Web-Content-Extraction-Dataset` (MIT licence), 69 real
Chinese pages (news, blogs, forums, a few institutions; 45 of them 2004-2005 pages in the
CETD/CleanEval wrapper `<text id="URL" ... encoding="gb2312">` and stored in their own
GB2312/GBK bytes, 24 recent UTF-8 pages) with the main text copied out by hand, title,
byline and date left out (`cleaned/NAME.txt`):

    git clone https://github.com/immortal-autumn/Chinese-Web-Content-Extraction-Dataset zh
    taskset -c 0 .venv/bin/python benchmarks/chinese_pages.py zh

(the folder needs `original/*.html` and `cleaned/*.txt`; nothing is downloaded here).

Scoring is the Article Extraction Benchmark's (benchmarks/article_extraction.py: 4-token
shingles, per-page precision and recall averaged) with one change Chinese needs: a CJK
character is a token (`llmtk.text.segment.words`), where `\\w+` would make a clause between
two punctuation marks one token, and the hand-copied truth, hard-wrapped every ~40
characters, would match almost nothing.

Split by site as the other benchmarks are (a hash of the host name); a page's site is the
address in its wrapper line or canonical link, else the host most of its links point to
(`article_extraction.page_site`), else its file name. Nothing in llmtk was chosen on
these pages. llmtk's default and trafilatura on the same decoded page
(`llmtk.io.warc.decode_html`, the charset rules `llmtk clean` applies), one process.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from article_extraction import page_site, read_truth, set_main, site_half  # noqa: E402

from llmtk.io.warc import decode_html  # noqa: E402
from llmtk.text.segment import words  # noqa: E402


def load(folder: Path) -> list[dict]:
    pages = []
    for path in sorted((folder / "original").glob("*.html")):
        truth = folder / "cleaned" / f"{path.stem}.txt"
        if not truth.is_file():
            sys.exit(f"{truth}: missing (each original/NAME.html needs cleaned/NAME.txt)")
        html, _ = decode_html(path.read_bytes())
        host = page_site(html or "") or path.stem
        pages.append({"key": path.stem, "site": host, "half": site_half(host),
                      "true": read_truth(truth), "html": html or ""})
    if not pages:
        sys.exit(f"{folder}: no original/*.html (is it the dataset's checkout?)")
    return pages


def main() -> None:
    set_main(__doc__, load, "the dataset's checkout (original/, cleaned/)", tokenize=words)


if __name__ == "__main__":
    main()
