"""Main text decided from the page itself: furniture that no markup names (plain `div`s
with made-up class names) goes, the article, post or manual section stays. The pages are
small but shaped like real ones: a news article, a blog post, a documentation page and a
Chinese news page, each run through `llmtk clean` as the checks run it."""

import json
import re
from pathlib import Path

import pytest

from tests.util import InProcess

ARTICLE = [
    "The city council voted on Tuesday to expand the bus network, adding four routes that "
    "will connect the northern suburbs with the hospital district by next spring.",
    "Council member Ana Ruiz said the plan, which costs 12 million dollars, had been "
    "discussed for three years and finally won support after a public consultation.",
    "Critics argued that the money would be better spent on repairing existing roads, "
    "but the motion passed by seven votes to two after a long debate.",
    "Construction of the new stops begins in January, and the first route is expected to "
    "open in March, according to the transport department.",
]
LINKS = "".join(f'<a href="/section/{i}">Section {i}</a> ' for i in range(12))
RELATED = "".join(f'<li><a href="/news/{i}">Another headline about the town, number {i}</a>'
                  "</li>" for i in range(6))

NEWS = f"""<!DOCTYPE html><html><head><title>Council expands bus network</title></head><body>
<div class="hd-x1"><a href="/">Daily Town</a> {LINKS}</div>
<div class="crumbs-z"><a href="/">Home</a> / <a href="/local">Local</a></div>
<div class="wrap"><div class="col-a">
<h1>Council expands bus network</h1>
<div class="by">By Sam Lee | 19 Nov 2019</div>
<div class="sh-x"><a href="https://facebook.com/x">Facebook</a> <a href="https://x.com/y">
Twitter</a> <a href="mailto:?x">Email</a></div>
<div class="txt">{"".join(f"<p>{p}</p>" for p in ARTICLE)}</div>
<div class="rl"><h3>More stories</h3><ul>{RELATED}</ul></div>
</div></div>
<div class="bt-q">{LINKS}<br>© 2019 Daily Town Media. All rights reserved.</div>
</body></html>"""

POST = [
    "I finally rebuilt the sourdough starter after it died over the summer, and this time "
    "I kept notes on every feeding, the temperature of the kitchen and the flour I used.",
    "The trick, it turns out, is patience: the first week it smelled of nail polish, and "
    "only on day nine did it double reliably within six hours of a feeding.",
    "Next week I will try the same loaf with a longer cold proof in the fridge and report "
    "how the crumb changes.",
]
SIDEBAR = "".join(f'<div class="w-item"><a href="/2019/{i}">Older post title number {i}</a>'
                  "</div>" for i in range(10))
TAGS = " ".join(f'<a href="/tag/{t}">{t}</a>' for t in
                "bread baking sourdough starter flour kitchen recipes notes".split())

BLOG = f"""<!DOCTYPE html><html><head><title>Starter, again</title></head><body>
<div id="top-x"><a href="/">Crumb Notes</a> <a href="/about">About</a>
<a href="/archive">Archive</a> <a href="/contact">Contact</a></div>
<div class="main-x"><div class="entry-x"><h2>Starter, again</h2>
{"".join(f"<p>{p}</p>" for p in POST)}
<div class="tags-y">Tags: {TAGS}</div></div>
<div class="col-w"><h4>Recent posts</h4>{SIDEBAR}<h4>Tags</h4>{TAGS}</div></div>
<div class="bt-z">Powered by a static site generator. <a href="/rss">RSS</a></div>
</body></html>"""

TOC = "".join(f'<li class="l1"><a href="/docs/{n}.html">{n.title()} reference</a></li>'
              for n in "install usage config plugins cli api faq changelog license".split())
DOCS = f"""<!DOCTYPE html><html><head><title>Configuration</title></head><body>
<div class="wy-grid-for-nav"><div class="wy-side-x"><div class="wy-menu-x"><ul>{TOC}</ul>
</div></div>
<div class="wy-content-x"><div class="body-x">
<h1>Configuration<a class="headerlink" href="#configuration" title="Permalink">¶</a></h1>
<p>The tool reads its settings from a file named <code>tool.toml</code> in the project's
root, and every setting can also be given on the command line, which takes precedence.</p>
<h2>Options<a class="headerlink" href="#options" title="Permalink">¶</a></h2>
<p>Each option has a default that suits small projects; larger ones usually raise the number
of workers and point the cache to a faster disk.</p>
<pre>[tool]
workers = 8
cache = "/fast/cache"</pre>
<p>Unknown keys are an error, so a typo never passes silently: the message names the file,
the line and the key.</p>
</div></div></div>
<div class="rst-footer-x"><a href="/docs/usage.html">Previous</a>
<a href="/docs/plugins.html">Next</a></div>
</body></html>"""

ZH = [
    "十一月十九日，市政府宣布将在明年春季前新增四条公交线路，连接北部郊区与医院片区，"
    "预计每天可以服务超过两万名乘客。",
    "交通部门负责人表示，新线路的站点建设将于一月开始，第一条线路预计在三月正式开通运营，"
    "票价与现有线路保持一致。",
    "部分市民认为这笔资金应该优先用于维修现有道路，但议会最终以七票赞成、两票反对通过了"
    "这项计划。",
]
ZH_NAV = "".join(f'<a href="/c/{i}">{n}</a> ' for i, n in enumerate(
    "首页 新闻 财经 体育 娱乐 科技 汽车 房产 教育 旅游".split()))
ZH_REL = "".join(f'<li><a href="/n/{i}">相关新闻标题第{i}条：本市交通建设最新进展</a></li>'
                 for i in range(6))
