"""Web archives as input: WARC 1.0/1.1, ARC and WET, plain or gzip (per record or whole file).

A parser of our own rather than fastwarc or warcio: both trust `Content-Length`, so one
wrong length loses every later record of the file, and a truncated gzip member is half a
page or an exception (measured in benchmarks/extract_quality.py --hostile). Here every
record is checked to end where its length says (the `\\r\\n\\r\\n` separator, then the next
header or the end of the file); a record that does not is one counted bad record, and
reading goes on at the next `WARC/1.x` header line. A damaged or truncated gzip member
costs the record inside it.

What becomes a document: a `response` (or `resource`) record whose payload is HTML or
XHTML, as `{id, url, date, TEXT, content_type, charset}` where TEXT is the decoded HTML
(`llmtk clean` extracts the main text); a WET `conversion` record as its plain text. The
rest is skipped with a named reason (`warc.request`, `warc.metadata`, `warc.not_html`,
`warc.binary`, ...), counted, never an error. Payloads are sniffed: a PNG served as
`text/html` is `warc.binary`, never text. Charset: a byte-order mark, then the HTTP header,
then `<meta charset>` / the XML declaration, then detection (charset-normalizer), with the
WHATWG label mapping (ISO-8859-1 is read as Windows-1252, GB2312/GBK as GB18030, ...).
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator

# zlib-ng's zlib, in CPython's zlib module's clothes: the same bytes out and the same errors
# (with zlib's messages) on damaged members, and inflating Common Crawl's gzip members plus
# their CRC-32 at about half the CPU (0.30 -> 0.21 s for the 90 MB of benchmarks/
# warc_vs_datatrove.py's dev half); a third of what `llmtk clean` spends reading a WARC.
from zlib_ng import zlib_ng as zlib

from llmtk.io.record import Invalid, Parsed, Skipped

CHUNK = 1 << 20
FEED = 1 << 16  # compressed bytes given to zlib a call (_Stream._gzip_pieces)
MAX_HEADER = 64 << 10  # a WARC or HTTP header block longer than this is not one
# A record header line, for resync: _Stream.find takes a match only at a line's start.
# The WARC one opens with a literal, so the regex engine skips ahead by a fast search.
_HEADER = re.compile(rb"WARC/1\.[01]\r?\n")
_ARC_HEADER = re.compile(rb"(?m)^\S+ \S+ \d{14} \S* \d+\n")
_ARC_LINE = re.compile(rb"(\S+) (\S+) (\d{14}) (\S*) (\d+)\n")


# ------------------------------------------------------------------ detection


def warc_kind(head: bytes) -> str | None:
    """'warc' or 'arc' from a regular file's first bytes (gzip or plain), else None."""
    if head.startswith(b"\x1f\x8b"):
        try:
            head = zlib.decompressobj(wbits=31).decompress(head, 64)
        except zlib.error:
            return None
    head = head.lstrip(b"\r\n")
    if head.startswith(b"WARC/1."):
        return "warc"
    if head.startswith(b"filedesc://"):
        return "arc"
    return None


# ------------------------------------------------------------------ the byte stream


