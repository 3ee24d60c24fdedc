"""Runs inside benchmarks/.venvs/datatrove (see clean_vs_datatrove.py); not imported by llmtk.

Reads a JSONL(.zst) corpus, applies datatrove's GopherRepetition -> GopherQuality ->
C4Quality -> FineWebQuality filters (default arguments, in the FineWeb order) and writes one
line per document: `keep` or the first failing filter's reason. The last line is a JSON
summary with the filtering time (reading is not timed).
"""

import json
import sys
import time

from _common import read_corpus
from datatrove.data import Document
from datatrove.pipeline.filters import (
    C4QualityFilter,
    FineWebQualityFilter,
    GopherQualityFilter,
    GopherRepetitionFilter,
)


def main() -> None:
    path, out_path, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
    docs = read_corpus(path, limit)
    filters = [
        ("gopher_repetition", GopherRepetitionFilter()),
        ("gopher_quality", GopherQualityFilter()),
        ("c4", C4QualityFilter()),
        ("fineweb", FineWebQualityFilter()),
    ]
    # warm up lazy imports (spaCy) outside the timed loop
    filters[1][1].filter(Document(text="warm up text. " * 60, id="w"))
    results = []
    nbytes = 0
    start = time.process_time()
    for i, d in enumerate(docs):
        doc = Document(text=d["text"], id=str(i))
        nbytes += len(d["text"].encode())
        verdict = "keep"
        for name, flt in filters:
            out = flt.filter(doc)
            if out is not True and (out is False or out[0] is False):
                verdict = f"{name}:{out[1] if isinstance(out, tuple) else 'false'}"
                break
        results.append(verdict)
    seconds = time.process_time() - start
    with open(out_path, "w") as f:
        for v in results:
            f.write(v + "\n")
        f.write(json.dumps({"docs": len(docs), "bytes": nbytes, "seconds": seconds}) + "\n")


if __name__ == "__main__":
    main()