CJK = f"""<!DOCTYPE html><html><head><meta charset="utf-8"><title>公交</title></head><body>
<div class="dh-k">{ZH_NAV}</div>
<div class="nr-k"><h1>市政府宣布新增四条公交线路</h1><div class="ly">来源：本报 2019-11-19</div>
{"".join(f"<p>{p}</p>" for p in ZH)}</div>
<div class="xg-k"><h3>相关阅读</h3><ul>{ZH_REL}</ul></div>
<div class="db-k">{ZH_NAV}<br>版权所有 © 2019 本市日报社</div>
</body></html>"""


PAGES = {"news": NEWS, "blog": BLOG, "docs": DOCS, "cjk": CJK}


@pytest.fixture(scope="module")
def extracted(tmp_path_factory):
    """The texts `llmtk clean` extracts from the pages (one run), as the checks run it."""
    d = tmp_path_factory.mktemp("pages")
    src, out = d / "in.jsonl", d / "out.jsonl"
    src.write_text("".join(json.dumps({"id": k, "url": f"https://example.org/{k}",
                                       "content_type": "text/html", "text": html}) + "\n"
                           for k, html in PAGES.items()))
    r = InProcess()("clean", src, "--filters", "none", "--no-langid", "--no-pii",
                    "--on-error", "skip", "--workers", "1", "-o", out, "-q")
    assert r.exit_code == 0, r.output
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(x["id"], x["url"]) for x in recs] == [
        (k, f"https://example.org/{k}") for k in PAGES]
    return {x["id"]: x["text"] for x in recs}


def test_news_article_keeps_the_story_and_drops_unnamed_furniture(extracted):
    text = extracted["news"]
    assert [line for line in text.splitlines() if line.strip()] == ARTICLE
    for furniture in ("Section 3", "Home", "Facebook", "Email", "More stories",
                      "Another headline", "All rights reserved", "By Sam Lee"):
        assert furniture not in text


def test_blog_post_without_its_sidebar_tags_or_footer(extracted):
    text = extracted["blog"]
    for p in POST:
        assert p in text
    for furniture in ("Archive", "Recent posts", "Older post title", "sourdough starter flour",
                      "Powered by", "RSS"):
        assert furniture not in text


def test_docs_page_keeps_code_lines_and_loses_sidebar_and_header_marks(extracted):
    text = extracted["docs"]
    assert '[tool]\nworkers = 8\ncache = "/fast/cache"' in text  # <pre> lines kept
    for words in ("reads its settings", "Each option has a default", "Unknown keys"):
        assert words in text
    assert "Options" in text and "¶" not in text  # Sphinx/MkDocs header-link marks gone
    assert "reference" not in text and "Previous" not in text and "Next" not in text


def test_chinese_page_keeps_its_paragraphs_and_drops_link_lists(extracted):
    text = extracted["cjk"]
    for p in ZH:
        assert p in text
    for furniture in ("首页", "相关阅读", "相关新闻标题", "版权所有", "来源"):
        assert furniture not in text


def test_a_page_with_no_prose_keeps_what_is_not_a_link_list():
    from llmtk.clean.density import main_text

    # nothing long enough to be an article: short lines stay, the link list goes
    rendered = ('<a href="/a">Home</a> <a href="/b">Shop</a>\n\n<p>Opening hours</p>\n\n'
                "<p>Mon-Fri 9-17</p>\n")
    assert main_text(rendered) == "Opening hours\n\nMon-Fri 9-17"


def test_link_to_the_own_anchor_is_a_mark_but_other_links_stay():
    from llmtk.clean.density import blocks

    [b] = blocks('<h2>Options<a href="#options">¶</a> see <a href="/x">#</a></h2>\n')
    assert b.text() == "Options see #" and b.kind == "h"


def test_a_link_that_spells_its_address_is_text_a_named_link_is_not():
    from llmtk.clean.density import blocks, weight

    # the address is the sentence's object: the block is prose, not a menu item
    [b] = blocks('<p>The installation guide of the latest release is kept up to date: see '
                 '<a href="https://example.org/guide">https://example.org/guide/install</a>.'
                 '</p>\n')
    assert b.links == 0 and weight(b) == b.chars
    # the same sentence naming its target in words is link-dense
    [b] = blocks('<p>Read <a href="https://example.org/guide">the installation guide of the'
                 ' latest release, kept up to date</a>.</p>\n')
    assert b.links == len("the installation guide of the latest release, kept up to date")
    assert weight(b) < 0


def test_a_title_and_its_short_paragraphs_above_the_first_section_start_the_text():
    from llmtk.clean.density import main_text

    body = ("<p>A collection of poems and drawings, reissued for its twentieth year with "
            "twelve new poems that were left out of the first edition.</p>\n")
    # a product's name, price and stock above its "Description" section
    rendered = ('<a href="/">Home</a>\n<h1>A Light in the Attic</h1>\n<p>£51.77</p>\n'
                f"<p>In stock (22 available)</p>\n<h2>Description</h2>\n{body}")
    assert main_text(rendered).splitlines()[:4] == [
        "A Light in the Attic", "£51.77", "In stock (22 available)", "Description"]
    # a site's section name above an article's title: a label, not a paragraph
    rendered = f"<h1>News</h1>\nDetails\n<h2>Poems reissued</h2>\n{body}"
    assert main_text(rendered).splitlines()[0] == "Poems reissued"
    # a title right above the first section heading: the text starts at the section
    rendered = f"<h1>Poems</h1>\n<h2>Reissued</h2>\n{body}"
    assert main_text(rendered).splitlines()[0] == "Reissued"


