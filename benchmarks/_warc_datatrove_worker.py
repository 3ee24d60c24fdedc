"""Runs inside benchmarks/.venvs/datatrove (see warc_vs_datatrove.py); not imported by llmtk.

    python _warc_datatrove_worker.py WARC OUT.jsonl

datatrove's WarcReader -> Trafilatura(favour_precision=True), the first stage of its FineWeb
pipeline (examples/fineweb.py, less the URL filter), with datatrove's defaults (a 1 s
extraction timeout per page, in its sandbox process). Writes {"url", "text"} per page it
returns; the last line is a JSON summary: the WARC records it read as documents, the pages
it returned, and the extractor's counters (extracted, timeout, dropped, ...).
"""

import json
import os
import sys


def main() -> None:
    from datatrove.pipeline.extractors import Trafilatura
    from datatrove.pipeline.readers import WarcReader

    path, out = os.path.abspath(sys.argv[1]), sys.argv[2]
    reader = WarcReader(os.path.dirname(path), glob_pattern=os.path.basename(path))
    extractor = Trafilatura(favour_precision=True)  # FineWeb's setting
    read = returned = 0

    def documents():
        nonlocal read
        for doc in reader.run():
            read += 1
            yield doc

    with open(out, "w", encoding="utf-8") as f:
        for doc in extractor.run(documents()):
            returned += 1
            f.write(json.dumps({"url": doc.metadata.get("url", ""), "text": doc.text},
                               ensure_ascii=False) + "\n")
        counters = {k: v.get("total", v) if isinstance(v, dict) else v
                    for k, v in extractor.stats.to_dict()["stats"].items()}
        f.write(json.dumps({"read": read, "returned": returned, "counters": counters}) + "\n")


if __name__ == "__main__":
    main()
