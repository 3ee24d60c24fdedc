"""Web archives in, main text out: WARC reading (hostile records included), extraction,
URL filtering and provenance through the pipeline. The archives are written with warcio."""

import json

import pytest

from tests.util import InProcess
from tests.warc_fixtures import PNG, members, page, record, wrong_length

pytest.importorskip("warcio")


@pytest.fixture
def cli():
    return InProcess()


def records(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


RU = "Привет мир, это проверка кодировки страницы"
JA = "日本語のテキストです。これは文字コードの試験です。"
ZH = "中文测试文本，这是一段文字。这是一个关于中文编码的测试页面。" * 3


@pytest.fixture(scope="module")
def crawl(tmp_path_factory):
    """a.warc.gz: gzip per record, every kind of record and damage; b.warc: plain, with a
    Content-Length too long. Returns (dir, member offsets of a)."""
    d = tmp_path_factory.mktemp("crawl")
    recs = [
        record("warcinfo", ""),
        record("request", "http://a.org/1"),
        record("response", "http://a.org/1", page("One", "Hello world, ünïcode.").encode(),
               charset="utf-8", record_id="<urn:uuid:one>"),
        record("metadata", "http://a.org/1", b"fetchTimeMs: 12\r\n"),
        record("response", "http://a.org/logo", PNG),  # a PNG served as text/html
        record("response", "http://ru.example.org/", page("Привет", RU).encode("cp1251"),
               charset="windows-1251"),
        record("response", "http://jp.org/", page("日本", JA, '<meta charset="shift_jis">')
               .encode("shift_jis")),
        record("response", "http://cn.org/", page("中文", ZH).encode("gbk")),  # no charset
        wrong_length(record("response", "http://bad.org/", page("Bad", "x").encode()), -300),
        record("response", "http://a.org/after", page("After", "After the bad one.").encode()),
        record("response", "http://a.org/last", page("Last", "The last one.").encode()),
    ]
    data, offsets = members(recs)
    (d / "a.warc.gz").write_bytes(data[:offsets[-1] + (len(data) - offsets[-1]) // 2])
    (d / "b.warc").write_bytes(
        record("response", "http://b.org/1", page("B1", "Bee one.").encode())
        + wrong_length(record("response", "http://b.org/long", page("L", "l").encode()), 200)
        + record("response", "http://b.org/2", page("B2", "Bee two.").encode()))
    return d, offsets


def test_cat_shows_documents_skips_and_bad_records_each_counted(cli, crawl, tmp_path):
    d, offsets = crawl
    stats, rejects = tmp_path / "s.json", tmp_path / "r.jsonl"
    r = cli("cat", d / "a.warc.gz", d / "b.warc", "--on-error", "reject", "--rejects", rejects,
            "--stats", stats, "-q")
    assert r.exit_code == 0, r.output
    out = records(r.stdout)
    assert [x["url"] for x in out] == [
        "http://a.org/1", "http://ru.example.org/", "http://jp.org/", "http://cn.org/",
        "http://a.org/after", "http://b.org/1", "http://b.org/2"]
    first = out[0]
    assert first["id"] == "<urn:uuid:one>" and first["date"] and first["content_type"] == \
        "text/html" and first["text"].startswith("<!DOCTYPE html>")
    # legacy charsets from the HTTP header, <meta charset> and detection: correct Unicode
    assert RU in out[1]["text"] and out[1]["charset"] == "cp1251"
    assert JA in out[2]["text"] and out[2]["charset"] == "cp932"
    assert ZH in out[3]["text"] and out[3]["charset"] == "gb18030"
    s = json.loads(stats.read_text())
    assert s["dropped"] == {"warc.binary": 1, "warc.metadata": 1, "warc.request": 1,
                            "warc.warcinfo": 1}
    assert s["errors"] == {"io.truncated": 1, "io.warc_length": 2}
    assert s["records_in"] == 14 == s["records_out"] + 4 + 3  # every record accounted for
    bad = [x["llmtk"] for x in records(rejects.read_text())]
    assert [(b["reason"], b["line"], b["offset"]) for b in bad] == [
        ("io.warc_length", 9, offsets[8]), ("io.truncated", 11, offsets[10]),
        ("io.warc_length", 2, (d / "b.warc").read_bytes().index(b"WARC/1.", 10))]
    assert "truncated gzip member" in bad[1]["error"]


def test_a_bad_record_stops_the_run_with_file_record_and_offset(cli, crawl):
    d, offsets = crawl
    r = cli("cat", d / "a.warc.gz")
    assert r.exit_code == 1
    assert f"{d / 'a.warc.gz'}: record 9 at byte offset {offsets[8]}: Content-Length" \
        in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_clean_extracts_main_text_from_warc_by_default(cli, crawl):
    d, _ = crawl
    r = cli("clean", d / "a.warc.gz", d / "b.warc", "--filters", "none", "--no-langid",
            "--no-pii", "--on-error", "skip", "-q")
    assert r.exit_code == 0, r.output
    out = records(r.stdout)
    assert len(out) == 7 and all(x["url"] and x["text"] for x in out)
    text = out[0]["text"]
    assert "Hello world, ünïcode." in text
    assert "def add(a, b):\n    return a + b" in text  # <pre> lines and indentation kept
    assert "Home" not in text and "Copyright" not in text  # navigation and footer gone
    assert out[0]["content_type"] == "text/plain" and out[0]["id"] == "<urn:uuid:one>"
    assert RU in out[1]["text"] and ZH in out[3]["text"]
    r = cli("clean", d / "b.warc", "--extract", "none", "--filters", "none", "--no-langid",
            "--no-pii", "--on-error", "skip", "-q")
    assert records(r.stdout)[0]["text"].startswith("<!DOCTYPE html>")


def test_trafilatura_extractor(cli, crawl):
    pytest.importorskip("trafilatura")
    d, _ = crawl
    r = cli("clean", d / "b.warc", "--extract", "trafilatura", "--filters", "none",
            "--no-langid", "--no-pii", "--on-error", "skip", "-q")
    assert r.exit_code == 0, r.output
    text = records(r.stdout)[0]["text"]
    assert "Bee one." in text and "Copyright" not in text


def test_shards_assign_whole_warc_files(cli, crawl):
    d, _ = crawl
    parts = []
    for k in (0, 1):
        r = cli("cat", d / "a.warc.gz", d / "b.warc", "--shard", f"{k}/2", "--on-error",
                "skip", "-q")
        assert r.exit_code == 0, r.output
        parts.append({x["url"].split("/")[2] for x in records(r.stdout)})
    hosts_a = {"a.org", "ru.example.org", "jp.org", "cn.org"}
    assert sorted(parts, key=len) == [{"b.org"}, hosts_a]


def test_parquet_of_the_same_pages_gives_the_same_texts(cli, crawl, tmp_path):
    pytest.importorskip("pyarrow")
    d, _ = crawl
    pq = tmp_path / "pages.parquet"
    assert cli("cat", d / "a.warc.gz", "--on-error", "skip", "-q", "-o", pq).exit_code == 0
    args = ("--filters", "none", "--no-langid", "--no-pii", "--on-error", "skip", "-q")
    from_warc = records(cli("clean", d / "a.warc.gz", *args).stdout)
    from_parquet = records(cli("clean", pq, *args).stdout)
    assert [x["text"] for x in from_parquet] == [x["text"] for x in from_warc]
    assert len(from_warc) == 5


def test_html_in_jsonl_is_extracted_and_plain_text_is_not(cli, tmp_path):
    src = tmp_path / "in.jsonl"
    html = page("Doc", "An HTML page inside JSON Lines.")
    src.write_text("\n".join(json.dumps(x) for x in [
        {"text": html},
        {"text": "<b>not</b> a page, a snippet about <div> tags", "id": 2},
        {"text": html, "content_type": "text/plain"},  # the record says it is not HTML
    ]) + "\n")
    r = cli("clean", src, "--filters", "none", "--no-langid", "--no-pii", "-q")
    out = records(r.stdout)
    assert "An HTML page inside JSON Lines." in out[0]["text"] and "<" not in out[0]["text"]
    assert out[1]["text"] == "<b>not</b> a page, a snippet about <div> tags"
    assert out[2]["text"].startswith("<!DOCTYPE html>")


def test_math_becomes_latex_and_code_keeps_its_lines():
    from llmtk.clean.extract import extract

    body = ("Euler: <math display='block'><semantics><mrow><msup><mi>e</mi><mrow><mi>i</mi>"
            "<mi>π</mi></mrow></msup><mo>+</mo><mn>1</mn><mo>=</mo><mn>0</mn></mrow>"
            "<annotation encoding='application/x-tex'>e^{i\\pi}+1=0</annotation></semantics>"
            "</math>; bare MathML <math><mfrac><mn>1</mn><mi>x</mi></mfrac></math>; MathJax "
            "<script type='math/tex'>a^2+b^2</script>; displayed <span class='MathJax_Preview'>"
            "c²</span><script type='math/tex; mode=display'>c^2</script>; KaTeX "
            "<span class='katex'><span "
            "class='katex-mathml'><math><semantics><mi>y</mi><annotation encoding="
            "'application/x-tex'>\\sqrt{y}</annotation></semantics></math></span><span "
            "class='katex-html' aria-hidden='true'>√y</span></span>.")
    for method in ("resiliparse", "trafilatura"):
        if method == "trafilatura":
            pytest.importorskip("trafilatura")
        text = extract(page("Math", body), method)
        assert ("Euler: $$e^{i\\pi}+1=0$$; bare MathML $\\frac{1}{x}$; MathJax $a^2+b^2$; "
                "displayed $$c^2$$; KaTeX $\\sqrt{y}$.") in text, method
        assert "def add(a, b):\n    return a + b" in text


def test_url_filters_name_their_reasons_and_count_domains(cli, tmp_path):
    lists = {"block.txt": "# adult sites\nbad.example\n",
             "patterns.txt": "/casino/\nre:\\?ref=\\d+$\n", "words.txt": "porn\n"}
    for name, text in lists.items():
        (tmp_path / name).write_text(text)
    urls = ["https://ok.org/a", "https://www.bad.example/x", "https://ok.org/casino/1",
            "https://ok.org/p?ref=12", "https://ok.org/free-porn-here", "https://ok.org/pornography"]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": f"page {i}", "url": u}) + "\n"
                           for i, u in enumerate(urls)))
    stats, rejects = tmp_path / "s.json", tmp_path / "r.jsonl"
    r = cli("clean", src, "--url-blocklist", tmp_path / "block.txt", "--url-patterns",
            tmp_path / "patterns.txt", "--url-banned-words", tmp_path / "words.txt",
            "--filters", "none", "--no-langid", "--no-pii", "--stats", stats, "--rejects",
            rejects, "-q")
    assert r.exit_code == 0, r.output
    # a banned word counts as a whole word of the URL: "pornography" is not "porn"
    assert [x["url"] for x in records(r.stdout)] == ["https://ok.org/a",
                                                     "https://ok.org/pornography"]
    assert [(x["url"], x["llmtk"]["reason"]) for x in records(rejects.read_text())] == [
        ("https://www.bad.example/x", "url.blocked_domain"),
        ("https://ok.org/casino/1", "url.blocked_pattern"),
        ("https://ok.org/p?ref=12", "url.blocked_pattern"),
        ("https://ok.org/free-porn-here", "url.banned_word")]
    s = json.loads(stats.read_text())
    assert s["counts"]["url_dropped.ok.org"] == 3
    assert s["counts"]["url_dropped.www.bad.example"] == 1
    r = cli("clean", src, "--url-blocklist", tmp_path / "missing.txt", "-q")
    assert r.exit_code == 2 and "--url-blocklist" in r.output and "missing.txt" in r.output


def test_provenance_travels_through_every_data_tool_and_into_rejects(cli, crawl, tmp_path):
    d, _ = crawl
    clean = tmp_path / "clean.jsonl"
    rejects = tmp_path / "rejects.jsonl"
    blocked = tmp_path / "block.txt"
    blocked.write_text("jp.org\n")
    r = cli("clean", d / "a.warc.gz", "--filters", "none", "--no-langid", "--no-pii",
            "--on-error", "skip", "--url-blocklist", blocked, "--rejects", rejects, "-q",
            "-o", clean)
    assert r.exit_code == 0, r.output
    want = {x["url"]: (x["id"], x["date"]) for x in records(clean.read_text())}
    assert len(want) == 4 and "http://a.org/1" in want
    (rejected,) = records(rejects.read_text())
    assert rejected["url"] == "http://jp.org/" and rejected["id"].startswith("<urn:uuid:")
    assert rejected["date"] and rejected["llmtk"]["reason"] == "url.blocked_domain"

    ev = tmp_path / "eval.jsonl"
    ev.write_text(json.dumps({"id": "q", "question": "nothing from these pages at all here "
                              "in this thirteen word question about something else entirely"})
                  + "\n")
    dedup, contam, mixed = (tmp_path / n for n in ("d.jsonl", "c.jsonl", "m.jsonl"))
    assert cli("dedup", clean, "-q", "-o", dedup).exit_code == 0
    assert cli("contam-check", dedup, "--eval", ev, "--eval-field", "question", "--drop",
               "-q", "-o", contam).exit_code == 0
    assert cli("mix", "-s", f"web={contam}:1", "-q", "-o", mixed).exit_code == 0
    for path in (dedup, contam, mixed):
        got = {x["url"]: (x["id"], x["date"]) for x in records(path.read_text())}
        assert got and all(want[u] == v for u, v in got.items()), path


def test_wet_and_arc_archives(cli, tmp_path):
    wet = tmp_path / "x.warc.wet.gz"
    body = b"Plain text of a page.\nSecond line."
    head = ("WARC/1.0\r\nWARC-Type: conversion\r\nWARC-Record-ID: <urn:uuid:w1>\r\n"
            "WARC-Date: 2024-01-01T00:00:00Z\r\nWARC-Target-URI: https://w.org/\r\n"
            f"Content-Type: text/plain\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    wet.write_bytes(members([head + body + b"\r\n\r\n"])[0])
    html = page("Arc", "A page from an ARC file.").encode()
    http = b"HTTP/1.0 200 OK\r\nContent-Type: text/html\r\n\r\n" + html
    desc = b"1 0 Archive\nURL IP-address Archive-date Content-type Archive-length\n"
    arc = tmp_path / "old.arc"
    arc.write_bytes(b"filedesc://old.arc 0.0.0.0 20010101000000 text/plain %d\n%s\n"
                    % (len(desc), desc)
                    + b"http://arc.org/ 1.2.3.4 20010203040506 text/html %d\n%s\n"
                    % (len(http), http))
    r = cli("cat", wet, arc, "-q")
    assert r.exit_code == 0, r.output
    out = records(r.stdout)
    assert out[0] == {"id": "<urn:uuid:w1>", "url": "https://w.org/",
                      "date": "2024-01-01T00:00:00Z", "text": body.decode(),
                      "content_type": "text/plain", "charset": "utf-8"}
    assert out[1]["url"] == "http://arc.org/" and out[1]["date"] == "2001-02-03T04:05:06Z"
    assert "A page from an ARC file." in out[1]["text"] and len(out) == 2


def test_split_http_finds_the_header_end_by_crlf_or_bare_lf():
    from llmtk.io.warc import MAX_HEADER, _split_http

    body = b"<html>\n\nbody\r\n\r\nmore</html>"
    status, headers, got = _split_http(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n" + body)
    assert (status, headers, got) == (200, {"content-type": "text/html"}, body)
    status, headers, got = _split_http(b"HTTP/1.0 404 No\nX-A: b\n\n" + body)  # bare LF
    assert (status, headers, got) == (404, {"x-a": "b"}, body)
    assert _split_http(b"HTTP/1.1 200 OK\r\nX: y\r\n" + body.replace(b"\n", b" "))[0] is None
    long = b"HTTP/1.1 200 OK\r\nX: " + b"y" * MAX_HEADER + b"\r\n\r\n" + body
    assert _split_http(long)[0] is None  # a header block longer than MAX_HEADER is not one


def test_records_written_with_bare_lf_line_ends_are_read(cli, tmp_path):
    """Some writers (and hand-made archives) end lines with LF alone: the WARC header, its
    blank line and the record separator. Every record comes out, none is counted bad."""
    def bare_lf(url: str, title: str) -> bytes:
        block = (b"HTTP/1.1 200 OK\nContent-Type: text/html; charset=utf-8\n\n"
                 + page(title, f"<p>{title} is the body of this page.</p>").encode())
        head = (f"WARC/1.0\nWARC-Type: response\nWARC-Target-URI: {url}\n"
                f"WARC-Date: 2024-01-01T00:00:00Z\nWARC-Record-ID: <urn:uuid:{title}>\n"
                f"Content-Type: application/http; msgtype=response\n"
                f"Content-Length: {len(block)}\n\n").encode()
        return head + block + b"\n\n"

    f = tmp_path / "lf.warc"
    f.write_bytes(bare_lf("http://a.org/", "First") + bare_lf("http://b.org/", "Second"))
    r = cli("cat", f, "--stats", tmp_path / "s.json", "-q")
    assert r.exit_code == 0, r.output
    out = records(r.stdout)
    assert [o["url"] for o in out] == ["http://a.org/", "http://b.org/"]
    assert "Second is the body" in out[1]["text"]
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["errors"] == {} and s["records_in"] == s["records_out"] == 2


def test_a_gzip_member_lost_whole_between_records_is_one_bad_record(cli, tmp_path):
    recs = [record("response", f"http://m.org/{i}", page(f"Page {i}", "<p>Text.</p>").encode())
            for i in range(3)]
    data, offsets = members(recs)
    broken = bytearray(data)
    broken[offsets[1] + 12:offsets[1] + 20] = b"\xff" * 8  # the 2nd member: no byte comes out
    f = tmp_path / "lost.warc.gz"
    f.write_bytes(bytes(broken))
    r = cli("cat", f, "--on-error", "skip", "--stats", tmp_path / "s.json", "-q")
    assert r.exit_code == 0, r.output
    assert [x["url"] for x in records(r.stdout)] == ["http://m.org/0", "http://m.org/2"]
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["records_in"] == 3 and s["errors"] == {"io.corrupt": 1}
    r = cli("cat", f)
    assert r.exit_code == 1
    assert f"{f}: record 2 at byte offset {offsets[1]}: corrupt gzip member" in r.output


def test_url_blocklist_prefixes_match_without_scheme_or_case(tmp_path):
    from llmtk.clean.urls import UrlFilter, UrlRules

    (tmp_path / "block.txt").write_text("bad.example\nhttp://ok.org/private/\n")
    rules = UrlRules(UrlFilter(blocklist=str(tmp_path / "block.txt")))
    assert rules.check("https://OK.org/private/page") == "url.blocked_domain"
    assert rules.check("ftp://sub.bad.example/x") == "url.blocked_domain"
    assert rules.check("https://ok.org/public/private/") is None
    assert rules.check("not a url") is None  # no host: nothing to look up


@pytest.mark.filterwarnings("ignore:line buffering")  # open(buffering=1) of a 1-byte CHUNK
@pytest.mark.parametrize("chunk", [1, 2, 3, 5])
def test_header_ends_are_found_across_any_buffer_refill(tmp_path, monkeypatch, chunk):
    """The reader takes the file a piece at a time; a header's blank line (CRLF CRLF, or
    LF LF) may be cut anywhere by a refill, and a payload's own blank lines (an HTML page's
    LF LF and CRLF CRLF) must not end a header early. CRLF records as warcio writes them
    and bare-LF ones, read a few bytes at a time: the same records as in one piece."""
    from llmtk.io import warc
    from llmtk.io.record import Parsed

    body = page("Gaps", "<p>one</p>\n\n<p>two</p>\r\n\r\n<p>three</p>").encode()
    lf_block = b"HTTP/1.1 200 OK\nContent-Type: text/html\n\n" + body
    lf = (f"WARC/1.0\nWARC-Type: response\nWARC-Target-URI: http://lf.org/\n"
          f"WARC-Date: 2024-01-01T00:00:00Z\nContent-Type: application/http; "
          f"msgtype=response\nContent-Length: {len(lf_block)}\n\n").encode() + lf_block + b"\n\n"
    f = tmp_path / "mixed.warc"
    f.write_bytes(record("response", "http://a.org/", body) + lf
                  + record("response", "http://b.org/", body) + lf)

    def urls() -> list:
        events = [e for e in warc.read_warc(str(f), "warc", 1 << 20) if not isinstance(e, int)]
        assert all(isinstance(e, Parsed) for e in events), events
        return [e.data["url"] for e in events]

    whole = urls()
    assert whole == ["http://a.org/", "http://lf.org/", "http://b.org/", "http://lf.org/"]
    monkeypatch.setattr(warc, "CHUNK", chunk)
    assert urls() == whole


@pytest.mark.parametrize(("chunk", "feed"), [(1 << 20, 1), (1 << 20, 7), (1 << 20, 1 << 16),
                                             (5, 3), (4096, 1 << 16)])
def test_gzip_members_read_alike_at_any_chunk_and_feed(tmp_path, monkeypatch, chunk, feed):
    """zlib is given FEED bytes a call (a chunk holds many members; fed whole, the rest of it
    was copied at each member's end): a member larger than a feed, many small ones in one
    chunk, zero padding and a damaged member read the same at any sizes, offsets and all."""
    import random

    from llmtk.io import warc

    rng = random.Random(0)
    noise = "".join(rng.choice("abcdefghij ") for _ in range(150_000))  # ~70 KB compressed
    recs = [record("response", f"http://z.org/{i}",
                   page(f"Page {i}", noise if i == 2 else f"<p>Text {i}.</p>").encode())
            for i in range(6)]
    data, offsets = members(recs)
    broken = bytearray(data)
    broken[offsets[4] + 12:offsets[4] + 20] = b"\xff" * 8  # the 5th member gives nothing
    f = tmp_path / "z.warc.gz"
    f.write_bytes(bytes(broken[:offsets[1]]) + b"\0" * 9 + bytes(broken[offsets[1]:]))

    def events() -> list:
        return [(type(e).__name__, e.line, getattr(e, "offset", None),
                 e.data["url"] if hasattr(e, "data") else getattr(e, "reason", None))
                for e in warc.read_warc(str(f), "warc", 1 << 20) if not isinstance(e, int)]

    monkeypatch.setattr(warc, "CHUNK", chunk)
    monkeypatch.setattr(warc, "FEED", feed)
    got = events()
    assert got == [("Parsed", 1, None, "http://z.org/0"), ("Parsed", 2, None, "http://z.org/1"),
                   ("Parsed", 3, None, "http://z.org/2"), ("Parsed", 4, None, "http://z.org/3"),
                   ("Invalid", 5, offsets[4] + 9, "io.corrupt"),
                   ("Parsed", 6, None, "http://z.org/5")]


def test_header_fields_folded_repeated_and_odd_lines():
    from llmtk.io.warc import _parse_headers

    plain = b"Content-Type: text/html; charset=utf-8\r\nX-A:1\r\nno colon here\r\nx-a: 2 \r\n"
    assert _parse_headers(plain) == {"content-type": "text/html; charset=utf-8", "x-a": "2"}
    folded = b"Content-Type: text/html;\r\n  charset=latin-1\r\nServer: \xff\r\n"
    assert _parse_headers(folded) == {"content-type": "text/html; charset=latin-1",
                                      "server": "\ufffd"}


def test_damaged_gzip_members_read_as_cpython_zlib_reads_them(tmp_path, monkeypatch):
    """The reader inflates with zlib-ng (faster): on members damaged every way (a flipped
    bit, bytes overwritten or zeroed, inserted, cut off) it gives what CPython's own zlib
    gives, record for record: the same pages, the same bad records at the same offsets, and
    the same messages."""
    import random
    import zlib

    from llmtk.io import warc

    rng = random.Random(5)
    text = "".join(rng.choice("abcdefghij .") for _ in range(20_000))
    data, _ = members([record("response", f"http://d.org/{i}",
                              page(f"P{i}", text[i * 2000:]).encode()) for i in range(4)])
    f = tmp_path / "d.warc.gz"

    def events(module) -> list:
        monkeypatch.setattr(warc, "zlib", module)
        return [(type(e).__name__, e.line, getattr(e, "offset", None),
                 getattr(e, "message", None), e.data["text"] if hasattr(e, "data") else
                 getattr(e, "reason", None))
                for e in warc.read_warc(str(f), "warc", 1 << 20) if not isinstance(e, int)]

    fast = warc.zlib
    assert fast is not zlib
    bad = 0
    for _ in range(60):
        b, i = bytearray(data), rng.randrange(len(data))
        damage = rng.randrange(5)
        if damage == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif damage == 1:
            b[i:i + 8] = rng.randbytes(len(b[i:i + 8]))
        elif damage == 2:
            b[i:i + 300] = bytes(len(b[i:i + 300]))
        elif damage == 3:
            b[i:i] = rng.randbytes(5)
        else:
            del b[i:]
        f.write_bytes(bytes(b))
        got = events(fast)
        assert got == events(zlib)
        bad += any(kind == "Invalid" for kind, *_ in got)
    assert bad >= 40  # (most damage is seen: the check compares errors, not only pages)


DE = ("Für die Soße schön viel Olivenöl nehmen, grüne Kräuter dazu; im März schmecken "
      "die Blätter am besten, später werden sie härter. Größere Stücke länger kochen. ")


def test_a_few_damaged_bytes_do_not_change_a_pages_charset():
    """A UTF-8 page with stray Windows-1252 quotes, a GBK page whose last character is cut
    in two: each still decodes as its charset (a replacement character where the damage
    is), not as whatever single-byte charset a detector guesses from the failed bytes."""
    from llmtk.io.warc import decode_html

    # a page that is mostly ASCII markup, its one "ü" of an alt text in Windows-1252
    menu = "".join(f'<li><a href="/rezepte/{i}">Rezept {i}</a></li>' for i in range(300))
    german = (f'<html><head><meta charset="utf-8"></head><body><ul>{menu}</ul><p>{DE}</p>'
              '<img alt="Hosting für Profit"></body></html>')
    body = german.encode("utf-8").replace("für Profit".encode(), "für Profit".encode("cp1252"))
    text, charset = decode_html(body)
    assert charset == "utf-8" and DE in text and text.count("\ufffd") == 1

    chinese = f"<html><head><meta charset=\"gbk\"></head><body><p>{ZH * 4}</p></body></html>"
    cut = chinese.encode("gbk").replace(b"</p>", "中".encode("gbk")[:1] + b"</p>")
    text, charset = decode_html(cut)
    assert charset == "gb18030" and ZH in text and text.count("\ufffd") == 1


def test_a_lying_utf8_label_still_goes_to_detection():
    """Windows-1252 bytes under a UTF-8 label: nearly every non-ASCII byte fails, so the
    label is passed over and the page is not read as UTF-8 with replacement characters."""
    from llmtk.io.warc import decode_html

    french = ("<html><head><meta charset=\"utf-8\"></head><body><p>L'été dernier, à "
              "Genève, les élèves ont préparé une fête très réussie pour leur école.</p>"
              * 6 + "</body></html>")
    text, charset = decode_html(french.encode("cp1252"))
    assert charset != "utf-8" and "\ufffd" not in text and "élèves" in text


@pytest.mark.parametrize("label", ["utf-16", "utf-32"])
def test_a_lying_utf16_label_is_not_read_leniently(label):
    """Windows-1252 bytes under a UTF-16 or UTF-32 label: those decode nearly any bytes,
    so "most characters decoded" says nothing; the page goes to detection, not to a page
    of CJK-looking pairs of ASCII bytes."""
    from llmtk.io.warc import decode_html

    french = (f"<html><head><meta charset=\"{label}\"></head><body><p>L'été dernier, à "
              "Genève, les élèves ont préparé une fête très réussie pour leur école.</p>"
              * 6 + "</body></html>")
    for http in (None, label):
        text, charset = decode_html(french.encode("cp1252"), http)
        assert not charset.startswith("utf") and "élèves" in text