def test_a_hinted_run_of_headed_sections_in_the_article_stays_teaser_cards_go():
    from llmtk.clean.extract import extract

    intro = ("<p>Developer Edition comes with a new profile so that it runs alongside the "
             "other versions you have installed, and it keeps its own settings.</p>"
             "<p>Sign in to sync it: the new profile starts empty, without the bookmarks, "
             "passwords and add-ons of the profile you used before, until you do.</p>")
    features = [("Page Inspector", "Examine the HTML and CSS of any page and change the "
                 "structure and the layout of the page as you look at it."),
                ("Web Console", "See what a page logs and interact with it by running "
                 "JavaScript in the context of the page you are looking at."),
                ("Style Editor", "View and edit the CSS styles of a page, create new ones "
                 "and apply existing style sheets to any page you have open.")]

    def page(item: str) -> str:
        items = "".join(item.format(h=h, p=p) for h, p in features)
        return (f"<!DOCTYPE html><html><body><main>{intro}"
                f"<section class='more-features'>{items}</section></main></body></html>")

    # each feature under its own heading, in the article's body: the article's sections
    text = extract(page("<h3>{h}</h3><p>{p}</p><a href='/x'>Learn more</a>"))
    assert all(h in text and p in text for h, p in features)
    # the same under "more-" as teaser cards (a link around heading and text): they go
    text = extract(page("<a href='/x'><div><h3>{h}</h3><p>{p}</p></div></a>"))
    assert intro[3:40] in text and not any(p in text for _, p in features)


DOCSITES = Path(__file__).parent / "data" / "clean" / "docsites"


@pytest.fixture(scope="module")
def doxygen(tmp_path_factory):
    """Two real Doxygen pages (tests/data/clean/docsites) through `llmtk clean`."""
    d = tmp_path_factory.mktemp("doxygen")
    src, out = d / "in.jsonl", d / "out.jsonl"
    names = ["structdh__ctx.html", "chacha_8h_source.html"]
    src.write_text("".join(json.dumps({"id": n, "content_type": "text/html",
                                       "text": (DOCSITES / n).read_text()}) + "\n"
                           for n in names))
    r = InProcess()("clean", src, "--filters", "none", "--no-langid", "--no-pii",
                    "--on-error", "skip", "--workers", "1", "-o", out, "-q")
    assert r.exit_code == 0, r.output
    return {x["id"]: x["text"] for x in map(json.loads, out.read_text().splitlines())}


def test_reference_page_without_prose_keeps_its_fields_not_the_site_header(doxygen):
    text = doxygen["structdh__ctx.html"]
    for kept in ("dh_ctx Struct Reference", "Data Fields", "bignum", "generator", "modulus",
                 "struct dh_keypair"):
        assert kept in text
    for furniture in ("libssh 0.10.6", "The SSH library", "Generated by"):
        assert furniture not in text


def test_code_listing_written_a_div_a_line_keeps_its_lines_in_order(doxygen):
    text = doxygen["chacha_8h_source.html"]
    # one line a line, in order (clean's normalisation narrows the spaces inside a line)
    assert re.search(r"12struct chacha_ctx \{\n +13 +uint32_t input\[16\];\n +14\};", text)
    assert re.search(r"19#define CHACHA_STATELEN +\(CHACHA_NONCELEN\+CHACHA_CTRLEN\)\n", text)
    for furniture in ("libssh 0.10.6", "The SSH library", "Generated by"):
        assert furniture not in text


MANUAL = Path(__file__).parent / "data" / "clean" / "manual" / "modify.en.html"


@pytest.fixture(scope="module")
def manual(tmp_path_factory):
    """A real DocBook chapter (tests/data/clean/manual) through `llmtk clean`."""
    d = tmp_path_factory.mktemp("manual")
    src, out = d / "in.jsonl", d / "out.jsonl"
    src.write_text(json.dumps({"id": "modify", "content_type": "text/html",
                               "text": MANUAL.read_text()}) + "\n")
    r = InProcess()("clean", src, "--filters", "none", "--no-langid", "--no-pii",
                    "--on-error", "skip", "--workers", "1", "-o", out, "-q")
    assert r.exit_code == 0, r.output
    return json.loads(out.read_text())["text"]


def test_code_lines_from_pre_keep_their_spaces(manual):
    # the Makefile's aligned assignments, as the listing writes them
    assert "BIN     = /usr/local/bin\n" in manual
    assert "ICONS   = /usr/local/share/gentoo" in manual
    assert "        install ./gentoo $(BIN)" in manual  # (indentation was always kept)
    # prose around it is one space between words, as before
    prose = [line for line in manual.splitlines() if len(line) > 80 and "=" not in line]
    assert prose and not any("  " in line.strip() for line in prose)
    # and a plain-text record's runs of spaces are still collapsed
    from llmtk.clean.normalize import Normalize

    assert Normalize()("BIN     = /usr/local/bin") == "BIN = /usr/local/bin"


def test_chapter_heading_just_before_the_first_paragraph_is_kept(manual):
    first = manual.split("\n", 1)[0]
    assert first == "Chapter 3. Modifying the source"
    # the site's navigation header above it is still gone
    assert "Prev" not in manual.split("Chapter 3.", 1)[0]


def test_article_body_element_bounds_the_text_and_teasers_outside_it_go():
    from llmtk.clean.extract import extract

    teasers = "".join(f"<div class=t{i}><p>{p} This teaser is another story.</p></div>"
                      for i, p in enumerate(ARTICLE[:2]))
    page = (f"<!DOCTYPE html><html><body><article><h1>Council expands bus network</h1>"
            f"{''.join(f'<p>{p}</p>' for p in ARTICLE * 6)}</article>"
            f"<section class=x9>{teasers}</section></body></html>")
    text = extract(page)
    assert ARTICLE[0] in text and "teaser" not in text


def test_hinted_furniture_inside_the_stretch_goes_and_control_marks_are_harmless():
    from llmtk.clean.extract import extract

    body = "".join(f"<p>{p}</p>" for p in ARTICLE)
    page = (f"<!DOCTYPE html><html><body><div>{body[:len(body) // 2]}"
            f"<div class=share-box><span>Share this</span></div>"
            f"{body[len(body) // 2:]}</div><p>A\x02 stray\x03 mark.</p></body></html>")
    text = extract(page)
    assert "Share this" not in text
    assert ARTICLE[0] in text and ARTICLE[-1] in text
    assert "\x02" not in text and "\x03" not in text


