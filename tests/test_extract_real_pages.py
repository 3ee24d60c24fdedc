"""Real pages of several kinds (tests/data/pages, sources and licences in its LICENSES.md)
through `llmtk clean --filters none --no-langid --no-pii`, read from a WARC the way a crawl
is read: each page's main text stays, in order, and its furniture goes.

The expectations were written by reading each page, before the extractor was run on it:
a few sentences of the main text, in page order, and lines of furniture (menus, share
buttons, related stories, footers, comment links). One case is one string, so a case the
default extractor gets wrong today is marked xfail(strict) by itself (WRONG_TODAY) and
fails loudly once it is put right. Every string is first checked to be on the page.
"""

import html
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from tests.util import InProcess
from tests.warc_fixtures import record

PAGES_DIR = Path(__file__).parent / "data" / "pages"


@dataclass(frozen=True)
class Page:
    url: str
    kept: tuple[str, ...]  # main text, in page order
    furniture: tuple[str, ...]  # none of it in the output


PAGES = {
    # a national news site: edition picker, share bar, photo gallery, a sidebar of older
    # stories, most-popular list and footer around a long article
    "news_cnn.html": Page(
        "http://edition.cnn.com/2013/11/27/travel/weather-thanksgiving/index.html",
        kept=(
            "(CNN) -- The Pennsylvania official was just talking about one area, but he summed "
            "up a winter storm that struck much of the eastern United States on Wednesday.",
            '"We dodged a bullet," said Steve Cowan, a spokesman for the Pennsylvania '
            "Department of Transportation.",
            "Forecasters see mostly smooth sailing into Thanksgiving.",
            "Either way, the parade -- with or without the balloons -- will go on, organizers "
            "say.",
            "Amtrak reported no major delays systemwide.",
            "CNN's Jason Carroll, Ben Brumfield, Dave Hennen, Aaron Cooper, Alexandra Field, "
            "Shannon Travis and Greg Botelho contributed to this report.",
        ),
        furniture=(
            "Set edition preference", "SHARE THIS", "StumbleUpon", "HIDE CAPTION",
            "Weather threatens holiday plans", "Keep your phone charged in a power outage",
            "Today's five most popular stories", "MH17 crash: Did Russia pull the trigger?",
            "Loading weather data", "Terms of service",
        ),
    ),
    # a small motoring news site: its menu three times, related posts, tags, comments
    # and a list of other stories
    "news_autoindustriya.html": Page(
        "https://www.autoindustriya.com/auto-industry-news/"
        "all-new-2020-sentra-is-what-we-really-want-from-nissan-ph.html",
        kept=(
            "Crossovers may have become the vehicle of choice for most car buyers, but that "
            "doesn't mean the sedan is no longer relevant.",
            "Nissan has taken the covers off the eighth-generation Sentra.",
            "Taking on a sleeker appearance, the 2020 Sentra gets a new V-Motion front grill",
            "In-car infotainment comes courtesy of an 8-inch touchscreen display.",
            "The all-new sedan is set to go on sale in the US in late January.",
        ),
        furniture=(
            "Subscribe to Newsletter", "TRANSPORT & LOGISTICS", "SEARCH AutoIndustriya.com",
            "View More Articles", "Elite Exaltas: the Nissan nicknames",
            "comments powered by Disqus",
            "2020 Aston Martin DBX SUV is what 007 drives when he has kids",
            "Audi e-Tron Sportback makes electric crossovers look good",
            "All Rights Reserved",
        ),
    ),
    # a Chinese news page: channel menus, share box, hot-news list, topic links, the
    # provinces' links and licence numbers in the footer
    "zh_news_chinadaily.html": Page(
        "https://china.chinadaily.com.cn/a/202311/17/WS65571297a310d5acd876f404.html",
        kept=(
            "中美合作共赢是大势所趋",
            "美中合作基金会执行主席约翰·米勒-怀特认为，共同繁荣还是互相毁灭，这是两国面临的抉择。",
            "美方应当采取更多行动",
            "在他看来，通过促进互利合作，媒体可以为两国关系止跌企稳作出贡献。",
            "美方需要作出更令人放心的承诺，并采取更多令人安心的行动。",
        ),
        furniture=(
            "中文网首页", "分享到微信", "最热新闻", "多项促民营经济发展政策举措酝酿出台",
            "2023乌镇世界互联网大会", "互联网新闻信息服务许可证", "友情链接", "中国日报版权所有",
        ),
    ),
    # a chapter of a Chinese DocBook manual written as questions and answers: navigation
    # header and footer naming the chapters before and after
    "zh_faq_support.html": Page(
        "https://www.debian.org/doc/manuals/debian-faq/support.zh-cn.html",
        kept=(
            "12.1. Debian 系统中还能获得哪些有针对性的文档？",
            "有。事实上，Debian 向用户提供支持的主要方式是通过电子邮件。",
            "可以在经常更新的 Debian 维基中找到常见问题的解决方案、HOWTO 文档、指南、提示和"
            "其他文档。",
            "未解决的（和已关闭的）缺陷报告都是公开的；",
            "您应该会收到您的缺陷报告的自动确认邮件。",
        ),
        furniture=("第 11 章 定制您的 Debian GNU/Linux 系统", "第 13 章 向 Debian 计划作出贡献"),
    ),
    # a Sphinx manual (Read the Docs theme): sidebar, breadcrumb, version menu, footer
    "docs_webstruct_tutorial.html": Page(
        "https://webstruct.readthedocs.io/en/latest/tutorial.html",
        kept=(
            "This tutorial assumes you are familiar with machine learning.",
            "First, you need the training/development data.",
            'trees = webstruct.load_trees("train/*.html", webstruct.WebAnnotatorLoader())',
            "The simple algorithm WebStruct provides is by no means a general solution to "
            "relation detection, but give it a try - maybe it is enough for your task.",
            "To debug what CRFSuite learned you could use eli5 library.",
        ),
        furniture=(
            "Edit on GitHub", "Docs »", "© Copyright 2014-2017, Scrapinghub Inc.",
            "Built with Sphinx", "Read the Docs v: latest", "htmlzip", "Project Home",
            "Free document hosting provided by Read the Docs", "¶",
        ),
    ),
    # a shop's product page: site header, breadcrumb, demo-site warning banner
    "shop_books_toscrape.html": Page(
        "https://books.toscrape.com/catalogue/a-light-in-the-attic_1000/index.html",
        kept=(
            "A Light in the Attic £51.77 In stock (22 available)",  # name, price, stock
            "It's hard to imagine a world without A Light in the Attic.",
            "This now-classic collection of poetry and drawings from Shel Silverstein "
            "celebrates its 20th anniversary with this special edition.",
            "a897fe39b1053632",
        ),
        furniture=("We love being scraped!",
                   "Warning! This is a demo website for web scraping purposes."),
    ),
    # a product's landing page: feature list with "learn more" links, legal footer
    "product_firefox_developer.html": Page(
        "https://www.mozilla.org/en-US/firefox/developer/",
        kept=(
            "Get to know the features that make it the most complete browser for building the "
            "Web.",
            "Developer Edition comes with a new profile so you can run it alongside other "
            "versions of Firefox.",
            "Examine the HTML and CSS of any Web page and easily modify the structure and "
            "layout of a page.",
            "View and edit CSS styles associated with a Web page, create new ones and apply "
            "existing CSS stylesheets to any page.",
        ),
        furniture=("Learn more about Page Inspector", "Partner with Us", "Firefox Affiliates",
                   "Contribute to this site", "Report Trademark Abuse",
                   "Portions of this content are"),
    ),
    # a team's blog post (nested lists of short notes) with its readers' comments, a
    # reply form, the blog's widgets (recent posts, recent comments, archives), a newsletter
    # sign-up and the site's footer
    "blog_comments_firefox_nightly.html": Page(
        "https://blog.nightly.mozilla.org/2020/12/18/these-weeks-in-firefox-issue-85/",
        kept=(
            "We’ve just landed Bug 1553982, which aims to prevent starting an update while "
            "another Firefox instance is running",
            "Amy Churchwell joins the Search & Navigation team today.",
            "Background updater work is also proceeding, with Bug 1676296 landing last week "
            "to support managing scheduled tasks in Gecko",
            "We’ve got the green light for another round of MSU students hacking on "
            "Picture-in-Picture next semester!",
            "Work continued on the weather QuickSuggest experiment, but its release has been "
            "moved to January.",
            "Fixed a bug where search engines were being re-added on startup after their "
            "removal, when using a language pack (Bug 1675624)",
        ),
        furniture=(
            "Let's improve quality, build after build!", "Search this site",
            "Bleeding edge browsing", "Previous article", "More articles in “News”",
            "Get the Mozilla newsletter and help us keep it open and free.",
            "We will only send you Mozilla-related information.",
            "2 comments on “These Weeks in Firefox: Issue 85”", "Alan Goodale wrote on",
            "Thank you for fixing Bug 1553982!", "Leave a Reply",
            "Your email address will not be published.", "Spamming robots, please fill in",
            "Recent Comments", "Spanish fan on", "Website Privacy Notice",
            "Portions of this content are ©1998-2022 by individual contributors.",
        ),
    ),
    # an article of 2000 in ISO-8859-1 as it was written (a windows-1252 byte in it)
    "legacy_cp1252_testinfected.html": Page(
        "http://junit.sourceforge.net/doc/testinfected/testing.htm",
        kept=(
            "Every programmer knows they should write tests for their code. Few do.",
            "Unfortunately, this is an article, not an office overlooking charming old-town "
            "Zürich",
            "during one of those long meetings….",
            "So- give JUnit a try.",
        ),
        furniture=(),
    ),
}

