"""Real web pages as a JSONL corpus: each HTML file's main text, with its language.

Reproduce (the pages of trafilatura's evaluation set: news, blogs, forums, shops, mostly
German and English, saved as the sites served them):

    git clone https://github.com/adbar/trafilatura /tmp/trafilatura
    .venv/bin/python benchmarks/web_pages_corpus.py /tmp/trafilatura/tests/eval \\
        /tmp/trafilatura/tests/cache -o benchmarks/out/web-pages.jsonl
    .venv/bin/python benchmarks/clean_vs_datatrove.py benchmarks/out/web-pages.jsonl --no-cli

Any folders of `.html` (or `.html.gz`) files work. Each page is decoded as UTF-8 (bytes
that are not are replaced), its main text extracted as `llmtk clean --extract resiliparse`
does, and named by `llmtk clean`'s language ID in the `lang` field, the one
clean_vs_datatrove.py compares English agreement on. Pages with no main text are left out.
"""

import argparse
import gzip
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    from llmtk.clean.extract import extract
    from llmtk.text.langid import LanguageId

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", help="folders of .html or .html.gz files")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    langid = LanguageId()
    paths = sorted(p for d in args.folders for p in Path(d).iterdir()
                   if p.name.endswith((".html", ".htm", ".html.gz")))
    n = 0
    with open(args.output + ".tmp", "w", encoding="utf-8") as out:
        for path in paths:
            raw = path.read_bytes()
            if path.name.endswith(".gz"):
                raw = gzip.decompress(raw)
            text = extract(raw.decode("utf-8", errors="replace"), "resiliparse").strip()
            if not text:
                continue
            lang, _ = langid.predict(text)
            out.write(json.dumps({"id": path.name, "lang": lang, "text": text},
                                 ensure_ascii=False) + "\n")
            n += 1
    os.replace(args.output + ".tmp", args.output)
    print(f"wrote {n:,} pages of {len(paths):,} to {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