def test_an_article_inside_an_aside_is_kept():
    from llmtk.clean.extract import extract

    # (as on a real German news site: the whole story in an `aside`; a markup name is a
    # hint, so the text decides; a short aside, a sidebar's box, is still removed)
    body = "".join(f"<p>{p}</p>" for p in ARTICLE * 2)
    page = (f"<!DOCTYPE html><html><body><nav>{LINKS}</nav><main><aside class=story>"
            f"<h1>Council expands bus network</h1>{body}</aside>"
            f"<aside class=more><ul>{RELATED}</ul></aside></main></body></html>")
    text = extract(page)
    assert ARTICLE[0] in text and ARTICLE[-1] in text
    assert "Another headline" not in text and "Section 3" not in text


def test_when_every_paragraph_lies_in_a_hinted_element_the_hints_say_nothing():
    from llmtk.clean.extract import extract

    # a layout class naming the sidebar on the wrapper and on the content column (as
    # Drupal themes write them): no paragraph is outside a hinted element
    body = "".join(f"<p>{p}</p>" for p in ARTICLE)
    # (and the sidebar holds a third of the prose: the content column is no majority)
    side = "".join(f"<p>{s} Subscribe to our weekly letter, it is free to read.</p>" for s in (
        "Our letter brings the week's council news to you.",
        "Readers tell us the letter is the best part of the week.",
        "The letter has the week's roadworks and timetable changes."))
    page = (f"<!DOCTYPE html><html><body><div class=page-with-sidebar>"
            f"<div class=hd-x>{LINKS}</div>"
            f"<div class=content-beside-sidebar><h1>Council expands bus network</h1>{body}"
            f"</div><div class=region-sidebar><ul>{RELATED}</ul>{side}</div>"
            f"</div></body></html>")
    text = extract(page)
    assert ARTICLE[0] in text and ARTICLE[-1] in text
    assert "Another headline" not in text and "Section 3" not in text


def test_class_words_in_layout_article_and_label_names_are_no_hint():
    from llmtk.clean.extract import extract

    # (as on real pages: a sidebar layout's row, a Drupal article "promoted" to the front
    # page, its body field with the label hidden; and a long cookie notice outside them)
    body = "".join(f"<p>{p}</p>" for p in ARTICLE)
    notice = "".join(f"<p>{s} We use cookies to measure how this site is read and to show "
                     "you offers, and you can refuse them in the settings.</p>"
                     for s in ("Your privacy matters.", "About cookies.", "Your choice."))
    page = (f"<!DOCTYPE html><html><body><div class=cc-x>{notice}</div>"
            f"<div class='o-row c-fixed-sidebar-layout'><article class='node node--promoted'>"
            f"<h1>Council expands bus network</h1><div class='field field--label-hidden'>"
            f"{body}</div></article><div class=col-b><ul>{RELATED}</ul></div></div>"
            f"</body></html>")
    text = extract(page)
    assert ARTICLE[0] in text and ARTICLE[-1] in text
    assert "Another headline" not in text


def test_a_label_and_a_headline_link_inside_the_story_go_an_index_entry_stays():
    from llmtk.clean.extract import extract

    paras = [f"<p>{p}</p>" for p in ARTICLE]
    related = ('<p><strong>Related:</strong> <a href="/news/9">Bus fares: what the new '
               "routes will cost riders</a></p>")
    page = (f"<!DOCTYPE html><html><body><div>{''.join(paras[:2])}{related}"
            f"{''.join(paras[2:])}</div></body></html>")
    text = extract(page)
    assert ARTICLE[0] in text and ARTICLE[-1] in text and "Related" not in text
    # a list item "name : <link>" (Doxygen's index) is not a label before a headline
    index = "".join(f'<li>member{i}&#160;:&#160;<a href="f{i}.html">file{i}.cpp</a></li>'
                    for i in range(3))
    page = (f"<!DOCTYPE html><html><body><div>{''.join(paras[:2])}<ul>{index}</ul>"
            f"{''.join(paras[2:])}</div></body></html>")
    assert "member1\xa0:\xa0file1.cpp" in extract(page)


def test_a_comment_section_or_sidebar_named_only_by_its_id_is_a_hint():
    from llmtk.clean.extract import extract

    # (as on real blogs: `div#comments` > `li#comment-9266`, `div#sidebar` holding a text
    # widget, no class word on either; the comments are prose as long as the story's)
    body = "".join(f"<p>{p}</p>" for p in ARTICLE)
    def comments(name: str) -> str:
        return "".join(
            f"<li id={name}{i}><p>Posted by reader {i} on 17 July</p><p>I ride the number {i} "
            "bus every morning and the new timetable is a real change for my street, thank "
            "you for writing about it in such detail.</p></li>" for i in range(4))
    widget = ("<p>About this blog: we write about the town's council, its buses and its "
              "roads every week, and we have done so since the spring of 2009.</p>")
    for ids in (("comments", "sidebar", "comment-"), ("x1", "x2", "c-")):
        page = (f"<!DOCTYPE html><html><body><div><h1>Council expands bus network</h1>{body}"
                f"<div id={ids[0]}><h3>4 replies</h3><ol>{comments(ids[2])}</ol></div></div>"
                f"<div id={ids[1]}>{widget}</div></body></html>")
        text = extract(page)
        assert ARTICLE[0] in text and ARTICLE[-1] in text
        hinted = ids[0] == "comments"
        # named by its id, it goes; the same markup with ids that name nothing stays
        assert ("number 2 bus" in text) is not hinted
        assert ("About this blog" in text) is not hinted


