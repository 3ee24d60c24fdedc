"""The extractor's speed-ups change nothing it selects: the grouped hint selector matches
the same elements as the plain list, and resiliparse's node cache is put back after a page
(also when the page fails)."""

import pytest

from llmtk.clean import extract as x

# an element for each kind of hint test, and ones that must not match (excluded tags, the
# attribute without the word, the word in another attribute)
PAGE = """<!DOCTYPE html><html><body>
<div class="post-share-bar">s</div><a class="share-link" href="/s">a</a>
<div class="Related-Stories">r</div><img class="comments-icon">
<div class="c-layout-sidebar">l</div><div class="plain">p</div><div title="sidebar">t</div>
<aside>a</aside><figure><figcaption>c</figcaption></figure>
<div hidden>h</div><span aria-hidden="true">x</span><div role="dialog">d</div>
<div role="alert">al</div><div role="complementary">co</div><div role="main">m</div>
<div id="Header">hd</div><div id="footer">ft</div><div id="main">mn</div>
<div style="DISPLAY:none">n1</div><div style="color: red; display: none">n2</div>
<div style="display:block">b</div><ul class="tags-list"><li class="author-name">au</li></ul>
</body></html>"""


def _matched(selector: str) -> list[str]:
    from resiliparse.parse.html import HTMLTree

    body = HTMLTree.parse(PAGE).body
    return [node.html for node in body.query_selector_all(selector).values()]


def test_the_grouped_hint_selector_matches_what_the_plain_list_matches():
    plain = _matched(", ".join(x.HINTS))
    assert len(plain) == 15  # each kind of hint found, none of the non-matching elements
    assert _matched(x._HINTS) == plain
    assert x._HINTS != ", ".join(x.HINTS)  # (the grouping took place)


def test_grouping_keeps_the_rest_of_each_selector_and_single_tests_as_they_are():
    assert x._grouped(("[a=1]:not(p)", "[a=2]:not(p)", "[a=3]", "b", "[c=1]")) == (
        "[a]:not(p):is([a=1], [a=2]), [a=3], b, [c=1]")
    # a rest's excluded tag names before the tests, its other exclusions after them; class
    # and id selectors grouped with the attribute's other tests
    assert x._grouped(("[k*=x i]:not(a, [k*=y i], b-c)", "[k*=z i]:not(a, [k*=y i], b-c)",
                       ".t", "#i", "[k=w]", "#j:empty", "#l:empty", "p.q")) == (
        "[k]:not(a, b-c):is([k*=x i], [k*=z i]):not([k*=y i]), .t, #i, "
        "[k=w], [id]:is(#j, #l):empty, p.q")


def test_the_node_cache_is_put_back_after_a_page_and_after_a_failure():
    from resiliparse.parse.html import node

    before = node._node_cache
    first = x.extract(PAGE)
    assert node._node_cache is before
    assert x.extract(PAGE) == first
    with pytest.raises(ValueError), x._page_node_cache():
        assert node._node_cache is not before
        raise ValueError("a failing page")
    assert node._node_cache is before


def test_furniture_found_in_the_same_walk_as_math_and_listings_still_goes():
    # a listing that is also furniture (class "toc fragment"), math inside a navigation
    # bar: both go with their furniture; the listing and the math in the text are rewritten
    page = ("<!DOCTYPE html><html><body><nav><a href='/'>Home</a> <math><mi>q</mi></math>"
            "</nav><div class='toc fragment'><div class='line'>menu_line()</div></div>"
            "<p>" + "A paragraph of the article that says enough to be prose. " * 3 + "</p>"
            "<div class='fragment'><div class='line'>int x = 1;</div>\n"
            "<div class='line'>  return x;</div></div>"
            "<p>Then <math><mfrac><mn>1</mn><mi>x</mi></mfrac></math> follows, as said.</p>"
            "</body></html>")
    text = x.extract(page)
    assert "int x = 1;\n  return x;" in text
    assert "Then $\\frac{1}{x}$ follows" in text
    assert "menu_line" not in text and "Home" not in text and "$q$" not in text


@pytest.mark.parametrize("text,sentence", [
    ("Read the manual.", True), ("Really?", True), ("终于。", True), ("wait…", True),
    ("one, two", True), ("term: value", True), ("一，二", False), ("一， 二", True),
    ("a,b;c:d", False), ("trailing comma,", False), ("clause;\nnext", True), ("", False),
    ("Menu Home About", False)])
def test_a_sentence_is_a_sentence_mark_or_a_clause_mark_before_a_space(text, sentence):
    """density._SENTENCE, written as one character class and a condition for speed, reads
    as the two alternatives it stands for."""
    from llmtk.clean.density import _SENTENCE

    assert (_SENTENCE.search(text) is not None) is sentence