class _Stream:
    """The decompressed bytes of a file, a window at a time, with what went wrong where.

    Positions are logical (offsets into the decompressed stream). `members` maps the
    logical start of each gzip member to its offset in the file (what Common Crawl's index
    calls a record's offset); `breaks` holds (logical position, message, member's offset in
    the file) where bytes were lost: a corrupt member, or the end of the file inside one.
    """

    def __init__(self, f) -> None:
        self.buf = bytearray()
        self.base = 0  # logical offset of buf[0]
        self.eof = False
        self.gzip = f.peek(2)[:2] == b"\x1f\x8b"
        self.members: dict[int, int] = {}
        self.breaks: list[tuple[int, str, int]] = []
        self.bytes_read = 0  # decompressed bytes so far
        self._pending = 0  # logical bytes the piece generator has produced
        self._pieces = self._gzip_pieces(f) if self.gzip else self._plain_pieces(f)

    @property
    def end(self) -> int:
        return self.base + len(self.buf)

    def _plain_pieces(self, f) -> Iterator[bytes]:
        self.members[0] = 0
        while chunk := f.read1(CHUNK):
            yield chunk

    def _gzip_pieces(self, f) -> Iterator[bytes]:
        d = None
        start = 0  # file offset of the current member
        offset = 0  # file offset of chunk[pos]
        chunk, pos = b"", 0
        view = memoryview(chunk)
        while True:
            if pos >= len(chunk):
                chunk, pos = f.read1(CHUNK), 0
                if not chunk:
                    break
                view = memoryview(chunk)
            if d is None:
                if chunk[pos] == 0:  # zero padding between members, as gzip allows
                    pad = len(chunk) - pos - len(chunk[pos:].lstrip(b"\0"))
                    pos, offset = pos + pad, offset + pad
                    if pos >= len(chunk):
                        continue
                d, start = zlib.decompressobj(wbits=31), offset
                self.members[self._pending] = start
            # FEED bytes at most a call: at a member's end zlib copies the rest of its input
            # to unused_data, and a chunk holds many members (Common Crawl gzips each
            # record): fed whole, a chunk was copied once per member in it
            piece = view[pos:pos + FEED]
            try:
                out = d.decompress(piece)
            except zlib.error as e:
                self.breaks.append((self._pending, f"corrupt gzip member at byte offset "
                                    f"{start} ({e})", start))
                # go on at the next gzip member header after the damaged member's start
                skip = 1 if offset == start else 0
                chunk, offset = _next_member(f, chunk[pos:], offset, skip)
                pos, view = 0, memoryview(chunk)
                d = None
                continue
            if out:
                self._pending += len(out)
                yield out
            used = len(piece) - len(d.unused_data) if d.eof else len(piece)
            pos, offset = pos + used, offset + used
            if d.eof:
                d = None
        if d is not None:
            self.breaks.append((self._pending, f"truncated gzip member at byte offset "
                                f"{start} (the file ends inside it)", start))

    def fill(self) -> bool:
        """Read one more piece; False at the end of the file."""
        if self.eof:
            return False
        try:
            piece = next(self._pieces)
        except StopIteration:
            self.eof = True
            return False
        self.buf += piece
        self.bytes_read += len(piece)
        return True

    def ensure(self, end: int) -> bool:
        """Hold the bytes up to logical `end`; False if the file ends before."""
        while self.end < end:
            if not self.fill():
                return False
        return True

    def at(self, pos: int, n: int) -> bytes:
        i = pos - self.base
        with memoryview(self.buf) as view:  # one copy (a bytearray slice, then bytes: two)
            return view[i:i + n].tobytes()

    def drop_before(self, pos: int) -> None:
        """Forget the bytes before pos; they leave memory in batches (each `del` moves
        what remains, so a delete per record would cost a buffer's worth per record)."""
        if pos - self.base >= max(len(self.buf) // 2, 1):
            del self.buf[:pos - self.base]
            self.base = pos
        for k in [k for k in self.members if k < pos]:
            del self.members[k]

    def break_in(self, start: int, end: int) -> tuple[int, str] | None:
        for where, message, _ in self.breaks:
            if start < where <= end:
                return where, message
        return None

    def find(self, pattern: re.Pattern, start: int) -> int | None:
        """Logical position of the first match of pattern at or after `start` that begins a
        line (or the window)."""
        while True:
            m = pattern.search(self.buf, max(start - self.base, 0))
            while m is not None and m.start() > 0 and self.buf[m.start() - 1] != 0x0A:
                m = pattern.search(self.buf, m.start() + 1)
            if m is not None:
                return m.start() + self.base
            start = max(start, self.end - 32)  # a header cut by the window's end is kept
            if len(self.buf) > 4 * CHUNK:  # scanning a long stretch: hold a bounded window
                self.drop_before(start - 1)
            if not self.fill():
                return None

    def where(self, pos: int) -> tuple[int, bool]:
        """(offset to report, is it an offset in the file) for a logical position."""
        if pos in self.members:
            return self.members[pos], True
        return pos, not self.gzip


def _next_member(f, chunk: bytes, offset: int, skip: int) -> tuple[bytes, int]:
    """Read on to the next gzip member header; (the bytes from there, their file offset)."""
    pos = skip
    while True:
        i = chunk.find(b"\x1f\x8b\x08", pos)
        if i >= 0:
            return chunk[i:], offset + i
        keep = chunk[-2:]
        offset += len(chunk) - len(keep)
        more = f.read1(CHUNK)
        if not more:
            return b"", offset + len(keep)
        chunk, pos = keep + more, 0


# ------------------------------------------------------------------ records


def read_warc(path: str, kind: str, max_record: int, text_field: str = "text") -> Iterator:
    """Parsed / Invalid / Skipped events of one file, in order, and ints (bytes read)."""
    with open(path, "rb", buffering=CHUNK) as f:
        s = _Stream(f)
        parse = _warc_record if kind == "warc" else _arc_record
        header = _HEADER if kind == "warc" else _ARC_HEADER
        pos = 0
        number = 0
        reported = 0
        charged = 0  # s.breaks[:charged] are accounted for
        while True:
            if s.bytes_read > reported:
                yield s.bytes_read - reported
                reported = s.bytes_read
            pos = _skip_blank(s, pos)
            # A gzip member lost whole (it gave no bytes) lies between two records, where no
            # record's check sees it: it is one bad record of its own.
            while charged < len(s.breaks) and s.breaks[charged][0] <= (
                    s.end if pos is None else pos):
                _, message, offset = s.breaks[charged]
                charged += 1
                number += 1
                yield Invalid(number, _break_reason(message), message, offset=offset)
            if pos is None:
                break
            number += 1
            event, resume = parse(s, pos, number, max_record)
            if isinstance(event, Invalid):
                offset, in_file = s.where(pos)
                event.offset = offset
                if not in_file:
                    event.message += " (offset in the uncompressed stream)"
                nxt = s.find(header, resume)
                if nxt is None:
                    s.drop_before(s.end)
                    while s.fill():  # the rest of the file holds no record
                        s.drop_before(s.end)
                    yield event
                    break
                resume = nxt
                while charged < len(s.breaks) and s.breaks[charged][0] <= resume:
                    charged += 1  # a break inside the bad record's span is that record's
            elif isinstance(event, Parsed) and text_field != "text":
                event.data[text_field] = event.data.pop("text")
            yield event
            s.drop_before(resume)
            pos = resume
        if s.bytes_read > reported:
            yield s.bytes_read - reported


def _skip_blank(s: _Stream, pos: int) -> int | None:
    """The position of the next non-blank byte (records may be padded with newlines)."""
    while True:
        if not s.ensure(pos + 1):
            return None
        i = pos - s.base
        while i < len(s.buf) and s.buf[i] in b"\r\n":
            i += 1
        if i < len(s.buf):
            return i + s.base
        pos = i + s.base


def _blank_line(buf, start: int, stop: int) -> tuple[int, int]:
    """(index, length) of the first blank line in buf[start:stop] that ends a header: CRLF
    CRLF as the standard says, or LF LF as some writers (and hand-made archives) have it;
    (-1, 0) when there is none."""
    i = buf.find(b"\r\n\r\n", start, stop)
    j = buf.find(b"\n\n", start, stop if i < 0 else i)
    return (j, 2) if j >= 0 else (i, 4) if i >= 0 else (-1, 0)


def _header_end(s: _Stream, pos: int) -> int | None:
    """Logical position just after the blank line that ends a header block at pos: CRLF
    CRLF as the standard says, or LF LF as some writers (and hand-made archives) have it."""
    start = pos
    while True:
        # search no further than MAX_HEADER: a header without its end would scan the window
        at, length = _blank_line(s.buf, start - s.base, pos - s.base + MAX_HEADER)
        if at >= 0:
            return at + s.base + length
        if s.end - pos > MAX_HEADER:
            return None
        start = max(pos, s.end - 3)
        if not s.fill():
            return None


def _warc_record(s: _Stream, pos: int, number: int, max_record: int):
    """(event, logical position where the next record may start)."""
    def bad(reason: str, message: str, resume: int):
        return Invalid(number, reason, message), resume

    s.ensure(pos + 8)
    if not s.at(pos, 7) == b"WARC/1.":
        return bad("io.warc_header", "not a WARC record header (expected WARC/1.0 or WARC/1.1)",
                   pos + 1)
    end = _header_end(s, pos)
    if end is None:
        hit = s.break_in(pos, s.end)
        if hit is not None:
            return bad(_break_reason(hit[1]), hit[1], hit[0])
        return bad("io.truncated" if s.eof else "io.warc_header",
                   "record header is not terminated by a blank line", pos + 1)
    head = s.at(pos, end - pos)
    if b"\nWARC/1." in head:  # a header cut short, and the next record's header after it
        return bad("io.warc_header", "record header is cut short (another record header "
                   "starts inside it)", pos + 1)
    headers = _parse_headers(head[head.index(b"\n") + 1:])
    try:
        length = int(headers.get("content-length", ""))
        if length < 0:
            raise ValueError
    except ValueError:
        return bad("io.warc_header", "record header has no valid Content-Length", pos + 1)
    block_end = end + length
    if length > max_record:
        return bad("io.record_too_long", f"record longer than --max-record-bytes "
                   f"({max_record:,} bytes)", end)
    complete = s.ensure(block_end + 4)
    hit = s.break_in(pos, min(block_end + 4, s.end))
    if hit is not None:
        return bad(_break_reason(hit[1]), hit[1], hit[0])
    if not complete and not s.ensure(block_end):
        return bad("io.truncated", f"Content-Length {length} runs past the end of the file "
                   f"({s.end - end} bytes of the block are there)", end)
    if not _ends_record(s, block_end, _NEXT_WARC):
        return bad("io.warc_length", f"Content-Length {length} does not end the record (no "
                   "record separator and next header after it): the length is wrong", end)
    block = s.at(end, length)
    return _warc_event(headers, block, number, max_record), block_end


def _ends_record(s: _Stream, block_end: int, next_header: re.Pattern) -> bool:
    """Is block_end followed by a record separator, then the next header or the end?

    The standard's separator is CRLF CRLF; a bare LF pair is accepted as well."""
    s.ensure(block_end + 32)
    after = s.at(block_end, 32)
    rest = after.lstrip(b"\r\n")
    if len(after) - len(rest) < 2:
        return False
    if not rest:
        return s.eof and s.end <= block_end + len(after)
    return next_header.match(rest) is not None


_NEXT_WARC = re.compile(rb"WARC/1\.[01]\r?\n")
_NEXT_ARC = re.compile(rb"\S+ \S+ \d{14} ")


def _break_reason(message: str) -> str:
    return "io.truncated" if message.startswith("truncated") else "io.corrupt"


_FIELD = re.compile(r"^([^:\n]+):(.*)", re.M)  # (lines split at LF alone, as before)
_SPACE = " \t\r\n\x0b\x0c"  # what bytes.strip() strips (str.strip() strips more)


def _parse_headers(block: bytes) -> dict[str, str]:
    """`name: value` lines (after a header's first line) as {lowercase name: value}; the
    last of a repeated name wins, a line without a colon is passed over."""
    text = block.decode("utf-8", "replace")  # one decode a block, not two a line
    if "\n " in text or "\n\t" in text or text[:1] in (" ", "\t"):
        return _parse_folded(text)
    return {k.strip(_SPACE).lower(): v.strip(_SPACE) for k, v in _FIELD.findall(text)}


def _parse_folded(text: str) -> dict[str, str]:
    """_parse_headers for a block with folded continuation lines (obsolete, still seen)."""
    headers: dict[str, str] = {}
    name = None
    for raw in text.split("\n"):
        line = raw.rstrip("\r")
        if not line:
            continue
        if line[:1] in (" ", "\t") and name is not None:  # a folded continuation line
            headers[name] += " " + line.strip(_SPACE)
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        name = key.strip(_SPACE).lower()
        headers[name] = value.strip(_SPACE)
    return headers


def _warc_event(h: dict[str, str], block: bytes, number: int, max_record: int):
    kind = h.get("warc-type", "").lower()
    meta = {"id": h.get("warc-record-id", "").strip(), "url": h.get("warc-target-uri", ""),
            "date": h.get("warc-date", "")}
    if kind == "conversion":  # WET: the text of a page
        return Parsed({**meta, "text": block.decode("utf-8", "replace"),
                        "content_type": "text/plain", "charset": "utf-8"}, number)
    if kind in ("response", "resource"):  # a resource, or a response stored without HTTP
        return _payload(meta, block, number, http=block.startswith(b"HTTP/"),
                        content_type=h.get("content-type", ""), max_record=max_record)
    return Skipped(number, f"warc.{re.sub(r'[^a-z]', '_', kind) or 'untyped'}")


def _arc_record(s: _Stream, pos: int, number: int, max_record: int):
    def bad(reason: str, message: str, resume: int):
        return Invalid(number, reason, message), resume

    s.ensure(pos + 4096)
    nl = s.buf.find(b"\n", pos - s.base, pos - s.base + 4096)
    m = _ARC_LINE.match(s.at(pos, nl + 1 - (pos - s.base))) if nl >= 0 else None
    if m is None:
        return bad("io.warc_header", "not an ARC record header line", pos + 1)
    url, _ip, date, ctype, length = (x.decode("utf-8", "replace") for x in m.groups())
    end = pos + m.end()
    block_end = end + int(length)
    if int(length) > max_record:
        return bad("io.record_too_long", f"record longer than --max-record-bytes "
                   f"({max_record:,} bytes)", end)
    s.ensure(block_end + 2)
    hit = s.break_in(pos, min(block_end + 1, s.end))
    if hit is not None:
        return bad(_break_reason(hit[1]), hit[1], hit[0])
    if s.end < block_end:
        return bad("io.truncated", f"length {length} runs past the end of the file", end)
    if not _arc_ends(s, block_end):
        return bad("io.warc_length", f"length {length} does not end the record: the length "
                   "is wrong", end)
    if url.startswith("filedesc://"):
        return Skipped(number, "warc.arc_filedesc"), block_end
    meta = {"id": f"{url} {date}", "url": url,
            "date": f"{date[:4]}-{date[4:6]}-{date[6:8]}T{date[8:10]}:{date[10:12]}:"
                    f"{date[12:14]}Z"}
    block = s.at(end, int(length))
    http = block.startswith(b"HTTP/")
    return _payload(meta, block, number, http=http, content_type=ctype,
                    max_record=max_record), block_end


def _arc_ends(s: _Stream, block_end: int) -> bool:
    """An ARC record ends with one LF, then the next header line or the end of the file."""
    s.ensure(block_end + 4096)  # the next header line holds a URL: room for a long one
    after = s.at(block_end, 4096)
    rest = after.lstrip(b"\r\n")
    if after[:1] != b"\n" and after != b"":
        return False
    if not rest:
        return s.eof and s.end <= block_end + len(after)
    return _NEXT_ARC.match(rest) is not None


# ------------------------------------------------------------------ payloads

_BINARY_MAGIC = (b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"%PDF", b"PK\x03\x04", b"\x1f\x8b",
                 b"RIFF", b"\x00\x00\x01\x00", b"wOFF", b"wOF2", b"OggS", b"ID3", b"BM",
                 b"\x7fELF", b"MZ", b"\xca\xfe\xba\xbe", b"7z\xbc\xaf", b"Rar!")
_HTML_TYPES = ("text/html", "application/xhtml+xml", "application/xhtml")
_LOOKS_HTML = re.compile(rb"^\s*(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html|head|body)\b",
                         re.I | re.S)


def _payload(meta: dict, block: bytes, number: int, *, http: bool, content_type: str = "",
             max_record: int = 0):
    if http:
        status, headers, body = _split_http(block)
        if status is None:
            return Skipped(number, "warc.bad_http")
        if not 200 <= status < 300:
            return Skipped(number, "warc.http_status")
        content_type = headers.get("content-type", "")
        body = _decode_transfer(headers, body, max_record)
        if body is None:
            return Skipped(number, "warc.content_encoding")
    else:
        body = block
    mime, _, params = content_type.partition(";")
    mime = mime.strip().lower()
    if mime and mime not in _HTML_TYPES and mime not in ("application/octet-stream",
                                                         "unk", "unknown"):
        return Skipped(number, "warc.not_html")
    if _is_binary(body):
        return Skipped(number, "warc.binary")
    if mime not in _HTML_TYPES and not _LOOKS_HTML.match(body[:1024]):
        return Skipped(number, "warc.not_html")
    text, charset = decode_html(body, _param(params, "charset"))
    if text is None:
        return Skipped(number, "warc.binary")
    return Parsed({**meta, "text": text, "content_type": mime or "text/html",
                    "charset": charset}, number)


def _split_http(block: bytes) -> tuple[int | None, dict[str, str], bytes]:
    # the search stops at MAX_HEADER: unbounded, a miss scans the whole payload
    end, sep = _blank_line(block, 0, MAX_HEADER + 4)
    if end < 0 or end > MAX_HEADER:
        return None, {}, b""
    first, _, rest = block[:end].partition(b"\n")
    parts = first.split(None, 2)
    try:
        status = int(parts[1]) if parts[0].startswith(b"HTTP/") else None
    except (IndexError, ValueError):
        status = None
    return status, _parse_headers(rest), block[end + sep:]


def _decode_transfer(headers: dict[str, str], body: bytes, max_record: int) -> bytes | None:
    """The body without chunked transfer coding and gzip/deflate content coding (as stored
    by crawlers that kept the server's bytes); None if the coding cannot be undone."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = _dechunk(body)
    coding = headers.get("content-encoding", "").strip().lower()
    if coding in ("", "identity", "none", "utf-8"):
        return body
    if coding in ("gzip", "x-gzip", "deflate"):
        if not body.startswith(b"\x1f\x8b") and coding != "deflate":
            return body  # already decoded by the crawler (Common Crawl does this)
        try:
            d = zlib.decompressobj(wbits=47 if coding != "deflate" else 15)
            out = d.decompress(body, max_record or 0)
            return out
        except zlib.error:
            return body if coding == "deflate" else None
    if coding == "br":
        try:
            import brotli  # installed with some stacks only

            return brotli.decompress(body)
        except Exception:
            return None
    return None


def _dechunk(body: bytes) -> bytes:
    """Undo chunked transfer coding; the body as it is if it is not chunked."""
    out = []
    pos = 0
    while True:
        nl = body.find(b"\r\n", pos)
        if nl < 0:
            return body
        size_text = body[pos:nl].split(b";")[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            return body
        if size == 0:
            return b"".join(out)
        out.append(body[nl + 2:nl + 2 + size])
        pos = nl + 2 + size + 2
        if pos > len(body):
            return b"".join(out)


def _is_binary(body: bytes) -> bool:
    head = body[:1024]
    stripped = head.lstrip()
    if stripped.startswith(_BINARY_MAGIC) or head[4:8] == b"ftyp":
        return True
    if b"\0" in head:  # NUL bytes: binary, unless it is UTF-16 text
        return not head.startswith((b"\xff\xfe", b"\xfe\xff"))
    return False


def _param(params: str, name: str) -> str | None:
    for part in params.split(";"):
        key, sep, value = part.partition("=")
        if sep and key.strip().lower() == name:
            return value.strip().strip("'\"") or None
    return None


# ------------------------------------------------------------------ charsets

# WHATWG Encoding Standard labels that name a superset in practice (browsers decode them so,
# and pages are written for browsers): https://encoding.spec.whatwg.org/#names-and-labels
_WHATWG = {
    "iso-8859-1": "cp1252", "iso8859-1": "cp1252", "latin1": "cp1252", "latin-1": "cp1252",
    "l1": "cp1252", "us-ascii": "cp1252", "ascii": "cp1252", "iso-8859-9": "cp1254",
    "latin5": "cp1254", "iso-8859-11": "cp874", "tis-620": "cp874", "windows-874": "cp874",
    "gb2312": "gb18030", "gbk": "gb18030", "x-gbk": "gb18030", "gb_2312-80": "gb18030",
    "chinese": "gb18030", "csgb2312": "gb18030", "gb18030": "gb18030",
    "shift_jis": "cp932", "shift-jis": "cp932", "sjis": "cp932", "x-sjis": "cp932",
    "ms_kanji": "cp932", "windows-31j": "cp932", "csshiftjis": "cp932",
    "euc-kr": "cp949", "ks_c_5601-1987": "cp949", "windows-949": "cp949", "korean": "cp949",
    "big5": "big5hkscs", "big5-hkscs": "big5hkscs", "x-x-big5": "big5hkscs",
    "utf8": "utf-8", "unicode-1-1-utf-8": "utf-8", "x-mac-roman": "mac_roman",
}
_META = re.compile(rb"""<meta[^>]+?charset\s*=\s*["']?\s*([a-zA-Z0-9_:.+-]+)""", re.I)
_XML_DECL = re.compile(rb"""^<\?xml[^>]+encoding\s*=\s*["']([a-zA-Z0-9_.:+-]+)""")
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"),
         (codecs.BOM_UTF16_BE, "utf-16-be"))