# The cases the default extractor gets wrong today: (page, string) -> what is wrong.
_NIGHTLY_CUT = ("a long post of nested list items: a run of items that are mostly links "
                "(\"mconley re-enabled TART\") weighs the later sections out of the text")
WRONG_TODAY: dict[tuple[str, str], str] = {
    # (its last three kept strings: the later sections)
    ("blog_comments_firefox_nightly.html", s): _NIGHTLY_CUT
    for s in PAGES["blog_comments_firefox_nightly.html"].kept[3:]
}

CASES = [(name, "kept", s) for name, p in PAGES.items() for s in p.kept] + [
    (name, "furniture", s) for name, p in PAGES.items() for s in p.furniture]


def _norm(text: str) -> str:
    """Runs of white space (line ends, no-break spaces) as one space: a sentence matches
    however the page or the extractor broke its lines."""
    return " ".join(text.split())


def _param(name: str, kind: str, s: str):
    marks = ()
    if (name, s) in WRONG_TODAY:
        marks = pytest.mark.xfail(strict=True, reason=WRONG_TODAY[name, s])
    return pytest.param(name, s, marks=marks, id=f"{name.split('.')[0]}-{s[:40]}")


@cache
def _page_text(name: str) -> str:
    """The page's own text, read without the extractor: tags out, entities decoded, and no
    white space at all (a tag may fall inside a word: a highlighted name, a link)."""
    raw = (PAGES_DIR / name).read_bytes()
    charset = re.search(rb'charset="?([\w-]+)', raw)
    codec = charset.group(1).decode() if charset else "utf-8"
    codec = "cp1252" if codec.lower() == "iso-8859-1" else codec  # as browsers read it
    return "".join(html.unescape(re.sub(r"<[^>]*>", "", raw.decode(codec))).split())