def test_a_short_title_over_teaser_cards_goes_with_them_a_subheading_stays():
    from llmtk.clean.extract import extract

    # (as on a real trade paper's page: "Das könnte Sie auch interessieren" above teaser
    # cards, each a link around its headline and first lines in a box of its own, between
    # the story's paragraphs; the title is outside the boxes, a hint cannot take it)
    paras = [f"<p>{p}</p>" for p in ARTICLE]
    cards = "".join(
        f'<div class=related-{i}> <a href="/news/{i}"><h3>Trams return to the old town {i}</h3>'
        f"<p>After twenty "
        f"years the council brings back the tram line number {i}, and residents are glad "
        "about it.</p></a></div>" for i in range(2))
    page = (f"<!DOCTYPE html><html><body><div><h1>Council expands bus network</h1>"
            f"{''.join(paras[:2])}<h2>You may also like</h2>{cards}"
            f"<h2>What the routes cost</h2>{''.join(paras[2:])}</div></body></html>")
    text = extract(page)
    assert ARTICLE[0] in text and ARTICLE[-1] in text
    assert "You may also like" not in text and "What the routes cost" in text


def test_a_page_inside_a_noscript_left_open_is_read_from_it():
    from llmtk.clean.extract import extract

    # (as on a real park authority's page: "<noscript><div id=x></noscript>" opens the
    # body, and the parser reads the whole page as the noscript's content)
    body = "".join(f"<p>{p}</p>" for p in ARTICLE)
    page = (f"<!DOCTYPE html><html><body><noscript><div id=nojs></noscript><div>"
            f"<h1>Council expands bus network</h1>{body}</div></body></html>")
    text = extract(page)
    assert ARTICLE[0] in text and ARTICLE[-1] in text
    # a noscript message beside a readable page stays out
    page = (f"<!DOCTYPE html><html><body><noscript><p>Please turn on JavaScript to see the "
            f"comments below this story, they need it to load.</p></noscript><div>{body}"
            f"</div></body></html>")
    text = extract(page)
    assert ARTICLE[0] in text and "JavaScript" not in text


def test_a_banner_around_the_main_element_is_the_page_not_furniture():
    from llmtk.clean.extract import extract

    # (as on a real news site: a `header role=banner` left open around the whole page,
    # its `main` inside; an ordinary banner beside the main element still goes)
    body = "".join(f"<p>{p}</p>" for p in ARTICLE)
    page = (f"<!DOCTYPE html><html><body><header role=banner><div>Daily Town News</div>"
            f"<main><h1>Council expands bus network</h1>{body}</main></header></body></html>")
    text = extract(page)
    assert ARTICLE[0] in text and ARTICLE[-1] in text
    page = (f"<!DOCTYPE html><html><body><header role=banner><p>Daily Town News, the "
            f"paper of the town since 1901, is read by twelve thousand people.</p></header>"
            f"<main><h1>Council expands bus network</h1>{body}</main></body></html>")
    text = extract(page)
    assert ARTICLE[0] in text and "twelve thousand" not in text


def test_a_heading_over_teasers_that_went_goes_a_section_heading_over_a_caption_stays():
    from llmtk.clean.extract import extract

    # (as on real news pages: "Mehr zum Thema" over a box of short teasers, which go as
    # the hinted box's non-prose; a section's heading over a picture's caption and then
    # its text, as on Wikipedia, heads text that stays)
    paras = [f"<p>{p}</p>" for p in ARTICLE]
    teasers = "".join(f"<div class=teaser-{i}><a href=/n/{i}><img src=/t{i}.jpg></a>"
                      f"<p>Tram line {i} opens 27.10.2023</p></div>" for i in range(3))
    page = (f"<!DOCTYPE html><html><body><div><h1>Council expands bus network</h1>"
            f"{''.join(paras[:2])}<h2>More on this</h2><div class=related-box>{teasers}</div>"
            f"<h2>The routes</h2><div class=map><img src=/map.png><div class=map-caption>The "
            f"four routes</div></div>{''.join(paras[2:])}</div></body></html>")
    text = extract(page)
    assert ARTICLE[0] in text and ARTICLE[-1] in text
    assert "More on this" not in text and "Tram line" not in text
    assert "The routes" in text


def test_a_recipes_ingredients_between_its_lines_and_its_method_stay():
    from llmtk.clean.extract import extract

    # (as on a real baking blog: the time and yield, then the ingredients, each a list
    # item starting with its quantity, then the method; a menu's unnumbered items go)
    items = ["300 g flour", "1 tsp baking powder", "100 g ground almonds", "200 g butter",
             "200 g sugar", "2 eggs", "1 pinch of salt", "50 g flaked almonds"]
    method = ["Mix the flour, the baking powder and the almonds in a large bowl, then rub "
              "in the butter with your fingers until the mixture looks like breadcrumbs.",
              "Stir in the sugar and the eggs, knead to a smooth dough, roll it out and cut "
              "out the biscuits; bake them for fifteen minutes until they are golden."]
    page = ("<!DOCTYPE html><html><body><ul><li>Home</li><li>Recipes</li><li>About</li></ul>"
            "<h1>Almond biscuits</h1><p>Takes 25 minutes, plus 15 to bake.</p>"
            "<p>Makes 40 biscuits.</p><p>Ingredients:</p><ul>"
            + "".join(f"<li>{i}</li>" for i in items) + "</ul><h2>Method</h2>"
            + "".join(f"<p>{m}</p>" for m in method) + "</body></html>")
    text = extract(page)
    assert method[0] in text and method[1] in text
    assert "Makes 40 biscuits." in text and all(i in text for i in items)
    assert "Recipes" not in text


@pytest.mark.parametrize("name", ["newsletter-form", "site-disclaimer", "top-banner",
                                  "nextstory", "next-post", "cta-box",
                                  "block-content_breaker"])
