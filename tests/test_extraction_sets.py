"""The extraction benchmarks' readers and scorer pieces: what each set's truth becomes, where
a saved page says it comes from, and why Chinese is scored a character a token. On small
texts written here (the sets themselves stay outside the repository)."""

import importlib
import sys

import pytest

from tests.util import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
aeb = importlib.import_module("article_extraction")
dragnet = importlib.import_module("dragnet_pages")
cleaneval = importlib.import_module("cleaneval")
l3s = importlib.import_module("l3s_gn1")


def test_chinese_is_scored_a_character_a_token():
    """The hand-copied truth is wrapped every few dozen characters and the extraction is not:
    with `\\w+` runs a line break splits a token and no 4-token shingle of one matches the
    other; a CJK character a token scores the same text as the same text."""
    from llmtk.text.segment import words

    text = ("我在湖南张家界开一个全省教学研究会议。"
            "按照惯例，会议安排了一天时间，让与会者去风景点游玩观赏。")
    wrapped = text[:12] + "\n\n" + text[12:30] + "\n\n" + text[30:]
    assert aeb.tp_fp_fn(wrapped, text, words) == (1.0, 0.0, 0.0)
    tp, _, _ = aeb.tp_fp_fn(wrapped, text)
    assert tp == 0.0
    # English text tokenizes alike either way: the other sets' scores do not move
    english = "The abbot asked his favorite pupil how his spiritual progress was coming."
    assert words(english) == aeb._TOKEN.findall(english)


def test_dragnet_truth_ends_at_its_comments_marker_however_typed():
    body = "Latest search falls short\n\nA $2.2 million expedition returns.\n"
    for marker in ("!@#$%^&*()  COMMENTS", "!@ $%^&*()  COMMENTS", "!@#$%^&*()  \tCOMMENTS\t"):
        assert dragnet.article(f"{body}{marker}\nGreat post!\n") == body
    assert dragnet.article(body) == body  # a page without comments keeps all of it
    # the word alone in the article is no marker
    closed = "COMMENTS are closed on this story.\n"
    assert dragnet.article(closed) == closed


def test_cleaneval_truth_loses_its_markers_and_url_line():
    gold = ("URL: http://londonmark.blogspot.com/\n\n <h>   londonmark\n"
            "  <p>  Sieve-like, or approximating a colander\n   I keep forgetting.\n"
            "<l>one item\n<p>A <b> in the text stays.\n")
    text, url = cleaneval.cleaned(gold)
    assert url == "http://londonmark.blogspot.com/"
    assert text == ("londonmark\n  Sieve-like, or approximating a colander\n   I keep "
                    "forgetting.\none item\nA <b> in the text stays.")
    assert cleaneval.cleaned("<p>No address here.\n") == ("No address here.", "")


def test_l3s_truth_is_the_headline_and_full_text_blocks():
    page = ('<html><body><span class="x-nc-sel0">Home | World</span>'
            '<h1><span class="x-nc-sel1">Kosovo talks end</span></h1>'
            '<p><span class="x-nc-sel2">The Council met <a href="#">today</a>.</span></p>'
            '<span class="x-nc-sel3">Photo: AFP</span><span class="x-nc-sel5">Nice!</span>'
            '<p><span class="x-nc-sel2">  No   agreement was reached. </span></p></body></html>')
    assert l3s.labelled_text(page) == ("Kosovo talks end\nThe Council met today.\n"
                                       "No agreement was reached.")


def test_truth_files_in_any_of_the_sets_encodings(tmp_path):
    text = "Café “quoted” — naïve"
    for name, raw in (("utf16", b"\xff\xfe" + text.encode("utf-16-le")),
                      ("bom", b"\xef\xbb\xbf" + text.encode()), ("utf8", text.encode()),
                      ("cp1252", text.encode("cp1252"))):
        (tmp_path / name).write_bytes(raw)
        assert aeb.read_truth(tmp_path / name) == text, name


def test_a_saved_pages_site():
    """Its own address first (the CleanEval/CETD wrapper, a canonical link, og:url), else the
    host most of its links point to, else nothing."""
    links = '<a href="http://www.shop.com/a">a</a><a href="https://shop.com/b">b</a>' \
            '<a href="http://twitter.com/shop">t</a>'
    assert aeb.page_site('<text id="http://www.cdp1998.org/d?id=1" title="x">' + links) \
        == "cdp1998.org"
    assert aeb.page_site('<link rel="canonical" href="https://blog.example.org/p">' + links) \
        == "blog.example.org"
    assert aeb.page_site('<meta property="og:url" content="http://news.site.net/x">') \
        == "news.site.net"
    assert aeb.page_site(links) == "shop.com"
    assert aeb.page_site("<p>no links</p>") == ""
    assert aeb.site_half("shop.com") in ("dev", "held-out")
    assert aeb.half("http://www.shop.com/x") == aeb.site_half("shop.com")


@pytest.mark.parametrize("layout", ["dragnet_data", "merged"])
def test_dragnet_pages_load_from_either_layout(tmp_path, layout):
    """The repository's tarballs unpack to HTML/ and Corrected/; the merged copy has input/
    and GoldStandard/. The page's site comes from its canonical link."""
    page = ('<html><head><link rel="canonical" href="http://www.example.com/a"></head>'
            "<body><p>Story.</p></body></html>")
    truth = "Story.\n!@#$%^&*()  COMMENTS\nFirst!\n".encode("utf-16")
    html_dir, gold_dir, gold_name = (("HTML", "Corrected", "7.html.corrected.txt")
                                     if layout == "dragnet_data"
                                     else ("input", "GoldStandard", "7.txt"))
    (tmp_path / html_dir).mkdir()
    (tmp_path / gold_dir).mkdir()
    (tmp_path / html_dir / "7.html").write_text(page)
    (tmp_path / gold_dir / gold_name).write_bytes(truth)
    [loaded] = dragnet.load(tmp_path)
    assert loaded["key"] == "7" and loaded["site"] == "example.com"
    assert loaded["true"] == "Story.\n" and loaded["half"] == aeb.site_half("example.com")
