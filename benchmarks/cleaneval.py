"""Web page cleaning on CleanEval: 739 English pages of 2007 with their text cleaned by hand.

The data: the CleanEval shared task (SIGWAC, 2007; the pages and the annotators' cleaned
text, published for research with no licence stated, so read from a copy and never
redistributed): its development set (58 pages) and final test set (681 annotated pages)
of web pages in English found through search queries, each cleaned by a person: the
running text kept, navigation, headers and footers, link lists and page furniture removed,
with `<p>`, `<h>` and `<l>` marking paragraphs, headings and list items. The task's site is
gone (archive.org keeps it); `j-szulc/html-cleaning-dataset-merged` holds both sets as
`input/NAME.html` + `GoldStandard/NAME.txt`:

    git clone https://github.com/j-szulc/html-cleaning-dataset-merged merged
    taskset -c 0 .venv/bin/python benchmarks/cleaneval.py merged/cleaneval-dev \\
        merged/cleaneval-final

(nothing is downloaded here). The truth is the cleaned text without its markers and the
`URL:` line some files start with. CleanEval asked for all of a page's running text, not
one article: a blog's several posts, a forum thread, a list of items all count, so this set
scores recall of whole pages where the Article Extraction Benchmark scores one article.
Scoring is that benchmark's (benchmarks/article_extraction.py: 4-token shingles of `\\w+`
runs, per-page precision and recall averaged), not CleanEval's edit distance.

Split by site as the other benchmarks are (a hash of the host name of the address in the
page's `<text id="URL">` wrapper line, or in the cleaned file's `URL:` line). Nothing in
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

from article_extraction import (  # noqa: E402
    page_site,
    read_truth,
    set_main,
    site,
    site_half,
)

from llmtk.io.warc import decode_html  # noqa: E402

_URL_LINE = re.compile(r"\A\s*URL:\s*(\S+)")
_MARK = re.compile(r"^[ \t]*<[phl]>", re.M)  # a paragraph, heading or list item starts


def cleaned(gold: str) -> tuple[str, str]:
    """(text, address) of a CleanEval cleaned file: markers and the URL line removed."""
    m = _URL_LINE.match(gold)
    url = m.group(1) if m else ""
    text = gold[m.end():] if m else gold
    return _MARK.sub("", text).strip(), url


def load(folders: list[Path]) -> list[dict]:
    pages = []
    for folder in folders:
        for gold in sorted((folder / "GoldStandard").glob("*.txt")):
            path = folder / "input" / f"{gold.stem}.html"
            if not path.is_file():
                sys.exit(f"{gold}: no page {path}")
            html, _ = decode_html(path.read_bytes())
            true, url = cleaned(read_truth(gold))
            host = page_site(html or "") or (site(url) if url else f"{folder.name}/{gold.stem}")
            pages.append({"key": f"{folder.name}/{gold.stem}", "site": host,
                          "half": site_half(host), "true": true, "html": html or ""})
    if not pages:
        sys.exit(f"{' '.join(map(str, folders))}: no GoldStandard/*.txt")
    return pages


def main() -> None:
    set_main(__doc__, load, "CleanEval sets, each with input/ and GoldStandard/", many=True)


if __name__ == "__main__":
    main()