def test_newsletter_disclaimer_banner_and_next_story_boxes_are_hints(name):
    from llmtk.clean.extract import extract

    # (as on real pages: a newsletter box between the story's paragraphs, a publisher's
    # disclaimer, a banner, the next story's teaser, a call to action; each can read as
    # prose, only its name says what it is)
    paras = [f"<p>{p}</p>" for p in ARTICLE]
    box = ("<p>Our weekly letter follows the council's transport committee, which meets "
           "again in the spring; its minutes appear a week after each meeting.</p>")
    page = (f"<!DOCTYPE html><html><body><div>{''.join(paras[:2])}<div class={name}>{box}"
            f"</div>{''.join(paras[2:])}</div></body></html>")
    text = extract(page)
    assert ARTICLE[0] in text and ARTICLE[-1] in text
    assert "weekly letter" not in text
    # the same box under a name that says nothing stays: it reads as prose
    assert "weekly letter" in extract(page.replace(f"class={name}", "class=x7"))


def test_a_lead_paragraph_set_as_a_heading_stays_a_long_title_goes():
    from llmtk.clean.extract import extract

    # (as on real news pages: the standfirst, two sentences, set as an <h2> under the
    # title and above the byline; a heading of that length with a sentence in it is prose)
    lead = ("The council approved four new bus routes on Tuesday. They will link the "
            "northern suburbs with the hospital district and cost twelve million dollars "
            "over three years.")
    title = "Council expands bus network to the northern suburbs, the hospital and the port"
    page = (f"<!DOCTYPE html><html><body><div><h1>{title}</h1><h2>{lead}</h2>"
            f"<p>By Ana Ruiz</p><p>5 May 2020</p>"
            f"{''.join(f'<p>{p}</p>' for p in ARTICLE)}</div></body></html>")
    text = extract(page)
    assert lead in text and ARTICLE[0] in text and ARTICLE[-1] in text
    assert text.startswith(title)  # (the heading just before the text starts it)
    # a heading as long without a sentence in it is a title, not a lead: after the text,
    # over a list of links, it goes
    more = ("More on buses trams and trains in the northern suburbs the hospital district "
            "the port and the old town from our transport desk and our readers in 2020 and 2021")
    tail = f"<h3>{more}</h3><ul>{RELATED}</ul></body></html>"
    assert more not in extract(page.replace("</body></html>", tail))


def test_a_lead_paragraph_right_above_the_article_body_stays_a_short_line_does_not():
    from llmtk.clean.extract import extract

    # (as on real press releases: the lead paragraph set above the element that holds the
    # article's body, which bounds the text)
    lead = ("In its first year the council has approved more new bus routes than in the "
            "five years before, and the transport department expects the first of them to "
            "run in March, ahead of the plan.")
    body = "".join(f"<p>{p}</p>" for p in ARTICLE * 3)
    page = (f"<!DOCTYPE html><html><body><div><h1>Council expands bus network</h1>"
            f"<p>{lead}</p><div class=article-body>{body}</div></div></body></html>")
    text = extract(page)
    assert lead in text and ARTICLE[0] in text and ARTICLE[-1] in text
    # a shorter line there (a date and a place, a photo credit) is not a lead
    short = "Springfield, 8 December 2022. Photo: the transport department."
    assert short not in extract(page.replace(lead, short))


def test_what_follows_a_run_of_dropped_furniture_at_the_end_goes_a_long_paragraph_stays():
    from llmtk.clean.extract import extract

    # (as on real news pages: the story, its metadata box of short lines and tag links,
    # then a newsletter box inside the same article element)
    body = "".join(f"<p>{p}</p>" for p in ARTICLE * 2)
    tags = " ".join(f'<a href="/tags/{t}">{t}</a>,' for t in ("buses", "council", "transport"))
    meta = (f"<div class=post-tags><div>Words: 717</div><div>Published: May 5, 2020, 6:18 "
            f"p.m.</div><div>Tags: {tags}</div></div>")
    box = ("<h2>Subscribe to the Morning Review</h2><p>Get the day's top headlines delivered "
           "to your inbox every morning by signing up today.</p>")
    page = (f"<!DOCTYPE html><html><body><article>{body}{meta}{box}</article>"
            f"</body></html>")
    text = extract(page)
    assert ARTICLE[0] in text and ARTICLE[-1] in text
    assert "inbox" not in text and "Subscribe" not in text
    # a long paragraph after such a run (the story goes on after a photo gallery) stays
    more = ("Note: the council will also review the night routes next spring, after the "
            "consultation with the drivers' union and the residents of the northern "
            "suburbs has ended, and it expects to publish the new timetable in June.")
    text = extract(page.replace(box, f"<p>{more}</p>"))
    assert more in text


def test_the_text_ends_with_its_article_body_element_unless_the_next_one_goes_on():
    from llmtk.clean.extract import extract

    # (as on real podcast and news pages: the article element, then, outside it, another
    # story's teaser under a heading; the page's own blurb far below, past its menus)
    body = "".join(f"<p>{p}</p>" for p in ARTICLE * 2)
    teaser = ("This week a listener who has not voted in years looks for reasons to vote "
              "again, and asks her neighbours, her family and a judge what they think.")
    about = ("Our radio has produced documentaries, reports and interviews since 2002, made "
             "by independent authors and broadcast each week on our site and on the air. "
             "Every programme is free to listen to and to share with your friends.")
    menu = "".join(f'<li><a href="/m/{i}">Programme number {i}</a></li>' for i in range(12))
    page = (f"<!DOCTYPE html><html><body><div><article>{body}</article>"
            f"<h3>You may also like</h3><p>{teaser}</p></div><ul>{menu}</ul>"
            f"<div><p>{about}</p></div></body></html>")
    text = extract(page)
    assert ARTICLE[0] in text and ARTICLE[-1] in text
    assert teaser not in text and about not in text
    # an article written in two body elements, one after the other, goes on in the second
    more = ("The transport department will publish the timetables of the four new routes "
            "in February, a month before the first buses run.")
    parts = (f"<div class=article-body>{body}</div><div class=article-body><p>{more}</p>"
             f"</div>")
    text = extract(page.replace(f"<article>{body}</article>", parts))
    assert more in text