def test_the_rendering_splits_into_text_and_tokens():
    """density._TOKEN (each alternative led by a literal, no groups, for speed): a run of
    newlines is one token, the marks are tokens, a tag is one token."""
    from llmtk.clean.density import _TOKEN

    rendered = 'x<p>One <a href="/a">link</a>.</p>\n\n\x02<h2>T</h2>\x03\n<br>\x04y\x05<b>'
    assert _TOKEN.split(rendered) == [
        "x", "<p>", "One ", '<a href="/a">', "link", "</a>", ".", "</p>", "", "\n\n", "",
        "\x02", "", "<h2>", "T", "</h2>", "", "\x03", "", "\n", "", "<br>", "", "\x04", "y",
        "\x05", "<b>"]


def test_a_tag_token_looked_up_has_the_parts_the_tag_regex_reads():
    from llmtk.clean.density import _BARE_TAGS, _TAG_PARTS

    assert len(_BARE_TAGS) == 20
    for token, parts in _BARE_TAGS.items():
        assert _TAG_PARTS.fullmatch(token).groups() == parts


@pytest.mark.parametrize("link", ['<a href="/a">', '<a\thref="/a">', '<a id=x href="/a">'])
def test_a_link_counts_however_its_tag_is_spaced(link):
    """A link's tag found by its first three characters or parsed: the same link."""
    from llmtk.clean.density import blocks

    (b,) = blocks(f"<p>Some text {link}linked words</a> after.</p>")
    # (each piece counted without its outer spaces)
    assert (b.chars, b.links, b.linked) == (len("Some textlinked wordsafter."),
                                            len("linked words"), ["linked words"])


def test_the_code_marks_read_as_their_plain_forms():
    """density._CODE_MARK and _STRONG_CODE, each alternative written from its key character
    with a lookbehind (for speed), find a mark exactly where the plain forms do: on
    crafted cases and on random strings of the characters the forms test."""
    import random
    import re

    from llmtk.clean.density import _CODE_MARK, _STRONG_CODE

    calls = r"[A-Za-z0-9_]\(|\(\)|->|::|[A-Za-z0-9]<[A-Za-z]"
    plain_mark = re.compile(calls + r"|\s[:=]\s|[A-Za-z]{2}_[A-Za-z]{2}"
                            r"|[A-Za-z0-9]_[A-Za-z0-9]\S* |[a-z]\.[a-zA-Z_]\w*\.")
    plain_strong = re.compile(calls + r"|[A-Za-z0-9]_[A-Za-z0-9]"
                              r"|[a-z]\.[a-zA-Z_]\w*\.[a-zA-Z_]")
    crafted = ["f(x)", "()", "a -> b", "std::string", "List<T>", "x : int", "a = b",
               "MDB_val *key", "ssh_channel_open", "java.util.List", "Date_sig.S.week",
               "dp3_1_en", "e.g. this", "(a)", "1 < 2", "a:b", "_x", "史_藍", "viols : 14",
               "Read the manual.", ""]
    rng = random.Random(35)
    alphabet = list("aZz09_()<>-:=. \t\n\xa0é史$/@,")
    fuzzed = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 9)))
              for _ in range(20000)]
    for text in crafted + fuzzed:
        assert (_CODE_MARK.search(text) is None) == (plain_mark.search(text) is None), text
        assert (_STRONG_CODE.search(text) is None) == (plain_strong.search(text) is None), text


def test_the_grouped_furniture_selector_matches_what_the_plain_list_matches():
    page = ("<html><body><nav>n</nav><div role=banner>b</div><div class='x toc'>t</div>"
            "<div id=toc>i</div><div id=catlinks>c</div><div class=navbox>nb</div>"
            "<div class=fragment>f</div><span class=MathJax_Preview>m</span>"
            "<a href='#s'></a><a href='#t'>kept</a><div class=tocs>no</div><div id=toc2>no</div>"
            "<div role=main>no</div><div class=katex-html>k</div></body></html>")
    from resiliparse.parse.html import HTMLTree

    body = HTMLTree.parse(page).body
    plain = [n.html for n in body.query_selector_all(
        ", ".join(x.BOILERPLATE + (x._EMPTY_ANCHORS,) + x._SPECIAL)).values()]
    assert len(plain) == 10
    assert [n.html for n in body.query_selector_all(x._FURNITURE_OR_SPECIAL).values()] == plain


@pytest.mark.parametrize("newlines", range(1, 7))
def test_tidy_leaves_at_most_one_blank_line(newlines):
    """extract._BLANKS, written with its three newlines first for speed, is `\\n{3,}`."""
    text = x._tidy("one  \n" + "\n" * (newlines - 1) + "two\n\n\n")
    assert text == "one" + ("\n" if newlines == 1 else "\n\n") + "two"
