"""Small web archives written with warcio (the reference WARC writer), record by record, so
a test can damage one record's bytes: gzip per record as Common Crawl writes them."""

import gzip
import io

PAGE = """<!DOCTYPE html><html><head><title>{title}</title>{meta}</head><body>
<nav><ul><li><a href="/">Home</a></li><li><a href="/docs">Docs</a></li></ul></nav>
<main><h1>{title}</h1>
<p>{body}</p>
<p>The second paragraph says a little more about {title}, so that the page has a body.</p>
<pre><code>def add(a, b):
    return a + b</code></pre>
</main>
<footer>Copyright 2024 Example Corp. All rights reserved.</footer>
</body></html>"""

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8


def page(title: str, body: str, meta: str = "") -> str:
    return PAGE.format(title=title, body=body, meta=meta)


def record(kind: str, url: str, payload: bytes = b"", content_type: str = "text/html",
           charset: str | None = None, record_id: str | None = None) -> bytes:
    """One uncompressed WARC record as warcio writes it."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    out = io.BytesIO()
    w = WARCWriter(out, gzip=False)
    warc_headers = {"WARC-Record-ID": record_id} if record_id else None
    if kind == "response":
        ctype = content_type + (f"; charset={charset}" if charset else "")
        http = StatusAndHeaders("200 OK", [("Content-Type", ctype)], protocol="HTTP/1.1")
        rec = w.create_warc_record(url, "response", payload=io.BytesIO(payload),
                                   http_headers=http, warc_headers_dict=warc_headers or {})
    elif kind == "request":
        http = StatusAndHeaders("GET / HTTP/1.1", [("Host", "example.org")], is_http_request=True)
        rec = w.create_warc_record(url, "request", payload=io.BytesIO(b""), http_headers=http)
    elif kind == "warcinfo":
        rec = w.create_warcinfo_record("crawl.warc.gz", {"software": "test"})
    else:
        rec = w.create_warc_record(url, kind, payload=io.BytesIO(payload),
                                   warc_content_type="application/warc-fields")
    w.write_record(rec)
    return out.getvalue()


def wrong_length(rec: bytes, delta: int) -> bytes:
    """The record with its WARC Content-Length off by delta bytes."""
    head, sep, rest = rec.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    for i, line in enumerate(lines):
        if line.lower().startswith(b"content-length:"):
            lines[i] = b"Content-Length: %d" % (int(line.split(b":")[1]) + delta)
    return b"\r\n".join(lines) + sep + rest


def members(records: list[bytes]) -> tuple[bytes, list[int]]:
    """The records gzipped one per member, and each member's byte offset."""
    out, offsets = b"", []
    for rec in records:
        offsets.append(len(out))
        out += gzip.compress(rec, mtime=0)
    return out, offsets