def test_lines_of_another_element_after_the_last_paragraph_go_a_section_stays():
    from llmtk.clean.extract import extract

    # (as on real news pages: the story in <p> paragraphs, then its author's bio and a
    # dateline as a box's lines)
    body = "".join(f"<p>{p}</p>" for p in ARTICLE * 2)
    bio = "Ana Ruiz has covered the city council for ten years. Write to her any time."
    page = (f"<!DOCTYPE html><html><body><div>{body}<div><div>{bio}</div>"
            f"<div>First published: May 5, 2020, 8:38 AM</div></div></div></body></html>")
    text = extract(page)
    assert ARTICLE[0] in text and ARTICLE[-1] in text
    assert "Ana Ruiz has" not in text and "First published" not in text
    # under a heading such lines are a section of the text (a list of the new stops)
    stops = "".join(f"<li>Stop {n}, near the old mill.</li>" for n in ("one", "two", "three"))
    text = extract(page.replace("<div><div>", f"<h2>The new stops</h2><ul>{stops}</ul><div><div>"))
    assert "The new stops" in text and "Stop three, near the old mill." in text
    # and after a paragraph that introduces them, a list of the text's items
    intro = ("<p>Before the work starts, the department will consult the people who live "
             "along the routes, at two meetings:</p>")
    meetings = "<ul><li>Monday, at the town hall.</li><li>Friday, at the library.</li></ul>"
    text = extract(f"<!DOCTYPE html><html><body><div>{body}{intro}{meetings}</div>"
                   "</body></html>")
    assert "Friday, at the library." in text


@pytest.mark.parametrize("topics", ["entry-category-social_media entry-author-sam_lee",
                                    "category-promotions tag-social-media"])
def test_a_posts_topic_classes_on_its_wrapper_are_no_hint(topics):
    from llmtk.clean.extract import extract

    # (as TypePad and WordPress write a post's wrapper: its categories, tags and author in
    # its class, "social", "promo" and "author" among them; the comments under the post
    # are prose as long as the post's, so the wrapper alone holds less than most of it)
    body = "".join(f"<p>{p}</p>" for p in ARTICLE)
    comments = "".join(
        f"<li id=comment-{i}><p>I ride the number {i} bus every morning and the new "
        "timetable is a real change for my street, thank you for writing about it in such "
        "detail, I will be at the next council meeting.</p></li>" for i in range(4))
    bio = ("<p>Sam Lee writes about the town's council, its buses and its roads every week, "
           "and has done so since the spring of 2009 for this blog.</p>")

    def page(box: str) -> str:
        return (f"<!DOCTYPE html><html><body><div id=alpha>{bio}<div>{LINKS}</div></div>"
                f"<div id=beta><div class='entry {topics}'><h3>Council expands bus "
                f"network</h3><div class=entry-body>{body}</div>{box}</div>"
                f"<div id=comments><ol>{comments}</ol></div></div></body></html>")

    text = extract(page(""))
    assert ARTICLE[0] in text and ARTICLE[-1] in text
    assert "number 2 bus" not in text and "Sam Lee writes" not in text
    # a box named by its role is still a hint: the author's box under the post goes
    text = extract(page(f"<div class=author-box>{bio}</div>"))
    assert ARTICLE[-1] in text and "Sam Lee writes" not in text


def _teaser_page(n: int, own_line: bool) -> str:
    """The article, then n teaser cards with no class name: each a link around a story's
    headline and summary (the summary a sentence long enough to read as prose)."""
    gap = "\n" if own_line else ""
    cards = "".join(
        f'<div><a href="/news/{i}">{gap}<h3>Trams return to the old town {i}</h3>'
        f"<p>After twenty years the council brings back the tram line number {i}, and "
        "residents of the old town say they are glad about it.</p></a></div>"
        for i in range(n))
    paras = "".join(f"<p>{p}</p>" for p in ARTICLE)
    return (f"<!DOCTYPE html><html><body><div><h1>Council expands bus network</h1>{paras}"
            f"<h2>Read more</h2>{cards}</div></body></html>")


@pytest.mark.parametrize("own_line", [False, True])
def test_a_run_of_teaser_cards_goes_however_little_of_it_is_links(own_line):
    from llmtk.clean.extract import extract

    # (as on a real Swiss paper's page: after the story, other stories each as one link
    # around headline and summary; their text is not link text, so the summaries read as
    # prose and continued the stretch; also with the link on a line of its own)
    text = extract(_teaser_page(2, own_line))
    assert ARTICLE[0] in text and ARTICLE[-1] in text
    assert "tram line" not in text and "Trams return" not in text
    # one card alone is no list of stories: it stays
    text = extract(_teaser_page(1, own_line))
    assert ARTICLE[-1] in text and "tram line number 0" in text


def test_an_ad_slots_label_between_paragraphs_goes_a_term_stays():
    from llmtk.clean.extract import extract

    # (as on real news pages: an empty ad slot's one-word label between the paragraphs,
    # more than once on the page, in a plain div; a definition list's term between its
    # descriptions is written once)
    p = [f"<p>{x}</p>" for x in ARTICLE]
    slot = "<div><div>Werbung</div></div>"
    page = ("<!DOCTYPE html><html><body><div><h1>Council expands bus network</h1>"
            f"{p[0]}{slot}{p[1]}<div>Routes</div>{p[2]}{slot}{p[3]}</div></body></html>")
    text = extract(page)
    assert all(x in text for x in ARTICLE)
    assert "Werbung" not in text and "Routes" in text


