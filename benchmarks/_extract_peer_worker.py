"""Runs inside benchmarks/.venvs/extract (see extract_quality.py); not imported by llmtk.

    python _extract_peer_worker.py PEER WARC OUT.jsonl

PEER: datatrove (WarcReader + Trafilatura with FineWeb's settings), resiliparse (fastwarc +
resiliparse's main-content extraction, as DCLM runs it), trafilatura (warcio + trafilatura
with its defaults); fastwarc, warcio: parsing alone (payloads read, nothing extracted).
Writes {"url", "text"} per document; prints nothing else.
"""

import json
import sys


def datatrove(path: str):
    import os

    from datatrove.pipeline.extractors import Trafilatura
    from datatrove.pipeline.readers import WarcReader

    reader = WarcReader(os.path.dirname(path), glob_pattern=os.path.basename(path))
    extractor = Trafilatura(favour_precision=True)  # FineWeb's setting
    for doc in extractor.run(reader.run()):
        yield doc.metadata.get("url", ""), doc.text


def resiliparse(path: str):
    from fastwarc.warc import ArchiveIterator, WarcRecordType
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.encoding import bytes_to_str, detect_encoding
    from resiliparse.parse.html import HTMLTree

    with open(path, "rb") as f:
        for rec in ArchiveIterator(f, record_types=WarcRecordType.response):
            body = rec.reader.read()
            html = bytes_to_str(body, detect_encoding(body))
            text = extract_plain_text(HTMLTree.parse(html), main_content=True,
                                      preserve_formatting=True, alt_texts=False)
            yield rec.headers.get("WARC-Target-URI", ""), text


def trafilatura(path: str):
    import trafilatura as t
    from warcio.archiveiterator import ArchiveIterator

    with open(path, "rb") as f:
        for rec in ArchiveIterator(f):
            if rec.rec_type != "response":
                continue
            body = rec.content_stream().read()
            yield rec.rec_headers.get_header("WARC-Target-URI"), t.extract(body) or ""


def fastwarc(path: str):
    """Parsing alone: every response record's payload read, nothing extracted."""
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    with open(path, "rb") as f:
        for rec in ArchiveIterator(f, record_types=WarcRecordType.response):
            yield rec.headers.get("WARC-Target-URI", ""), str(len(rec.reader.read()))


def warcio(path: str):
    """Parsing alone, with warcio (the reference implementation)."""
    from warcio.archiveiterator import ArchiveIterator

    with open(path, "rb") as f:
        for rec in ArchiveIterator(f):
            if rec.rec_type == "response":
                body = rec.content_stream().read()
                yield rec.rec_headers.get_header("WARC-Target-URI"), str(len(body))


def main() -> None:
    peer, path, out = sys.argv[1:4]
    run = {"datatrove": datatrove, "resiliparse": resiliparse, "trafilatura": trafilatura,
           "fastwarc": fastwarc, "warcio": warcio}[peer]
    with open(out, "w", encoding="utf-8") as f:
        for url, text in run(path):
            f.write(json.dumps({"url": url, "text": text}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