@pytest.fixture(scope="module")
def extracted(tmp_path_factory) -> dict[str, str]:
    """Each page's text as `llmtk clean` extracts it from a WARC of their responses (the
    bytes as stored, no charset in the HTTP header: the page's own declaration decides)."""
    d = tmp_path_factory.mktemp("pages")
    warc, out = d / "pages.warc", d / "out.jsonl"
    warc.write_bytes(b"".join(record("response", p.url, (PAGES_DIR / name).read_bytes())
                              for name, p in PAGES.items()))
    r = InProcess()("clean", warc, "--filters", "none", "--no-langid", "--no-pii",
                    "--on-error", "skip", "--workers", "1", "-o", out, "-q")
    assert r.exit_code == 0, r.output
    by_url = {x["url"]: x["text"] for x in map(json.loads, out.read_text().splitlines())}
    assert set(by_url) == {p.url for p in PAGES.values()}
    return {name: by_url[p.url] for name, p in PAGES.items()}


def test_every_page_is_listed_with_its_licence():
    names = {p.name for p in PAGES_DIR.glob("*.html")}
    assert names == set(PAGES)
    licences = (PAGES_DIR / "LICENSES.md").read_text()
    for name in names:
        assert f"`{name}`" in licences
        assert (PAGES_DIR / name).stat().st_size <= 64_000  # small, as fixtures should be


@pytest.mark.parametrize(("name", "kind", "s"), CASES,
                         ids=[f"{n.split('.')[0]}-{k}-{s[:30]}" for n, k, s in CASES])
def test_expectation_is_on_the_page(name, kind, s):
    # a furniture string not on the page would pass for nothing
    assert "".join(s.split()) in _page_text(name)


@pytest.mark.parametrize(("name", "s"), [_param(n, k, s) for n, k, s in CASES if k == "kept"])
def test_main_text_is_kept(extracted, name, s):
    assert _norm(s) in _norm(extracted[name])


@pytest.mark.parametrize("name", list(PAGES))
def test_main_text_keeps_its_order(extracted, name):
    text, pos = _norm(extracted[name]), 0
    for s in map(_norm, PAGES[name].kept):
        if s in text:  # (one that is missing fails its own case)
            # found after the one before it (a later heading may repeat earlier words)
            pos = text.find(s, pos)
            assert pos >= 0, f"out of order: {s!r}"
            pos += len(s)


@pytest.mark.parametrize(("name", "s"),
                         [_param(n, k, s) for n, k, s in CASES if k == "furniture"])
def test_furniture_is_gone(extracted, name, s):
    assert _norm(s) not in _norm(extracted[name])


def test_docs_code_blocks_keep_their_lines(extracted):
    text = extracted["docs_webstruct_tutorial.html"]
    assert ("def token_identity(html_token):\n    return {'token': html_token.token}\n"
            in text)
    assert ("feature_extractor = HtmlFeatureExtractor(\n    token_features = [\n"
            "        token_identity,\n" in text)
    assert "features = feature_extractor.fit_transform(X)" in text.splitlines()


def test_legacy_charset_page_decodes(extracted):
    # declared ISO-8859-1; its byte 0x85 is windows-1252's ellipsis, as browsers read it
    text = extracted["legacy_cp1252_testinfected.html"]
    assert "Zürich" in text and "meetings…." in text
    assert "\x85" not in text and "\ufffd" not in text
    # its code, indented with &nbsp; in <pre>, keeps its lines
    assert "class Money {\n    private int fAmount;\n    private String fCurrency;" in text