def test_a_comment_thread_under_a_short_post_stays_a_hint_however_long():
    from llmtk.clean.extract import extract

    # (as on real blogs: a note of one paragraph under sixty comments; `div#comments`
    # holds most of the page's prose, which alone would make its name no hint)
    comments = "".join(
        f"<li><p>Reader {i}, 17 July</p><p>I ride the number {i} bus every "
        "morning and the new timetable is a real change for my street, thank you for "
        "writing about it in such detail, I will be at the next council meeting.</p></li>"
        for i in range(6))
    post = f"<h1>Council expands bus network</h1><p>{ARTICLE[0]}</p>"
    text = extract(f"<!DOCTYPE html><html><body><div>{post}</div><div id=comments>"
                   f"<ol class=commentlist>{comments}</ol></div></body></html>")
    assert ARTICLE[0] in text and "number 2 bus" not in text
    # an element of another name holding as much (a "related" box) is still no hint
    text = extract(f"<!DOCTYPE html><html><body><div>{post}</div><div class=related>"
                   f"<ol>{comments}</ol></div></body></html>")
    assert ARTICLE[0] in text and "number 2 bus" in text
    # and with no post outside it the thread's name says nothing: the text is in it
    body = "".join(f"<p>{p}</p>" for p in ARTICLE)
    text = extract(f"<!DOCTYPE html><html><body><div class=comments-open>{body}</div>"
                   "</body></html>")
    assert ARTICLE[0] in text and ARTICLE[-1] in text


def test_the_text_ends_at_a_heading_over_a_dated_comment_thread_a_section_stays():
    from llmtk.clean.extract import extract

    # (as on real blogs: the comments set flat after the post, each a paragraph and a
    # "Posted by" line, in elements no hint names)
    body = "".join(f"<p>{p}</p>" for p in ARTICLE)
    comments = "".join(
        f"<div><p>I ride the number {i} bus every morning and the new timetable is a real "
        "change for my street, thank you for writing about it in such detail.</p>"
        f"<p>Posted by: Reader {i} at November {i + 1}, 2012 3:12 PM</p></div>"
        for i in range(4))

    def page(heading: str, after: str) -> str:
        return (f"<!DOCTYPE html><html><body><div><h1>Council expands bus network</h1>{body}"
                f"<h2>{heading}</h2>{after}</div></body></html>")

    for heading in ("Comments", "4 Responses to “Council expands bus network”"):
        text = extract(page(heading, comments))
        assert ARTICLE[0] in text and ARTICLE[-1] in text
        assert "number 2 bus" not in text and heading not in text
    # a section of the text so named (a style guide's "Comments") has no dated lines
    section = ("<p>Comments in the minutes are written in full sentences, and each of "
               "them names the member who made it and the motion it was made on.</p>")
    text = extract(page("Comments", section * 2))
    assert "Comments" in text and "names the member who made it" in text
    # nor does a heading of one word that is a section's name elsewhere ("Response", a
    # paper's "Discussion" over its references' dated lines)
    for heading in ("Response", "Discussion"):
        assert "number 2 bus" in extract(page(heading, comments))


def test_what_follows_the_one_thematic_break_after_the_story_goes_section_breaks_stay():
    from llmtk.clean.extract import extract

    # (as on press releases: the story, then a rule, then the company's boilerplate as
    # paragraphs of their own; the rendering shows no rule, only the marks say where it is)
    body = "".join(f"<p>{p}</p>" for p in ARTICLE * 2)
    about = ("<p>Daily Town Media is a regional publisher founded in 1921, with offices "
             "in four cities and a staff of about three hundred people.</p>")
    page = (f"<!DOCTYPE html><html><body><div>{body}</div><div><hr>{about}</div>"
            "</body></html>")
    text = extract(page)
    assert ARTICLE[0] in text and ARTICLE[-1] in text
    assert "Daily Town Media" not in text
    assert "\n\n".join(ARTICLE) in text  # (the marks leave the text's lines as they were)
    # an article that breaks its sections with rules keeps what follows each of them
    close = ("<p>At the end of the meeting, the mayor thanked the residents for their "
             "patience during the long consultation.</p>")
    ruled = f"<!DOCTYPE html><html><body><div>{body}<hr>{body}<hr>{close}</div></body></html>"
    assert "the mayor thanked" in extract(ruled)
    # and so does a heading's section after the rule, or one inside the article's body
    assert "Daily Town Media" in extract(page.replace("<hr>", "<hr><h2>About us</h2>"))
    inside = page.replace("<div>", "<article>", 1).replace("</div><div><hr>", "<hr><div>")
    inside = inside.replace("</div></body>", "</div></article></body>")
    assert "<article>" in inside and "Daily Town Media" in extract(inside)


def test_a_photos_caption_in_its_wrapper_goes_a_paragraph_after_a_lead_photo_stays():
    from llmtk.clean.extract import extract

    # (as on news pages: the lead photo and its caption as a wrapper of their own above
    # the story, no <figure>, no class word that says "caption")
    caption = ("In this file photo, council members listen to residents during a public "
               "consultation on the bus network at the town hall. (Daily Town, File)")
    body = "".join(f"<p>{p}</p>" for p in ARTICLE)
    page = ("<!DOCTYPE html><html><body><div><h1>Council expands bus network</h1>"
            f'<div class="image"><img src="bus.jpg" alt=""><p>{caption}</p></div>'
            f"<div>{body}</div></div></body></html>")
    text = extract(page)
    assert all(p in text for p in ARTICLE)
    assert "In this file photo" not in text
    spanned = page.replace(f"<p>{caption}</p>", f"<span>{caption}</span>")
    assert "<span>" in spanned and "In this file photo" not in extract(spanned)
    # a story whose paragraphs follow its lead photo in one element keeps its first one
    story = page.replace(f"<p>{caption}</p></div><div>", "")
    assert "In this file photo" not in story and ARTICLE[0] in extract(story)
