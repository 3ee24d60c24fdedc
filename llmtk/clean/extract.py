"""Main-content extraction: an HTML page in, its main text out (clean's first stage).

Two real extractors. The default (`resiliparse`) parses with resiliparse (C), marks the
elements whose names are hints (HINTS: comments, share boxes, captions...; MAIN: an article's
body) with a control character where each starts and ends, renders the page once, and
decides what is main text from the text itself (llmtk.clean.density: link density, length,
sentences, position; the marks only as hints). `trafilatura` is FineWeb's, with FineWeb's
settings. Before either runs, math is turned into LaTeX text, because both
would otherwise drop it or keep the rendered glyph soup: MathJax 2 `<script type="math/tex">`,
KaTeX and MathJax 3 (`<annotation encoding="application/x-tex">` inside their MathML) and
plain MathML (its `alttext`, else a LaTeX rendering of its elements). Code blocks (`<pre>`)
keep their lines and indentation; paragraphs, headings and list items become lines; the
`¶`/`#` links headings carry to their own anchor (Sphinx, MkDocs) are removed.

Which documents are HTML: a record that says so (`content_type` with "html", as WARC input
carries it), or, with no `content_type`, a text that starts as an HTML document does
(`<!DOCTYPE html>`, `<html>`, `<head>` or `<body>`); a record whose `content_type` names
another type is never extracted.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass
from weakref import WeakValueDictionary

from llmtk.text.html import looks_like_html_page

METHODS = ("resiliparse", "trafilatura", "none")
# MathJax 2's TeX sources (`<script type="math/tex">`, `math/tex; mode=display`)
_MATH_SCRIPT = 'script[type^="math/tex" i]'
# Page furniture that its markup names: HTML5 elements, ARIA roles and the navigation of
# the documentation generators (DocBook, Sphinx, MediaWiki), removed before rendering with
# one C query. A hint, not the rule: what decides the main text is the text itself
# (llmtk.clean.density), which also finds the furniture no markup names, so the generic
# class names (menu, share, footer, sidebar, ...) are left to it. An `aside` with at least
# ASIDE_TEXT characters of text is only a hint (HINTS): some sites write the whole article
# in one. (Kept as a hint, every aside costs its rendering and its blocks.)
ASIDE_TEXT = 1000
BOILERPLATE = (
    "nav", "aside", "body > header", "body > footer", "[role=navigation]", "[role=banner]",
    "[role=contentinfo]", "[role=search]", ".navheader", ".navfooter", ".toc", "#toc",
    ".sphinxsidebar", "#mw-navigation", "#mw-panel", "#catlinks", ".mw-editsection", ".navbox",
    "#titlearea", ".navpath",  # Doxygen's project header and breadcrumb
)
# Empty links to an anchor of the page (the permalink odoc puts before each heading and
# member: `<a href="#x" class="anchor"></a>`): resiliparse renders one as a link left open,
# and the rest of its block then reads as link text. Removed in the same query.
_EMPTY_ANCHORS = 'a[href^="#"]:empty'
_BOILERPLATE = ", ".join(BOILERPLATE + (_EMPTY_ANCHORS,))  # one selector, joined once
# Elements whose names say they are not the main text, however their text reads: comment
# sections, share and subscribe boxes, related and recommended stories, captions, bylines,
# hidden and pop-up elements, promotions. Only a hint (llmtk.clean.density.main_text):
# a prose block inside one weighs nothing when the main stretch is chosen and is kept when
# the stretch runs through it; its other blocks go; an element that holds most of the
# page's prose is no hint. They are marked, not removed, so the page is rendered once.
# A class word says nothing on an article or main element ("node--promoted"), in a layout
# class ("c-fixed-sidebar-layout") or in Drupal's "field--label-hidden" (the field's label
# is hidden, not its text): found on the development half of trafilatura's pages, where
# each hid a whole article. (Nor are elements that render no text marked: a mark costs
# ~10 us, and 4 of a page's ~55 hinted elements are icons, images and inputs.)
_NOT_HINTS = ("a, article, main, [class*=layout i], [class*=label-hidden i], img, input, svg, "
              "iframe, hr, textarea, select, picture, video")
HINTS = tuple(f"[class*={word} i]:not({_NOT_HINTS})" for word in (
    # (each class word costs ~0.02 ms a page, the parse ~0.3 ms: kept are the words whose
    # removal lowered a score on the development halves of the Article Extraction
    # Benchmark, trafilatura's pages or the doc sites; disqus, respond, signup, sponsor,
    # advert, consent, modal, popup, timestamp, login, follow... changed no score there,
    # and sharing, breadcrumb and print lowered the one on trafilatura's pages)
    "comments", "comment-", "share", "social", "related", "recommend", "more-", "subscri",
    "promo", "cookie", "footer", "sidebar", "byline", "author", "caption", "credit",
    "gallery", "carousel", "slideshow", "popular", "tags", "hidden",
    # (and, chosen later on trafilatura's pages' dev half where no other dev score fell:
    # a newsletter box, a disclaimer, a banner, the next story's teaser, a call to action,
    # a "content breaker" box between paragraphs; newsletter had lowered that score before
    # the rules for titles over teasers)
    "newsletter", "disclaimer", "banner", "nextstory", "next-", "cta", "breaker",
)) + tuple(f"[id*={word} i]:not({_NOT_HINTS})" for word in (
    # the same words in an element's id (`div#comments`, `li#comment-9266`, `div#sidebar`,
    # `div#article_comments`): kept are those whose removal lowered a score on the
    # development halves of trafilatura's pages or Readability's pages (the others changed
    # nothing there; "more-" lowered Readability's recall; "share" and "author", which
    # helped Readability by 0.0003, are left out: a DocBook section id is its title)
    "comments", "comment-", "sidebar", "gallery", "tags", "cookie",
)) + (
    "aside", "figcaption", "[hidden]", "[aria-hidden=true]", "[role=dialog]", "[role=alert]",
    "[role=complementary]", "[id=header i]", "[id=footer i]", "[style*=\"display:none\" i]",
    "[style*=\"display: none\" i]",
    # a photo's caption set without <figure> or a class word: the last element of its
    # wrapper, right after the image (`<div class="image"><img><p>In this photo…</p></div>`;
    # chosen on the development halves, issue 35: `img + p` alone took the first paragraph
    # after an article's lead photo, `img ~ p` more; `span` gained captions on
    # trafilatura's pages, `div` nothing more; the two cost ~0.03 ms a page)
    "img + p:last-child", "img + span:last-child",
)  # (not <a>: DocBook's anchors carry ids made of section titles, "_sharing_copying";
# class names and a few id words only, and menus and navigation bars left to link density:
# each selector and each marked node costs, and together they cost more than resiliparse's
# whole rendering)


def _grouped(selectors: tuple[str, ...]) -> str:
    """One selector list that matches what `selectors` match, in fewer tests: lexbor tries
    every selector on every element, most elements have no class, and a class takes a
    case-insensitive search a word. Those that test the same attribute (`[class*=share i]`,
    `.toc`, `#toc`) with the same rest go behind one test that the element has it, and the
    tag names a rest's `:not()` excludes are tested before the attribute's words:
    `[class]:not(a):is([class*=share i], [class*=social i])`. (The grouping saves a
    quarter of the hint query's time, the tag names first a tenth of the rest; a tenth of
    the furniture query's: on the 596 dev-half pages of benchmarks/warc_vs_datatrove.py.)"""
    groups: dict[tuple[str, str], list[str]] = {}
    for sel in selectors:
        if m := _ATTR_TEST.fullmatch(sel):
            test, attr, rest = m.groups()
        elif m := _NAME_TEST.fullmatch(sel):
            (test, rest), attr = m.groups(), "class" if sel[0] == "." else "id"
        else:
            test, attr, rest = sel, sel, ""  # (a group of its own)
        groups.setdefault((attr, rest), []).append(test)
    return ", ".join(_group(attr, tests, rest) if len(tests) > 1 else tests[0] + rest
                     for (attr, rest), tests in groups.items())


def _group(attr: str, tests: list[str], rest: str) -> str:
    """`[attr]:is(tests)rest`, the tag names of a rest `:not(...)` tested first."""
    m = _NOT_LIST.fullmatch(rest)
    if m is None:
        return f"[{attr}]:is({', '.join(tests)}){rest}"
    items = m.group(1).split(", ")
    tags = [x for x in items if _TAG.fullmatch(x)]
    others = [x for x in items if not _TAG.fullmatch(x)]
    return (f"[{attr}]" + (f":not({', '.join(tags)})" if tags else "")
            + f":is({', '.join(tests)})" + (f":not({', '.join(others)})" if others else ""))


# an attribute test (`[class*=share i]`, `[role=dialog]`), then the rest of the selector
_ATTR_TEST = re.compile(r"(\[([\w-]+)[*^$|~]?=[^\]]*\])(.*)")
# a class or an id (`.toc`, `#toc`), then nothing or pseudo-classes
_NAME_TEST = re.compile(r"([.#][\w-]+)((?::.*)?)")
_NOT_LIST = re.compile(r":not\(([^()]*)\)")  # a rest that is one :not() of simple selectors
_TAG = re.compile(r"[a-z][a-z0-9-]*")
_HINTS = _grouped(HINTS)
# Elements whose names say they hold the article's body. Also a hint: the innermost one
# that holds most of the page's prose bounds the stretch (llmtk.clean.density.main_text).
MAIN = ("article", "main", "[role=main]", "[itemprop=articleBody]") + tuple(
    f"[class*={word} i]" for word in (
        "article-body", "article-content", "post-content", "entry-content", "story-body"))
_MAIN = ", ".join(MAIN)
# the page's main element or its article's body, not any `article` (a menu's teasers are):
# a header around one is the page's wrapper, not its banner (_prepare)
_BODY = ", ".join(m for m in MAIN if m != "article")
_MARK_CHARS = "\x02\x03\x04\x05\x06\x07"
_MARKS = re.compile(f"[{_MARK_CHARS}]")
# Code listings whose lines are elements of their own (Doxygen's fragments), made <pre>.
_CODE_LINES = "div.fragment"
# Rendered copies of math next to its source: KaTeX's HTML, MathJax's previews and output
# (they hold glyphs, not the formula's text); the MathML or script beside them is kept.
_RENDERED = (".katex-html, .MathJax_Preview, .MathJax, .MathJax_Display, .MathJax_SVG, "
             "mjx-container > :not(mjx-assistive-mml)")
# whether a page has any of what _rewrite rewrites (or a little more: a cheaper query)
_SPECIAL = (_CODE_LINES, _MATH_SCRIPT, "math", "[class*=MathJax]", ".katex-html",
            "mjx-container")
# the elements a thematic break's mark is set in: blocks, whose text starts a line (in an
# inline element, a link, the mark would make a line of its own)
_RULED = frozenset(("p", "div", "section", "article", "aside", "footer", "blockquote", "ul",
                    "ol", "dl", "table", "figure", "address", "h1", "h2", "h3", "h4", "h5",
                    "h6"))
# the furniture and the specials in one walk (and the thematic breaks: marked for the
# rendering, which shows none; in this walk they cost ~6 µs a page, in their own ~0.1 ms)
_FURNITURE_OR_SPECIAL = _grouped(BOILERPLATE + (_EMPTY_ANCHORS,) + _SPECIAL + ("hr",))


@dataclass(frozen=True)
class Extract:
    method: str = "resiliparse"  # resiliparse, trafilatura or none

    def applies(self, data: dict, text: str) -> bool:
        if self.method == "none":
            return False
        ctype = data.get("content_type")
        if isinstance(ctype, str) and ctype:
            return "html" in ctype.lower()
        return looks_like_html_page(text)

    def __call__(self, page: str) -> str:
        return extract(page, self.method)


def extract(page: str, method: str = "resiliparse") -> str:
    """The main text of an HTML page, lines separated by newlines."""
    if method == "none":
        return page
    with _page_node_cache():
        return _tidy(_extract(page, method))


def _extract(page: str, method: str) -> str:
    tree = _prepare(page, hints=method == "resiliparse")
    if method == "resiliparse":
        from llmtk.clean.density import main_text

        # rendered once, with its blocks, links and the hinted elements' edges marked
        text = main_text(_render(tree, noscript=False))
        if not text and tree.body is not None and tree.body.query_selector("noscript"):
            # (a `<noscript>` left open, "<noscript><div id=x></noscript>", holds the rest
            # of the page as the parser reads it: rendered with it, once nothing else is)
            text = main_text(_render(tree, noscript=True))
    elif method == "trafilatura":
        import trafilatura

        # FineWeb's settings (datatrove's Trafilatura extractor as FineWeb configures it)
        text = trafilatura.extract(tree.document.html, favor_precision=True,
                                   include_comments=False, deduplicate=True) or ""
        # (it does not say which lines are code: runs of spaces go, as before)
        text = _INNER_SPACES.sub(" ", text)
    else:
        raise ValueError(method)
    return text


@contextmanager
def _page_node_cache():
    """resiliparse 2 keeps the Python object of each DOM node it hands out in a module-level
    WeakValueDictionary (`resiliparse.parse.html.node._node_cache`, looked up on each use);
    a page hands out ~170 (its hinted elements and two marks each), and the weak references
    cost ~0.4 ms a page, a tenth of `llmtk clean` on WARC. For one page a plain dict holds
    them: none dies while the page's tree lives (so no node's address is reused for
    another), and all go with the dict when the page is done. Other versions: unchanged."""
    try:
        from resiliparse.parse.html import node as nodes
    except ImportError:  # (resiliparse < 2: no such cache)
        nodes = None
    weak = getattr(nodes, "_node_cache", None)
    if not isinstance(weak, WeakValueDictionary):
        yield
        return
    nodes._node_cache = {}
    try:
        yield
    finally:
        nodes._node_cache = weak


def _prepare(page: str, hints: bool = False):
    """The parsed page with math as LaTeX text and rendered duplicates removed; with
    `hints`, the elements HINTS names marked (llmtk.clean.density.HINT_START/END), and the
    thematic breaks (`<hr>`: RULE)."""
    from resiliparse.parse.html import HTMLTree

    from llmtk.clean.density import HINT_END, HINT_START, MAIN_END, MAIN_START, RULE, THREAD_START

    # the marks are ours alone (one `in` a character: a regex scan of a page costs more
    # than its parse)
    if hints and any(c in page for c in _MARK_CHARS):
        page = _MARKS.sub("", page)
    tree = HTMLTree.parse(page)
    body = tree.body
    if body is None:
        return tree
    # one walk finds the furniture and whether the page has math or code listings to
    # rewrite (cheaper than searching the page's text for them; each walk costs ~0.1 ms)
    special = False
    rules = []
    for node in body.query_selector_all(_FURNITURE_OR_SPECIAL).values():
        if node.tag == "hr":
            rules.append(node)
            continue
        if _maybe_special(node):
            special = True  # (where it is not, _rewrite finds nothing to rewrite)
            if not node.matches(_BOILERPLATE):
                continue
        if node.tag == "aside" and len(node.text) >= ASIDE_TEXT:
            continue  # (an article written in an aside: left to the hint below)
        if node.tag == "header" and node.query_selector(_BODY) is not None:
            continue  # (a banner around the whole page, its main inside: left to the text)
        # (remove(), not the parent's remove_child(): each node handed to Python costs
        # ~1.5 us, the parent one more a removed element)
        node.remove()
    if special:
        _rewrite(tree, body)
    if hints:
        # (the document's own method: the tree's costs a third more a call, about what
        # looking up tree.document costs, and a page has ~100 marks)
        text = tree.document.create_text_node
        # (values(): indexing the node list runs the query again for each item)
        for node in body.query_selector_all(_HINTS).values():
            names = node.getattr("class") or ""
            # (the topic test is called only where it can say yes: a topic class has a "-")
            if "-" in names and _named_by_topics_only(node, names):
                continue
            # its first and last child: the rendering shows where the element starts and
            # ends (resiliparse renders a one-character control text as it is)
            node.prepend(text(THREAD_START if _thread(node, names) else HINT_START))
            _end_of(node).append(text(HINT_END))
        for node in body.query_selector_all(_MAIN).values():
            node.prepend(text(MAIN_START))
            node.append(text(MAIN_END))
        for node in rules:
            # at the start of the element after it, as a hinted element's start is marked
            # (a mark of its own, in the break's place, would add a line to the rendering)
            after = node.next_element_sibling
            if after is not None and after.tag in _RULED:
                after.prepend(text(RULE))
    return tree


def _render(tree, noscript: bool) -> str:
    """The page as resiliparse's minimal_html rendering: its blocks and links."""
    from resiliparse.extract.html2text import extract_plain_text

    return extract_plain_text(tree, preserve_formatting="minimal_html", main_content=False,
                              links=True, list_bullets=False, alt_texts=False,
                              comments=False, noscript=noscript, form_fields=False)


def _maybe_special(node) -> bool:
    """Whether an element may be one that _SPECIAL names (more: any script, and the class
    words in any case), told apart from the furniture without another query."""
    if (node.tag or "").lower() in ("math", "script", "mjx-container"):
        return True
    names = (node.getattr("class") or "").lower()
    return "fragment" in names or "mathjax" in names or "katex-html" in names


# A post's topics and author written into its wrapper's class by blog engines
# (WordPress's `category-social tag-promotion`, TypePad's `entry-category-media
# entry-author-jane`): they name what the post is about, not what the element is.
_TOPIC_CLASS = re.compile(r"(?<!\S)(?:(?:entry-)?(?:category|tag)|entry-author)-\S+", re.I)


def _named_by_topics_only(node, names: str) -> bool:
    """Whether a hinted element (of class `names`) is one only because a hint word
    (`social`, `promo`, `author`) is in its topic classes: without them it matches no
    hint. (The caller asks only where `names` holds a "-", as every topic class does.)"""
    if _TOPIC_CLASS.search(names) is None:
        return False
    node.setattr("class", _TOPIC_CLASS.sub("", names))
    hinted = node.matches(_HINTS)
    node.setattr("class", names)
    return not hinted


def _thread(node, names: str) -> bool:
    """Whether a hinted element (of class `names`) is named as a comment thread or one of
    its comments (`div#comments`, `div.Comments`, `li#comment-9266`): marked apart
    (THREAD_START), so that a short post above a long discussion keeps the thread a hint
    however much of the page's prose it holds (llmtk.clean.density._threads). ("omment":
    both spellings without lowering the names; the id is read only when the class does
    not say: each read costs, and a page has ~50 hinted elements.)"""
    return "omment" in names or "omment" in (node.getattr("id") or "")


def _end_of(node):
    """Where an element's end mark goes: the element, or a table row's last cell (the
    rendering drops a text node after a row's last cell, and a hint left open would run to
    the end of the page: Doxygen's inherited-member rows, class "...SharedObject")."""
    if node.tag == "tr":
        return node.last_element_child or node
    return node


def _rewrite(tree, body) -> None:
    """Code listings made <pre>, math made LaTeX text, its rendered copies removed."""
    for node in body.query_selector_all(_CODE_LINES).values():
        _as_pre(tree, node)
    for node in body.query_selector_all(_MATH_SCRIPT).values():  # MathJax 2's sources
        if node.parent is not None:
            tex = node.text.strip()
            display = "mode=display" in (node.getattr("type") or "").replace(" ", "").lower()
            text = f"$${tex}$$" if display else f"${tex}$"
            node.parent.replace_child(tree.create_text_node(text), node)
    for node in body.query_selector_all(_RENDERED).values():
        if node.parent is not None:
            node.parent.remove_child(node)
    for node in body.query_selector_all("math").values():
        tex = _latex_of(node)
        display = node.getattr("display") == "block"
        text = f"$${tex}$$" if display else f"${tex}$"
        if node.parent is not None:
            node.parent.replace_child(tree.create_text_node(text), node)


def _as_pre(tree, node) -> None:
    """A code listing written one `<div class="line">` a line (Doxygen) as one `<pre>`:
    rendered line by line it reads as a run of short, link-dense blocks, not as code."""
    if node.parent is None:
        return
    pre = tree.create_element("pre")
    # the lines are divs separated by newlines, so the element's text is the listing (a
    # query for the lines would cost more than the rest of the page)
    pre.append_child(tree.create_text_node(node.text))
    node.parent.replace_child(pre, node)


def _latex_of(node) -> str:
    """LaTeX for a MathML element: its TeX annotation, its alttext, else rendered."""
    for ann in node.query_selector_all("annotation").values():
        if (ann.getattr("encoding") or "").lower() in ("application/x-tex", "tex",
                                                      "text/x-latex", "latex"):
            return ann.text.strip()
    alt = node.getattr("alttext")
    if alt:
        return alt.strip()
    return _mathml(node).strip()


_MO = {"∑": r"\sum ", "∫": r"\int ", "∏": r"\prod ", "≤": r"\le ", "≥": r"\ge ", "≠": r"\ne ",
       "→": r"\to ", "×": r"\times ", "·": r"\cdot ", "∞": r"\infty ", "±": r"\pm ",
       "−": "-", "\u2061": "", "\u2062": ""}
_MI = {"α": r"\alpha ", "β": r"\beta ", "γ": r"\gamma ", "δ": r"\delta ", "ε": r"\epsilon ",
       "θ": r"\theta ", "λ": r"\lambda ", "μ": r"\mu ", "π": r"\pi ", "σ": r"\sigma ",
       "φ": r"\phi ", "ω": r"\omega ", "Δ": r"\Delta ", "Σ": r"\Sigma ", "Ω": r"\Omega "}


def _mathml(node) -> str:
    """A small MathML-to-LaTeX rendering for presentation MathML without annotations."""
    tag = (node.tag or "").lower()
    if node.type != 1:  # a text node
        return node.text or ""
    kids = [c for c in node.child_nodes if c.type == 1 or (c.text or "").strip()]
    parts = [_mathml(c) for c in kids]
    if tag in ("mi", "mn", "mtext"):
        text = node.text.strip()
        return _MI.get(text, text) if tag == "mi" else text
    if tag == "mo":
        text = node.text.strip()
        return _MO.get(text, text)
    if tag == "mfrac" and len(parts) == 2:
        return rf"\frac{{{parts[0]}}}{{{parts[1]}}}"
    if tag == "msqrt":
        return rf"\sqrt{{{''.join(parts)}}}"
    if tag == "mroot" and len(parts) == 2:
        return rf"\sqrt[{parts[1]}]{{{parts[0]}}}"
    if tag in ("msup", "msub") and len(parts) == 2:
        return f"{parts[0]}{'^' if tag == 'msup' else '_'}{{{parts[1]}}}"
    if tag in ("msubsup", "munderover") and len(parts) == 3:
        return f"{parts[0]}_{{{parts[1]}}}^{{{parts[2]}}}"
    if tag in ("munder", "mover") and len(parts) == 2:
        return f"{parts[0]}{'_' if tag == 'munder' else '^'}{{{parts[1]}}}"
    if tag == "mtable":
        return r"\begin{matrix}" + r" \\ ".join(parts) + r"\end{matrix}"
    if tag == "mtr":
        return " & ".join(parts)
    if tag in ("annotation", "annotation-xml"):
        return ""
    return "".join(parts)


# (three newlines written out: a pattern that starts with a literal is searched for as a
# string; one that starts with a repeat, `\n{3,}`, is tried at every position, 9x slower)
_BLANKS = re.compile(r"\n\n\n\n*")
_INNER_SPACES = re.compile(r"(?<=\S)[^\S\n]{2,}(?=\S)")


def _tidy(text: str) -> str:
    lines = [line.rstrip() for line in text.splitlines()]
    return _BLANKS.sub("\n\n", "\n".join(lines)).strip()