def codec_for(label: str | None) -> str | None:
    """A Python codec name for an HTML/HTTP charset label, or None if unknown."""
    if not label:
        return None
    label = label.strip().lower()
    name = _WHATWG.get(label, label)
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def decode_html(body: bytes, http_charset: str | None = None) -> tuple[str | None, str]:
    """(text, charset used) for an HTML payload; text None if it does not look like text."""
    for bom, name in _BOMS:
        if body.startswith(bom):
            return body[len(bom):].decode(name, "replace"), name.replace("-le", "").replace(
                "-be", "")
    declared = [codec_for(http_charset)]
    head = body[:4096]
    m = _XML_DECL.match(head) or _META.search(head)
    if m is not None:
        declared.append(codec_for(m.group(1).decode("ascii", "replace")))
    for name in declared:
        if name is None or name.startswith("utf-16"):  # a UTF-16 label on 8-bit bytes lies
            continue
        try:
            return body.decode(name), name
        except UnicodeDecodeError:
            continue  # a wrong label: try the next source (pages lie about charsets)
    try:
        return body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    # A few damaged bytes (a multi-byte character cut in two, a Windows-1252 quote pasted
    # into a UTF-8 page) fail a strict decoding, and a detector that never sees the
    # right charset decode guesses a wrong one for the whole page (a German UTF-8 page
    # read as Urdu cp1006, a GBK page as Kazakh): read such a page as UTF-8, or as its
    # declared multi-byte charset, when most of its non-ASCII characters decode so.
    for name in ["utf-8"] + [n for n in declared if n and _multibyte(n)]:
        text = body.decode(name, "replace")
        if _mostly_decoded(text):
            return text, name
    from charset_normalizer import from_bytes

    best = from_bytes(body[:65536]).best()
    name = codec_for(best.encoding) if best is not None else None
    if name is None:
        name = next((n for n in declared if n), None) or "cp1252"
    text = body.decode(name, "replace")
    return (None if _garbled(text) else text), name


def _multibyte(codec: str) -> bool:
    """A CJK multi-byte charset (GB18030, Big5, Shift_JIS, EUC-*): it writes a Han character
    in two bytes or more and ASCII as ASCII. A single-byte charset decodes nearly any bytes,
    and so do UTF-16 and UTF-32 (a label on 8-bit bytes that lies), so that most of a page
    decodes in one of them says nothing about it."""
    try:
        return len("中".encode(codec)) > 1 and "<p>".encode(codec) == b"<p>"
    except (UnicodeEncodeError, LookupError):
        return False


def _mostly_decoded(text: str) -> bool:
    """More of the non-ASCII characters of a lenient decoding decoded than were replaced.
    Bytes of another charset rarely form a valid sequence of UTF-8 (or of GB18030 or
    Shift_JIS) by chance, so when most do, the charset is right and a few are damaged."""
    replaced = text.count("\ufffd")
    decoded = len(text) - len(text.encode("ascii", "ignore")) - replaced
    return decoded > replaced


def _garbled(text: str) -> bool:
    """Binary decoded as text: many replacement or control characters near the start."""
    head = text[:4096]
    bad = head.count("\ufffd") + sum(1 for c in head if c < " " and c not in "\t\n\r\f")
    return bad > len(head) // 10
