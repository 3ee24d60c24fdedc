"""Which blocks of a rendered page are its main text, decided from the text itself.

The page is rendered once by resiliparse (C) in its `minimal_html` form, which keeps the
block structure (one block a line; paragraphs, headings and `<pre>` marked) and the links
(`<a href>`): all the structure the decision needs, without a Python walk over the DOM
(resiliparse's node objects cost microseconds each). Each block is weighed by the signals
boilerplate-removal research found to separate prose from page furniture (boilerpipe's
text and link density, jusText's length and context, readability's punctuation):

* prose: at least GOOD_CHARS long, few links, a sentence in it: plus its length;
  a shorter block with a sentence: plus a little;
* a long paragraph with a sentence and a few more links (an article citing its sources):
  plus a little;
* link-dense (menus, related-article lists, tag clouds, share bars): minus a multiple of
  its length, unless it is a bare address (a source cited as its URL: nothing); headings
  and other short blocks (dates, bylines, labels, a short line mostly of digits): minus a
  little, but a heading LEAD_CHARS long with a sentence (a lead paragraph set as a
  heading) weighs as prose; a list item without links that starts with a number (a
  recipe's "300 g Mehl"): nothing;
  a table row weighs nothing (a table of links is content as often as it is navigation);
  a link whose text is a web address spelled out ("see https://www.debian.org/doc") counts
  as text, not as a link: menus and headline lists name their targets in words;
* an API reference's linked code (a signature `val make : int -> t`, `size (const Event &)`,
  a list of member names `addClass, after, appendChild`, an index entry `NODEDATA : mdb.c`,
  a member table's row or one-line description, a linked member name before its
  description): plus a little, like a short sentence, and never furniture: its links are
  the types and members it names. A table row that is all links and no code (a project's
  navigation bar laid out as a table) is furniture, and so is a short copyright line on a
  page without prose;
* a prose block inside an element whose markup names it furniture (llmtk.clean.extract.HINTS:
  comments, share and subscribe boxes, related stories, captions, bylines...) weighs
  nothing, unless that element holds most of the page's prose (but a comment thread,
  THREAD_START, under a post of THREAD_POST prose outside the hints stays a hint however
  much it holds: a short note under a long discussion), or SECTIONS paragraphs each
  under its own unlinked heading in the article's body (a "more-features" list: the
  article's sections; teaser cards, a link around heading and text, are not): the names
  are a hint, not the rule; and when every paragraph lies in a hinted element, the page's hints say
  nothing (a layout class on its wrapper). The elements are marked in the one rendering
  (HINT_START/HINT_END).

The main text is the stretch of blocks with the largest sum (and any other stretch that
weighs at least SECOND of it): short pieces between paragraphs (subheadings, list items,
code) stay, those before the first and after the last paragraph (titles, bylines, share
bars, related stories, footers) go, except the heading just before the first paragraph
(and, when that is a section heading, the title ranked above it with the short paragraphs
between them: a product's name, price and stock above its "Description"); when an element
named as the article's body (llmtk.clean.extract.MAIN: `article`, `main`,
`itemprop=articleBody`, `entry-content`...) holds MAIN_SHARE of the page's prose, the
stretch is chosen inside the innermost such element (and the lead paragraph right above it,
LEAD_CHARS of prose without links: a standfirst set outside the body). What follows the
stretch's last list of links (two furniture blocks in a row) is cut when it holds under
TAIL of the stretch's prose (an author's note, a newsletter box); so is what follows its
last run of DROP_RUN dropped blocks (a metadata box's date and tags), what it holds after
the article-body element that holds BODY_SHARE of its prose, and the lines of other
elements after its last `<p>` paragraph (a bio, a dateline: _end_of_paragraphs) and what
follows its one thematic break (`<hr>`, marked RULE: _after_rule), each when small and
without the paragraphs that would say the article goes on; and the text ends
before a heading that names a comment thread ("Comments", "20 Responses to ...") with
THREAD_DATES short dated lines under it (a blog's comments set flat after the post, in
elements no hint names: _before_thread). Inside the stretch,
link-dense blocks without a sentence (or with no more than a label outside their links:
"Related: <headline>", or a linked headline with no sentence mark outside its links), the
short title heading such a list or a row of teaser cards ("Mehr zum Thema"), a short
heading whose next block is not kept (the title of teasers that went, "Vous aimerez aussi"),
the non-prose blocks of hinted elements, teaser cards when a page has TEASER_CARDS of them
(a link around a headline and a few blocks: its summary reads as prose) and an ad slot's
one-word label between two paragraphs that the page repeats ("Advertisement") are dropped.
Header-link marks (the `¶` or `#` link to the heading's own anchor that Sphinx, MkDocs and
others add) are removed anywhere. A page without a full paragraph (a listing, a reference
page, a short snippet) keeps every block that is not furniture between the first and the
last block outside the hinted elements (the text cannot say where such a page starts and
ends; its markup can).

A reference page (REFERENCE_SHARE of its blocks an API's linked code, in a shape only code
has: javadoc, Doxygen, odoc, haddock; an article has next to none) is read as a reference,
not an article: a block whose links all name identifiers in a programmer's spelling is
linked code too, a short block that is not furniture (a label "Returns:", a value "1.1", a
heading) weighs as a short sentence, not against the stretch, and what the hinted elements
hold inside the stretch stays (there a class word names the API: odoc's "at-tags", a
"SharedObject").

Thresholds were chosen on the development half of the Article Extraction Benchmark's sites,
the no-prose rule and the API rules on the development sites of the documentation sites
(doc_sites.py: the API and reference-page rules on its `dev` group of javadoc, Doxygen,
odoc and haddock sites, reported on two held-out groups; the reference pages' share chosen
among 0.0-0.3 where the news sets' dev halves stayed as they were, with a margin), the
hint rules and the label rule also on the development half of trafilatura's evaluation
pages (trafilatura_eval.py), the comment-thread rules on Dragnet's development half with
the other sets' development halves as checks (dragnet_pages.py and the sets beside it in
docs/clean.md), and checked on the Debian manuals (article_extraction.py,
extract_quality.py; numbers in docs/clean.md). Lengths are UTF-8 bytes: a CJK character
(3 bytes) says about as much as a short word, so one threshold serves both kinds of script.
"""

from __future__ import annotations

import html as htmllib
import re
from itertools import islice

# chosen on the benchmark's development half (see above); lengths in UTF-8 bytes
GOOD_CHARS = 80     # a prose block is at least this long ...
GOOD_LINKS = 0.3    # ... with at most this share of it in links, and has a sentence
BAD_LINKS = 0.5     # a block with more than this share in links is furniture ...
BAD_WEIGHT = 1.5    # ... and weighs minus this many times its length
SHORT_PROSE = 0.3   # a shorter block with a sentence weighs plus this share of its length
SHORT_WEIGHT = 0.2  # any other short block (a heading, a date, a label) minus this share
HINT_SHARE = 0.7    # a hinted element holding more of the page's prose is no hint ...
THREAD_DATES = 2    # ... and a heading that names comments over this many dated lines
THREAD_LINES = 40    # ... among the first this many lines under it
THREAD_POST = 160   # ... unless it is a comment thread under a post of this much prose
SECTIONS = 3        # a hinted element of this many headed paragraphs is the text's sections
MAIN_SHARE = 0.85   # an article-body element holding this share of the prose bounds it
SECOND = 0.5        # a further stretch is kept when it weighs this share of the best one
ALL_LINKS = 0.8     # a block with this share of its text in links is a list item or headline
DIGITS = 0.3        # a short line with this share of digits is a date or a price
LIST_RUN = 2         # furniture blocks in a row that make a list of links
DROP_RUN = 3        # dropped blocks in a row that end the article's text
BODY_SHARE = 0.5    # an article-body element with this share of the stretch's prose ends it
KIND_PARAGRAPHS = 3  # <p> paragraphs that say the text is written in them ...
KIND_LINES = 4      # ... when they are no more lines than this (a box, not a list)
KIND_TAIL = 0.1     # ... and what follows them in other elements goes under this share
# what follows the stretch's one thematic break (`<hr>`) goes when it is this many paragraphs
# or fewer weighing under this share of the stretch (_after_rule; chosen on the development
# halves: 0.25-0.35 the same, 0.2 kept a press release's two "about the company"
# paragraphs, and so did 1 paragraph; 3 lost text on L3S-GN1's)
RULE_PARAGRAPHS = 2
RULE_TAIL = 0.3
TAIL = 0.2          # prose after the stretch's last list of links weighing less goes
TITLE_WORDS = 6     # a list's title ("Das könnte Sie auch interessieren") has at most this
HEADLINE_WORDS = 4  # a linked headline has at least this many words
MID_WEIGHT = 0.2    # a long paragraph with a sentence and a few more links: plus this share
# a teaser card (a link around a story's headline, summary and byline) has at most this
# many blocks, and a page with this many such cards lists other stories (_teaser_cards);
# chosen on the development halves: 3 blocks lost a card of four (a label, headline,
# summary and date), 6 gained nothing; a run of 3 cards as good as 2
TEASER_BLOCKS = 4
TEASER_CARDS = 2
# an ad slot's label between two paragraphs has this many words ("Advertisement"; at 2
# the same lines went on the development halves, no more)
SLOT_WORDS = 1
LEAD_LINES = 3      # short lines between a title and the first section heading it heads
API_WEIGHT = 0.3    # an API page's linked signature or member row weighs plus this share
REFERENCE_SHARE = 0.1  # a page with this share of its blocks linked code is a reference
# a heading this long with a sentence in it is a lead paragraph (a news site's standfirst
# set as <h2>), weighed as prose, and so is a paragraph as long right above the article's
# body element (outside it); chosen among 1.25-3 × GOOD_CHARS on trafilatura's pages'
# dev half: below 2 × the AEB's dev half lost precision (its truth leaves out decks of
# 130-160 bytes), above it trafilatura's pages lost their leads
LEAD_CHARS = 2 * GOOD_CHARS
# a sentence mark (. ! ? 。 …), or a clause mark (, ; : ，、) before a space: written as one
# class and a condition, the engine skips to candidates by the class alone (written as two
# alternatives, a search cost twice as much)
_SENTENCE = re.compile(r"[.!?。！？…,;:，、；：](?:(?<=[.!?。！？…])|\s)")
_MARKS = {"¶", "#", "§", "🔗", "⚓", "\u200b"}  # (Docusaurus: a zero-width space)
# where an element that llmtk.clean.extract.HINTS names starts and ends (one control
# character each, removed from the page before it is parsed)
HINT_START, HINT_END = "\x02", "\x03"
# where a hinted element named as a comment thread starts (it ends with HINT_END): its
# number is negative in a block's hints (_threads)
THREAD_START = "\x06"
# where an element that llmtk.clean.extract.MAIN names (an article body) starts and ends
MAIN_START, MAIN_END = "\x04", "\x05"
# where a thematic break (`<hr>`) stands: the rendering shows none
RULE = "\x07"
# (a run of newlines is one token: a page's rendering is a third blank lines; the page is
# split by it in one call into texts and tokens, no groups inside a token: each group is one
# more piece a token. Every alternative starts with a literal character, so the regex engine
# skips the text between tokens by those characters alone: `\n+` and `[\x02-\x07]` cost a
# third more.)
_TOKEN = re.compile(r"(<(?:/?)(?:a|p|pre|h[1-6]|br)\b[^>]*>|\n\n*|\x02|\x03|\x04|\x05|\x06|\x07)")
# A tag token's parts (closing slash, tag, attributes): the bare tags the rendering writes
# are looked up, the rest parsed; a link's target is read from its token (`<a href="...">`)
_BARE_TAGS = {f"<{slash}{tag}>": (slash, tag, "") for slash in ("", "/")
              for tag in ("a", "p", "pre", "br", "h1", "h2", "h3", "h4", "h5", "h6")}
_TAG_PARTS = re.compile(r"<(/?)(a|p|pre|h[1-6]|br)\b([^>]*)>")
# a run of spaces inside a line of prose (&nbsp;&nbsp;, table cells' tabs): one space
_INNER_SPACES = re.compile(r"(?<=\S)[^\S\n]{2,}(?=\S)")
_URL_TEXT = re.compile(r"\s*\(?(?:https?://|www\.)")


class Block:
    __slots__ = ("parts", "plain", "kind", "chars", "links", "gap", "raw", "sentence", "hints",
                 "mains", "term", "api", "linked", "level", "card", "rule")

    def __init__(self, gap: bool) -> None:
        self.hints: tuple[int, ...] = ()  # the hinted elements it lies in (by number)
        self.mains: tuple[int, ...] = ()  # the article-body elements it lies in
        self.parts: list[str] = []
        self.plain: list[str] = []  # the parts outside links
        self.kind = ""          # "p", "h", "pre" or "" (any other line)
        self.level = 0          # a heading's rank (1 for <h1>), 0 for other blocks
        self.card = 0           # inside a link around whole blocks (a teaser's card): its number
        self.rule = False       # a thematic break (`<hr>`) right before it
        self.chars = 0
        self.links = 0
        self.gap = gap          # a blank line before it
        self.raw = ""           # the parts joined, once the block is complete (blocks)
        self.sentence = False   # whether raw holds a sentence
        self.term = False       # an API member's linked name before its description
        self.api: bool | None = None  # whether it is linked code (_api_links, once)
        self.linked: list[str] = []  # the texts of its links

    def text(self) -> str:
        text = htmllib.unescape(self.raw).strip("\n")
        if self.kind == "pre":  # code keeps its spaces (clean's normalisation does too)
            return text
        return _INNER_SPACES.sub(" ", text) if "  " in text or "\xa0" in text or "\t" in text \
            else text


def blocks(rendered: str) -> list[Block]:
    """The blocks of resiliparse's minimal_html rendering, with their link characters."""
    out: list[Block] = []
    block = Block(False)
    parts, plain = block.parts, block.plain  # (the current block's, held in locals)
    # (ruled: a thematic break stands before the next text; on_mark: its mark is the last
    # token, the newline after it ends the mark's line, no blank line)
    in_link = in_pre = ruled = on_mark = False
    in_card = cards = 0  # the card open here (a link around whole blocks), and how many
    link_start, link_href = 0, ""
    count = 0
    stack: list[int] = []  # the hinted elements open here
    mains: list[int] = []  # the article-body elements open here
    pieces = _TOKEN.split(rendered)  # text, token, text, token, ..., text
    items = iter(pieces)  # (read two at a time; the last text is left over: strict=False)
    for seg, token in zip(items, items, strict=False):
        if seg:
            parts.append(seg)
            n = seg.strip()  # (_size, inlined: a call per piece costs a tenth of the loop)
            n = len(n) if n.isascii() else len(n.encode())
            if n and not block.chars:
                if stack and not in_pre:  # (code is content)
                    block.hints = tuple(stack)
                block.mains = tuple(mains)
                if ruled:
                    block.rule, ruled = True, False
            block.chars += n
            if in_link:
                block.links += n
            else:
                plain.append(seg)
        first = token[0]
        if first == "\n":
            marked_line, on_mark = on_mark, False
            if in_pre:
                parts.append(token)
                continue
            # a link never reaches past its block (nor does a bad one); one around whole
            # blocks makes them a card (a teaser's heading and text as one link)
            if in_link and not in_card:
                cards += 1
                in_card = cards
            in_link = False
            if parts:
                out.append(block)
                block = Block(len(token) > 1)  # (a blank line before it)
                parts, plain = block.parts, block.plain
                block.card = in_card
            else:
                # (the line a thematic break's mark stands on is no blank line)
                block.gap = block.gap or not marked_line or len(token) > 1
                block.card = in_card  # (a link opened on a line of its own)
            continue
        if token == RULE:  # (the next block with text starts after a thematic break)
            ruled = on_mark = not in_pre
            continue
        if first != "<":  # an article-body or a hinted element opens or closes
            marked = mains if token in (MAIN_START, MAIN_END) else stack
            if token in (MAIN_START, HINT_START):
                count += 1  # each marked element gets its own number
                marked.append(count)
            elif token == THREAD_START:
                count += 1  # (a comment thread's: negative)
                marked.append(-count)
            elif marked:
                marked.pop()
            continue
        if token.startswith("<a "):  # a link opens
            link_href = _href(token)  # (the tag's name holds no `href="`)
            in_link, link_start = bool(link_href), len(parts)
            continue
        closing, tag, attributes = _BARE_TAGS.get(token) or _TAG_PARTS.fullmatch(token).groups()
        if tag == "a":
            if not closing:
                # an anchor without a target (`<a id=…></a>`) is rendered as an empty,
                # unclosed link: it is not a link
                link_href = _href(attributes)
                in_link, link_start = bool(link_href), len(parts)
                continue
            in_card = 0
            if in_link:
                in_link = False
                # (the calls below only where they can change something: a link of one
                # piece, most are; each call a link costs a twentieth of the loop)
                if len(parts) == link_start + 1 and link_href[0] == "#":
                    _drop_mark(block, link_start, link_href)
                k = len(parts) - link_start
                if k == 1:
                    text = parts[-1]
                    block.linked.append(text)
                    if _SPELLED_ADDRESS.fullmatch(text):
                        _unlink_address(block, link_start)
                elif k:
                    block.linked.append("".join(parts[link_start:]))
        elif tag == "pre":
            in_pre = not closing
            block.kind = "pre"
        elif tag == "p" and not block.kind:
            block.kind = "p"
        elif tag[0] == "h" and tag != "br":
            block.kind = "h"
            block.level = block.level or int(tag[1])
    seg = pieces[-1]
    if seg:
        block.parts.append(seg)
        if not in_link:
            block.plain.append(seg)
        n = _size(seg)
        if n and not block.chars:
            if stack and not in_pre:
                block.hints = tuple(stack)
            block.mains = tuple(mains)
        block.chars += n
    if block.parts:
        out.append(block)
    # (each block's raw text and whether it holds a sentence, once it is complete: in this
    # loop, not a method, whose call a block cost 0.14 % of `llmtk clean` on WARC)
    search = _SENTENCE.search
    for b in out:
        b.raw = raw = "".join(b.parts)
        b.sentence = search(raw) is not None
    return out


def _href(attributes: str) -> str:
    """A link's target: from its attributes' first `href="` to the next quote ("" when
    there is none); a regex search a link cost more."""
    start = attributes.find('href="')
    if start < 0:
        return ""
    end = attributes.find('"', start + 6)
    return attributes[start + 6:end] if end >= 0 else ""


def _size(seg: str) -> int:
    """The UTF-8 length of a piece of text without its outer spaces (most are ASCII)."""
    seg = seg.strip()
    return len(seg) if seg.isascii() else len(seg.encode())


def _drop_mark(block: Block, start: int, href: str) -> None:
    """Remove a link to the block's own anchor whose text is only a mark (`¶`, `#`)."""
    if href.startswith("#") and len(block.parts) == start + 1:
        text = block.parts[start].strip()
        if text in _MARKS:
            block.parts.pop()
            block.chars -= len(text.encode())
            block.links -= len(text.encode())


# a link whose text is its own address ("https://www.debian.org/Bugs/", "www.example.org")
_SPELLED_ADDRESS = re.compile(r"\s*(?:https?://|www\.)\S+\s*")


def _unlink_address(block: Block, start: int) -> None:
    """Count a link whose text is a web address as text: an address spelled out in a
    sentence ("see https://www.debian.org/doc") is a reference the reader is meant to
    read, not a menu item (menus and headline lists name their targets in words)."""
    parts = block.parts[start:]
    if len(parts) == 1 and _SPELLED_ADDRESS.fullmatch(parts[0]):
        n = _size(parts[0])
        block.links -= n
        block.plain.append(parts[0])


def weight(b: Block) -> float:
    if b.chars == 0:
        return 0.0
    if "\t\t" in b.raw:  # a table row (cells are tab-separated): its links say little
        return API_WEIGHT * b.chars if _api_row(b) else 0.0
    density = b.links / b.chars
    if density > GOOD_LINKS and _api_links(b):  # (an index entry "NODEDATA : mdb.c" too)
        return API_WEIGHT * b.chars
    if density > BAD_LINKS:
        # a bare address (a source cited in the text) is no menu: it weighs nothing
        return 0.0 if _URL_TEXT.match(b.raw) else -BAD_WEIGHT * b.chars
    if b.kind == "pre":
        return float(b.chars)
    if b.kind == "h" and not (b.sentence and b.chars >= LEAD_CHARS):
        # a title, however long, is not the text it heads (a heading of two paragraphs'
        # length with a sentence in it is a lead paragraph set as a heading: prose)
        return -SHORT_WEIGHT * b.chars
    if b.sentence and density > GOOD_LINKS and b.chars >= GOOD_CHARS:
        # (a paragraph citing its sources in links: prose, if weaker; the news article's
        # later paragraphs, not a menu; measured the same from 0.1 to 0.6)
        return MID_WEIGHT * b.chars
    if density <= GOOD_LINKS and b.sentence:
        if b.chars >= GOOD_CHARS:
            return float(b.chars)
        if not _numeric(b.raw):
            return SHORT_PROSE * b.chars
    if not b.links and not b.kind and b.raw.lstrip()[:1].isdigit() and _has_word(b.raw):
        # (a list item that starts with a number: a recipe's "300 g Mehl", a step: part
        # of the list it is in, not against it; a bare value, "1.3", is no item)
        return 0.0
    return -SHORT_WEIGHT * b.chars


def _has_word(text: str) -> bool:
    """Whether a text holds a letter (a word, not only a number)."""
    return any(c.isalpha() for c in text)


def _numeric(text: str) -> bool:
    """Whether a short line is mostly numbers: a date, a time, a price ("October 12,
    2017", "Published Monday, November 18, 2019 8:22AM EST"): its comma is no sentence."""
    digits = sum(map(str.isdigit, text))  # (map: no generator frame a character)
    return digits >= DIGITS * sum(map(str.isalnum, text))


def main_text(rendered: str) -> str:
    """The main text of a page rendered as resiliparse's minimal_html (with links), the
    elements the markup hints name marked (HINT_START/HINT_END): a prose block inside one
    weighs nothing when the stretch is chosen; it is still kept inside it."""
    bs = blocks(rendered)
    if not bs:
        return ""
    _mark_terms(bs)
    reference = _reference(bs)
    ws = _reference_weights(bs) if reference else [weight(b) for b in bs]
    hinted = _hinted(bs, ws)
    unhinted = [0.0 if h and w > 0 else w for h, w in zip(hinted, ws, strict=True)]
    # a page is read as prose when one block is a full paragraph; short sentences alone
    # (a reference page's one-line descriptions) are too weak to choose a stretch by
    prose = _prose(bs, unhinted)
    if not prose and _prose(bs, ws):
        # every paragraph lies in a hinted element (a layout class such as "one-sidebar"
        # on the page's wrapper, the article in an `aside`): here the names say nothing
        hinted, prose = [False] * len(bs), True
    else:
        ws = unhinted
    # (on a reference page the class words name the API, not furniture: odoc's "at-tags"
    # list of `since` and `see` notes, Doxygen's rows of a "...SharedObject" class)
    drop = _dropped(bs, ws, [False] * len(bs) if reference else hinted)
    drop |= _list_titles(bs)
    if not reference:  # (an API page's linked blocks are its members, not teasers)
        drop |= _teaser_cards(bs)
        drop |= _slot_labels(bs, ws)
    if prose:
        first, last = _main_span(bs, ws)
        first = _lead_above(bs, ws, hinted, first)
        chosen = _stretches(ws, first, last + 1, 0.0)
        chosen = [_trim_tail(bs, ws, first, last) for first, last in chosen]
        chosen = [_trim_after_furniture(bs, ws, drop, first, last) for first, last in chosen]
        chosen = _before_thread(bs, ws, chosen)
        if chosen:
            chosen[-1] = _end_of_body(bs, ws, *chosen[-1])
            if not reference:
                chosen[-1] = _end_of_paragraphs(bs, ws, drop, *chosen[-1])
                chosen[-1] = _after_rule(bs, ws, *chosen[-1])
        if chosen:
            chosen[0] = (_heading_before(bs, chosen[0][0], hinted), chosen[0][1])
    else:
        chosen = [_hinted_span(bs, hinted)]
        # (nothing else ends a page without prose: its generator's copyright line goes; on
        # a page of prose the stretch decides, and a news site's notice is the article's)
        drop |= {i for i, b in enumerate(bs) if _notice(b)}
    if prose:
        drop |= _orphan_headings(bs, chosen, drop)
    lines: list[str] = []
    for i in (i for first, last in chosen for i in range(first, last + 1)):
        b = bs[i]
        if i in drop:
            continue
        text = b.text()
        if not text.strip():
            continue
        if lines and b.gap:
            lines.append("")
        lines.append(text)
    return "\n".join(lines)


def _reference(bs: list[Block]) -> bool:
    """Whether the page is an API reference: REFERENCE_SHARE of its blocks are linked code
    (_api_links) shaped as only code is (_code_shaped). Its text is signatures, labels and
    one-line descriptions, not paragraphs: the weights that find an article's stretch would
    cut it short at each label."""
    need = REFERENCE_SHARE * sum(1 for b in bs if b.chars)
    # the link-dense blocks were asked already (weight); the others only when they could
    # still make the share: on an article they cannot, and asking costs a regex each
    asked = [b for b in bs if b.api] + [b for b in bs if b.links and b.api is None]
    code = 0
    for i, b in enumerate(asked):
        if code >= need or code + len(asked) - i < need:
            break
        code += _api_links(b) and _code_shaped(b)
    return code >= need


def _reference_weights(bs: list[Block]) -> list[float]:
    """A reference page's weights: a block whose links all name identifiers in a
    programmer's spelling is linked code too ("NullPointerException - if coll is null",
    "mark in class ProxyInputStream", "Packages that use ClosedOutputStream"); and a short
    block that is not furniture (a label "Returns:", a value "1.1", a heading "Method
    Summary") is part of the reference: it weighs as a short sentence, not against it."""
    for b in bs:
        if b.links and not _api_links(b) and _code_names(b):
            b.api = True
    ws = [weight(b) for b in bs]
    return [SHORT_PROSE * b.chars if w < 0 and not _furniture(b) else w
            for b, w in zip(bs, ws, strict=True)]


def _code_names(b: Block) -> bool:
    """Whether every link of a block is one identifier, one of them in a programmer's
    spelling (camelCase, snake_case, dotted: "ProxyInputStream", "Date_sig.S.prev")."""
    names = [x.strip().replace("\u200b", "") for x in b.linked]
    return (all(_IDENT.fullmatch(x) for x in names)
            and any(_CODE_IDENT.search(x) for x in names))


def _prose(bs: list[Block], ws: list[float]) -> bool:
    """Whether a block (not code) weighs as a full paragraph."""
    return any(w >= GOOD_CHARS and b.kind != "pre" for b, w in zip(bs, ws, strict=True))


def _dropped(bs: list[Block], ws: list[float], hinted: list[bool]) -> set[int]:
    """The blocks left out even inside the stretch: furniture, and what a hinted element
    holds that is not prose (its labels, dates, bylines, buttons)."""
    return {i for i, b in enumerate(bs)
            if _furniture(b) or (hinted[i] and ws[i] <= 0 and b.kind != "pre")}


def _list_titles(bs: list[Block]) -> set[int]:
    """The short titles that head a list of links ("Mehr zum Thema", "Vous aimerez aussi",
    "RELATED ARTICLES"): at most TITLE_WORDS words, no sentence and no link in them, and the
    next block with text is furniture or a teaser card (_heads_a_list). (Longer lines are a
    manual's: "The documentation for this struct was generated from the following file:".)"""
    out = set()
    after = None  # the next block with text
    for i in range(len(bs) - 1, -1, -1):
        b = bs[i]
        if not b.chars:
            continue
        if after is not None and _title_shaped(b) and _heads_a_list(b, after):
            out.add(i)
        after = b
    return out


def _orphan_headings(bs: list[Block], chosen: list[tuple[int, int]],
                     drop: set[int]) -> set[int]:
    """The short headings of the text (_title_shaped) whose next block with text is not
    kept: the title of a list that went ("Vous aimerez aussi", "Zum Weiterlesen" over the
    teasers left out), heading nothing of the text; unless that block is one hinted or
    furniture block right before kept text (a picture's caption, a "Main article:" link
    under a section's heading)."""
    kept = {i for first, last in chosen for i in range(first, last + 1)} - drop
    out = set()
    for i in kept:
        b = bs[i]
        if b.kind != "h" or not b.chars or not _title_shaped(b):
            continue
        after = []  # the next two blocks with text
        j = i + 1
        while j < len(bs) and len(after) < 2:
            if bs[j].chars:
                after.append(j)
            j += 1
        if not after or after[0] in kept:
            continue
        first = bs[after[0]]
        if len(after) == 2 and after[1] in kept and (first.hints or _furniture(first)):
            continue
        out.add(i)
    return out


def _title_shaped(b: Block) -> bool:
    """A short title: at most TITLE_WORDS words, no sentence and no link in it."""
    return (not b.sentence and not b.links and b.kind != "pre" and b.chars < GOOD_CHARS
            and len(b.raw.split()) <= TITLE_WORDS)


def _teaser_cards(bs: list[Block]) -> set[int]:
    """The blocks of teaser cards: links around a heading and at most TEASER_BLOCKS blocks
    (a story's headline, summary and byline as one link), when the page has TEASER_CARDS
    or more of them. Such a run is a list of other stories ("More on this topic" and its
    cards, in any language), however much of its text is outside link text: the text of
    a link around whole blocks is not counted as links (a card's summary reads as prose).
    (One card alone is kept: a page's lead story or a link around a section.)"""
    size: dict[int, int] = {}
    headed = set()
    for b in bs:
        if b.card and b.chars:
            size[b.card] = size.get(b.card, 0) + 1
            if b.kind == "h":
                headed.add(b.card)
    teasers = {c for c in headed if size[c] <= TEASER_BLOCKS}
    if len(teasers) < TEASER_CARDS:
        return set()
    return {i for i, b in enumerate(bs) if b.card in teasers}


def _slot_labels(bs: list[Block], ws: list[float]) -> set[int]:
    """The labels of ad slots between the paragraphs ("Advertisement", "Anzeige", "Advert"
    in any language): a line of one word (SLOT_WORDS) that is no paragraph, heading, link
    or sentence, with a full paragraph on each side, and whose text the page shows more
    than once. (Without the repetition a definition list's terms went too: "Save", "Quit",
    "--no-index" between their descriptions on the doc sites.)"""
    full = [i for i, b in enumerate(bs) if b.chars]
    found = []
    for before, i, after in zip(full, full[1:], full[2:], strict=False):
        b = bs[i]
        if (not b.kind and not b.links and not b.sentence and ws[before] >= GOOD_CHARS
                and ws[after] >= GOOD_CHARS and len(b.raw.split()) <= SLOT_WORDS):
            found.append(i)
    if not found:  # (most pages: no line is counted)
        return set()
    seen: dict[str, int] = {}
    for i in full:
        text = bs[i].raw.strip()
        seen[text] = seen.get(text, 0) + 1
    return {i for i in found if seen[bs[i].raw.strip()] > 1}


def _heads_a_list(title: Block, after: Block) -> bool:
    """Whether the block after a short title starts a list that is not the text: furniture,
    or a teaser card the title lies outside of (a link around the card's heading and text:
    "Das könnte Sie auch interessieren" over the stories' cards). (A hinted element after
    the title, "Mehr zum Thema" over a box named "related", was tried: it cost the AEB's and
    the doc sites' dev halves more than it won.)"""
    return _furniture(after) or (after.card and not title.card)


def _trim_tail(bs: list[Block], ws: list[float], first: int, last: int) -> tuple[int, int]:
    """The stretch without what follows its last list of links (two or more furniture
    blocks in a row) when that weighs less than TAIL of the stretch: an author's note, a
    newsletter box or another story's teaser after the article's related links."""
    total = _held(ws, first, last)
    while True:
        after = 0.0  # the weight of the prose after block i
        run = 0  # furniture blocks in a row at i
        cut = -1
        for i in range(last, first, -1):
            b = bs[i]
            if not b.chars:
                continue
            if _furniture(b):
                run += 1
                continue
            if run >= LIST_RUN:
                cut = i
                break
            run = 0
            if ws[i] > 0:
                after += ws[i]
        if cut < 0 or after >= TAIL * total:
            return first, last
        last = cut


def _trim_after_furniture(bs: list[Block], ws: list[float], drop: set[int], first: int,
                          last: int) -> tuple[int, int]:
    """The stretch without what follows its last run of DROP_RUN blocks that are dropped
    anyway and are no paragraphs (a hinted box's word count, date and tag links) when what
    follows weighs less than TAIL of the stretch and holds no paragraph of LEAD_CHARS: the
    article ends where the page's own furniture starts, and a newsletter box after that
    furniture is the page's, not the article's (the list-of-links rule, _trim_tail, needs
    two unhinted link lists in a row, which a metadata box is not). A hinted caption is a
    paragraph, and a long paragraph after the run is the article going on after a photo
    gallery: either keeps what follows."""
    total = _held(ws, first, last)
    after = 0.0
    run = 0
    for i in range(last, first, -1):
        if not bs[i].chars:
            continue
        if i in drop and not _paragraph(bs[i]):
            run += 1
            continue
        if run >= DROP_RUN:
            return (first, i) if after < TAIL * total else (first, last)
        run = 0
        if ws[i] > 0:
            after += ws[i]
        if ws[i] >= LEAD_CHARS:  # (a long paragraph after a figure: still the article)
            return first, last
    return first, last


# a heading that names a comment thread ("Comments", "20 Responses to ...", "Leave a
# Reply", "Kommentare"): a comment word among its first three words, a singular one after
# another word (a bare "Comment" is a button's label above a post); not "Discussion" (a
# paper's section, its references' short dated lines after it: it cut a CleanEval dev
# page, 0.891 -> 0.672), nor "Response" (a section, "Request" / "Response")
_THREAD_HEADING = re.compile(
    r"\W*(?:(?:\S+\s+){0,2}?(?:comments|responses|replies|reactions|"
    r"kommentare|commentaires|comentarios|commenti|reacties|komentarze|评论|評論|留言|"
    r"コメント)|(?:\S+\s+){1,2}?(?:comment|reply|kommentar|commentaire|comentario|"
    r"commento))\b", re.IGNORECASE)
# a comment's author-and-date line: a year, a time of day or "... ago"
_DATED = re.compile(r"\b(?:19|20)\d\d\b|\d:\d\d|\bago\b")


def _before_thread(bs: list[Block], ws: list[float],
                   chosen: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The stretches ended before a heading that names a comment thread (_THREAD_HEADING)
    when THREAD_POST of prose comes before it and THREAD_DATES author-and-date lines
    (short, with a year or a time: "Posted by: Dave at November 7, 2012 3:12 PM") after
    it: a blog's comments set flat after its post, in elements no hint names, weigh as
    prose and would run the stretch on; the stretches after it go too. A manual's section
    called "Comments" has no dated lines under it."""
    prose = 0.0
    for k, (first, last) in enumerate(chosen):
        for i in range(first, last + 1):
            if ws[i] > 0:
                prose += ws[i]
            elif (bs[i].kind == "h" and prose >= THREAD_POST and bs[i].chars < GOOD_CHARS
                  and _THREAD_HEADING.match(bs[i].raw) and _dated(bs, i + 1) >= THREAD_DATES):
                end = max((j for j in range(first, i) if bs[j].chars), default=-1)
                return chosen[:k] + ([(first, end)] if end >= first else [])
    return chosen


def _dated(bs: list[Block], start: int) -> int:
    """How many of the THREAD_LINES blocks with text from `start` are short dated lines
    (the first comments' author lines, right under the heading)."""
    n = seen = 0
    for b in bs[start:]:
        if not b.chars:
            continue
        seen += 1
        if b.chars < GOOD_CHARS and _DATED.search(b.raw):
            n += 1
        if seen >= THREAD_LINES:
            break
    return n


def _end_of_body(bs: list[Block], ws: list[float], first: int, last: int) -> tuple[int, int]:
    """The stretch ended where the article-body element (MAIN) that holds BODY_SHARE of its
    prose ends, when the prose the stretch holds after that element weighs less than TAIL
    of the stretch: a teaser, a donation call or a contact box set after the article, which
    the article-body rule (_main_span) leaves in when the page has more prose elsewhere (its
    cookie notice, its footer's blurb). Not when the block right after the element is a
    paragraph: an article written in sibling body elements goes on there. (BODY_SHARE from
    0.3 to 0.7 changed nothing on the development halves; 0.85 lost a page's cut.)"""
    held: dict[int, float] = {}
    for i in range(first, last + 1):
        if ws[i] > 0 and bs[i].mains:
            m = bs[i].mains[-1]
            held[m] = held.get(m, 0.0) + ws[i]
    if not held:
        return first, last
    total = _held(ws, first, last)
    m = max(held, key=held.__getitem__)
    if held[m] < BODY_SHARE * total:
        return first, last
    end = max(i for i in range(first, last + 1) if m in bs[i].mains)
    nxt = next((i for i in range(end + 1, last + 1) if bs[i].chars), None)
    if nxt is None or _paragraph(bs[nxt]):
        return first, last  # (the text runs on in the next element: an article in parts)
    after = _held(ws, end + 1, last)
    return (first, end) if 0 < after < TAIL * total else (first, last)


def _end_of_paragraphs(bs: list[Block], ws: list[float], drop: set[int], first: int,
                       last: int) -> tuple[int, int]:
    """The stretch ended at its last <p> paragraph when the text is written in <p>
    paragraphs (KIND_PARAGRAPHS of them) and what follows it holds prose only in elements
    of another kind (a `div`'s lines: an author's bio, a dateline, a donation call, a
    disclaimer), no heading, and weighs less than KIND_TAIL of the stretch: an article's
    own last lines are paragraphs like the rest of it, a section under its heading, or a
    list its last paragraph introduces (ends with a colon); more than KIND_LINES lines are
    a list too (a manual's last definitions), and a reference page is left as it is.
    (KIND_TAIL among 0.1-0.35 on the development halves: above 0.1 trafilatura's pages lost
    text; KIND_PARAGRAPHS from 2 to 5 changed nothing there.)"""
    # (from the end: the last <p> paragraph, then whether KIND_PARAGRAPHS are there)
    ps = (i for i in range(last, first - 1, -1) if bs[i].kind == "p" and _paragraph(bs[i]))
    end = next(ps, None)
    if end is None or end == last or sum(1 for _ in islice(ps, KIND_PARAGRAPHS - 1)) < \
            KIND_PARAGRAPHS - 1:
        return first, last
    if bs[end].raw.rstrip().endswith((":", "：")):
        return first, last  # (the paragraph introduces what follows: a list of its items)
    if any(bs[i].kind and (ws[i] > 0 or bs[i].kind == "h") for i in range(end + 1, last + 1)):
        return first, last  # (a paragraph, code or a heading: the text goes on)
    if sum(1 for i in range(end + 1, last + 1) if bs[i].chars and i not in drop) > KIND_LINES:
        return first, last
    total = _held(ws, first, last)
    after = _held(ws, end + 1, last)
    return (first, end) if 0 < after < KIND_TAIL * total else (first, last)


def _after_rule(bs: list[Block], ws: list[float], first: int, last: int) -> tuple[int, int]:
    """The stretch ended before its thematic break (`<hr>`) when the stretch has one, what
    follows it is RULE_PARAGRAPHS paragraphs or fewer, no heading, weighing under RULE_TAIL
    of the stretch, and the break does not stand inside the article-body element that holds
    the text before it: a press release's "about the company" paragraphs, a copyright or
    licence note, a comment box set off by a rule after the story. An article that uses
    rules as its own section breaks has several, or a heading after one; a rule inside its
    body element is the author's."""
    cut = None
    for i in range(last, first, -1):
        if bs[i].rule:
            if cut is not None:
                return first, last  # (two or more: the article's own section breaks)
            cut = i
    if cut is None:
        return first, last
    body = bs[cut - 1].mains
    if bs[cut].mains and bs[cut].mains[-1] in body:
        return first, last
    if any(bs[i].kind == "h" for i in range(cut, last + 1)):
        return first, last
    if sum(1 for i in range(cut, last + 1) if _paragraph(bs[i])) > RULE_PARAGRAPHS:
        return first, last
    total = _held(ws, first, last)
    after = _held(ws, cut, last)
    return (first, cut - 1) if 0 < after < RULE_TAIL * total else (first, last)


def _held(ws: list[float], first: int, last: int) -> float:
    """The prose the blocks first..last hold: the sum of their positive weights."""
    return sum(w for w in ws[first:last + 1] if w > 0)


def _paragraph(b: Block) -> bool:
    """Whether a block reads as a paragraph: GOOD_CHARS long, a sentence, few links."""
    return b.sentence and b.chars >= GOOD_CHARS and b.links <= GOOD_LINKS * b.chars


def _main_span(bs: list[Block], ws: list[float]) -> tuple[int, int]:
    """The blocks of the innermost article-body element that holds MAIN_SHARE of the
    page's prose, or all blocks."""
    total = sum(w for w in ws if w > 0)
    held: dict[int, float] = {}
    span: dict[int, list[int]] = {}
    for i, (b, w) in enumerate(zip(bs, ws, strict=True)):
        for m in b.mains:
            if w > 0:
                held[m] = held.get(m, 0.0) + w
            span.setdefault(m, [i, i])[1] = i
    best = None
    for m, w in held.items():
        if w >= MAIN_SHARE * total:
            size = span[m][1] - span[m][0]
            if best is None or size < best[0]:
                best = (size, m)
    return tuple(span[best[1]]) if best else (0, len(bs) - 1)


def _lead_above(bs: list[Block], ws: list[float], hinted: list[bool], first: int) -> int:
    """The first block of the article-body element that bounds the text, or the lead
    paragraph right above the element (a standfirst set outside it: a paragraph without
    links, of LEAD_CHARS of prose, nothing between them)."""
    j = first - 1
    while j >= 0 and not bs[j].chars:
        j -= 1
    if (j >= 0 and ws[j] >= LEAD_CHARS and bs[j].kind == "p" and not bs[j].links
            and not hinted[j]):
        return j
    return first


def _hinted(bs: list[Block], ws: list[float]) -> list[bool]:
    """Whether each block lies in a hinted element that does not hold most of the page's
    prose (a class name such as "post-share-enabled" on the article itself)."""
    if not any(b.hints for b in bs):
        return [False] * len(bs)
    total = sum(w for w in ws if w > 0)
    held: dict[int, float] = {}
    for b, w in zip(bs, ws, strict=True):
        if w > 0:
            for h in b.hints:
                held[h] = held.get(h, 0.0) + w
    wrong = {h for h, w in held.items() if w > HINT_SHARE * total and w >= GOOD_CHARS}
    wrong -= _threads(bs, ws, wrong)
    wrong |= _sectioned(bs, ws)
    if not wrong:  # (most pages: no generator a block)
        return [bool(b.hints) for b in bs]
    return [any(h not in wrong for h in b.hints) for b in bs]


def _threads(bs: list[Block], ws: list[float], wrong: set[int]) -> set[int]:
    """The comment threads (THREAD_START: `div#comments`, `ol.commentlist`) among the
    hinted elements that hold most of the page's prose (`wrong`) that stay hints: those with
    a post outside every hinted element of THREAD_POST prose. A short post under a long
    discussion (a blog's note over sixty comments) is still the page's text; the share rule
    (HINT_SHARE) is for a hint word on the article's own wrapper, and a page whose article is
    all inside the "comments" element has no such post outside it."""
    threads = {h for h in wrong if h < 0}
    if not threads:
        return threads
    post = sum(w for b, w in zip(bs, ws, strict=True) if w > 0 and not b.hints)
    return threads if post >= THREAD_POST else set()


def _sectioned(bs: list[Block], ws: list[float]) -> set[int]:
    """The hinted elements that hold SECTIONS or more paragraphs, each under its own
    heading without links ("Page Inspector" / what it does) and in the same article-body
    element as prose outside the hints: a run of the article's sections (a "more-features"
    list), not comments, nor a sidebar's teasers (each in an `article` of its own, or a
    card: a link around its heading and text)."""
    bodies = {b.mains[-1] for b, w in zip(bs, ws, strict=True)
              if b.mains and not b.hints and w >= GOOD_CHARS and b.kind != "pre"}
    headed: dict[int, int] = {}
    unheaded: set[int] = set()
    before = None
    for b, w in zip(bs, ws, strict=True):
        if not b.chars:
            continue
        if b.hints and w >= GOOD_CHARS and b.kind != "pre":
            section = (before is not None and before.kind == "h" and not before.links
                       and not b.card and not before.card
                       and bool(b.mains) and b.mains[-1] in bodies
                       and before.mains[-1:] == b.mains[-1:])
            for h in b.hints:
                if section and h in before.hints:
                    headed[h] = headed.get(h, 0) + 1
                else:
                    unheaded.add(h)
        before = b
    return {h for h, n in headed.items() if n >= SECTIONS and h not in unheaded}


def _hinted_span(bs: list[Block], hinted: list[bool]) -> tuple[int, int]:
    """Without prose the text cannot say where the main text starts and ends: the span from
    the first to the last block outside the hinted elements (a generator's header and
    footer go; what lies between stays), or every block when all are hinted."""
    inside = [i for i, b in enumerate(bs) if b.chars and not hinted[i]]
    return (inside[0], inside[-1]) if inside else (0, len(bs) - 1)


def _furniture(b: Block) -> bool:
    """Link-dense and no sentence in it (a menu or a list of headlines, not a reference
    like "see Section 12.1, “Other documentation”"), or a paragraph with no more outside
    its links than a label ("Related: <headline>", "READ MORE: <headline>"; an index
    entry "name : <file>" is a list item); not an API's linked code (_api_links); a table
    row only when it is all links (_link_row)."""
    if "\t\t" in b.raw:
        return _link_row(b)
    if not b.chars or b.links / b.chars <= BAD_LINKS or _api_links(b):
        return False
    if not b.sentence:
        return True
    plain = "".join(b.plain).strip()
    if b.kind == "p" and _label(plain):
        return True
    # nearly all links, and no sentence outside them: a linked headline
    return (b.links >= ALL_LINKS * b.chars and _SENTENCE.search(plain) is None
            and _headline(b.raw))


def _headline(raw: str) -> bool:
    """Whether a line reads as a headline (words, no full stop at its end), not as an
    API's linked names ("Evaluator.ContainsData", "Serializable, RandomGenerator") or a
    linked sentence ("Go to the source code of this file.")."""
    raw = raw.strip()
    return len(raw.split()) >= HEADLINE_WORDS and not raw.endswith(".")


# An API reference's linked code: a signature (`val make : int -> t`, `elements()`,
# `std::string`, `java.util.List<Connection.KeyVal>`, `Date_sig.S.week`, `MDB_val *key`;
# `ssh_channel_open`; not an image's file name alone, "dp3_1_en"; in ASCII: CJK is \w
# too, and "史蒂文的家_藍天 於 2014/01/01 回覆" is a blog comment's author line) ...
# (Each mark is written from its one key character, what must stand before it a lookbehind:
# every alternative then starts with a literal, and the engine skips to those characters
# alone; written from the character before, a search tried every alternative at every
# position, ~15 times slower on prose. The plain forms are in the comments.)
# calls `x(`, `()`; arrows `->`; `::`; generics `x<T`
_CALLS = r"\((?:(?<=[A-Za-z0-9_]\()|\))|->|::|<(?<=[A-Za-z0-9]<)[A-Za-z]"
_CODE_MARK = re.compile(
    _CALLS + r"|:(?<=\s:)\s|=(?<=\s=)\s"  # `\s[:=]\s`
    # snake_case: `[A-Za-z]{2}_[A-Za-z]{2}`, `[A-Za-z0-9]_[A-Za-z0-9]\S* `
    r"|_(?:(?<=[A-Za-z]{2}_)[A-Za-z]{2}|(?<=[A-Za-z0-9]_)[A-Za-z0-9]\S* )"
    r"|\.(?<=[a-z]\.)[a-zA-Z_]\w*\.")  # dotted paths: `[a-z]\.[a-zA-Z_]\w*\.`
# (not in addresses, paths and handles: "http://po.st/TP_615", "pic.twitter.com/x1",
# "@tasty_food")
_ADDRESS = re.compile(r"\S*(?:/|www\.|@)\S*")
# ... or a list of identifiers ("addClass, after, append, appendChild, ..."), one of them
# in a programmer's spelling (camelCase, snake_case, dotted)
_IDENT = re.compile(r"[\w$.]+")
# (the marks that decide whether a page is a reference: _code_shaped; snake_case
# `[A-Za-z0-9]_[A-Za-z0-9]`, a dotted path of three `[a-z]\.[a-zA-Z_]\w*\.[a-zA-Z_]`)
_STRONG_CODE = re.compile(_CALLS + r"|_(?<=[A-Za-z0-9]_)[A-Za-z0-9]"
                          r"|\.(?<=[a-z]\.)[a-zA-Z_]\w*\.[a-zA-Z_]")
_CODE_IDENT = re.compile(r"[a-z][A-Z]|\w_\w|\w\.\w")


def _api_links(b: Block) -> bool:
    """Whether a link-dense block is an API reference's linked code, not furniture: its
    links are the types and members it names."""
    if b.api is None:  # (asked by the weight, the furniture and the row rules)
        b.api = b.term or _linked_code(b)
    return b.api


def _linked_code(b: Block) -> bool:
    text = _code_text(b)
    return _CODE_MARK.search(text) is not None or _names(text)


def _code_text(b: Block) -> str:
    """A block's text as the code rules read it: unescaped, without addresses."""
    raw = htmllib.unescape(b.raw) if "&" in b.raw else b.raw  # ("Iterable&lt;E&gt;")
    text = raw.replace("\u200b", "").replace("\xa0", " ")
    if "/" in text or "@" in text or "www." in text:  # (a menu's words have none: the
        text = _ADDRESS.sub(" ", text)                # search costs per word, squared)
    return text


def _names(text: str) -> bool:
    """A list of identifiers, one of them in a programmer's spelling."""
    if text.count(",") < 2:  # (fewer than three items, as most blocks: no list made)
        return False
    items = [x.strip() for x in text.split(",")]
    return (all(_IDENT.fullmatch(x) for x in items)
            and any(_CODE_IDENT.search(x) for x in items))


def _code_shaped(b: Block) -> bool:
    """Linked code that only code writes: a member's name before its description, a
    list of names, or a call, an arrow, a generic, ASCII snake_case or a dotted path of
    three (not French spacing "viols : 14", a citation's "github.com.", a CJK
    "史蒂文的家_藍天", whose marks _CODE_MARK also takes)."""
    if b.term:
        return True
    text = _code_text(b)
    return _STRONG_CODE.search(text) is not None or _names(text)


# a member as Doxygen lists it: its name, a space, its arguments ("decide (const Event &)")
_ROW_CALL = re.compile(r"\w \([^()]*\)")


def _api_row(b: Block) -> bool:
    """A table row of an API's member summary: linked code ("virtual int\t\tsize () const")
    or a member's one-line description ("\t\tReturns the size. More...")."""
    if b.sentence and b.links <= GOOD_LINKS * b.chars and not _notice(b):
        return True
    return b.links > 0 and (_api_links(b) or _ROW_CALL.search(b.raw) is not None)


def _link_row(b: Block) -> bool:
    """A table row that is all links and no code: a navigation bar laid out as a table
    (a Doxygen project's own header: "Project page | Classes | Namespace | Home page").
    A row with any text outside its links (a member's type, a description) is content."""
    return b.chars > 0 and b.links >= 0.95 * b.chars and not _api_links(b)


def _mark_terms(bs: list[Block]) -> None:
    """Mark the linked names of an API summary's members, each followed by its one-line
    description ("Attribute" / "A single key + value attribute." / "Attributes" / "The
    attributes of an Element."): a glossary's terms, not a menu (whose items are followed
    by more links)."""
    full = [b for b in bs if b.chars]
    pairs = [b.links * 2 > b.chars and after.sentence and not after.links
             and _IDENT.fullmatch(b.raw.strip().replace("\u200b", "")) is not None
             for b, after in zip(full, full[1:], strict=False)]
    for i, pair in enumerate(pairs):
        # (one pair is a menu's last item before a paragraph; a summary has a run of them)
        if pair and ((i >= 2 and pairs[i - 2]) or (i + 2 < len(pairs) and pairs[i + 2])):
            full[i].term = True


# a copyright line ("Copyright © 2003–2017. All rights reserved.", "© 2020 Example Inc.")
_NOTICE = re.compile(r"\s*(?:copyright\b|©|\(c\)\s*\d)", re.IGNORECASE)


def _notice(b: Block) -> bool:
    """A short copyright notice: the footer of a page without prose."""
    return b.chars < 200 and _NOTICE.match(b.raw) is not None


def _label(plain: str) -> bool:
    """Whether the text outside a block's links is one label: words and a colon."""
    return (plain.endswith((":", "：")) and _SENTENCE.search(plain[:-1]) is None
            and any(c.isalpha() for c in plain))


def _heading_before(bs: list[Block], first: int, hinted: list[bool]) -> int:
    """The stretch's first block, or the heading just before it (the article's title or a
    chapter's): a heading weighs against the stretch, but the text it heads starts here.
    When the text starts with a section heading ("Product Description", "12.1 ..."), the
    title above it and the short lines between them (a product's price, a chapter's
    number) start it: a page's first section is not where its text begins."""
    i = first - 1
    while i >= 0 and not bs[i].chars:
        i -= 1
    if i < 0 or bs[i].kind != "h" or hinted[i] or _furniture(bs[i]):
        return first
    j, lines = _before(bs, i, hinted), 0
    while j >= 0 and bs[j].kind != "h" and lines < LEAD_LINES and _lead_line(bs[j]):
        j, lines = _before(bs, j, hinted), lines + 1
    # a title ranks above the section heading (a site's section label above an article's
    # title does not); a title right above the first section heading adds a title, not
    # text: left out
    if lines and j >= 0 and 0 < bs[j].level < bs[i].level and not _furniture(bs[j]):
        return j
    return i


def _before(bs: list[Block], i: int, hinted: list[bool]) -> int:
    """The block before i that has text and lies outside the hinted elements (-1: none)."""
    i -= 1
    while i >= 0 and (not bs[i].chars or hinted[i]):
        i -= 1
    return i


def _lead_line(b: Block) -> bool:
    """A short paragraph without links (a price, a stock count): what a title heads (a
    label outside a paragraph, "Details", "Promis", is a site's section name)."""
    return b.kind == "p" and b.chars < GOOD_CHARS and not b.links


def _stretches(ws: list[float], lo: int, hi: int, floor: float) -> list[tuple[int, int]]:
    """The best stretch of ws[lo:hi], and those beside it that weigh at least SECOND times
    the best of the page (a long manual's sections between link-heavy cross-references)."""
    first, last = _stretch(ws[lo:hi])
    if first < 0:
        return []
    first, last = first + lo, last + lo
    weight = sum(ws[first:last + 1])
    if weight < floor:
        return []
    floor = floor or SECOND * weight
    return (_stretches(ws, lo, first, floor) + [(first, last)]
            + _stretches(ws, last + 1, hi, floor))


def _stretch(ws: list[float]) -> tuple[int, int]:
    """The run of blocks with the largest sum of weights (-1, -1 when none is positive)."""
    best, best_first, best_last = 0.0, -1, -1
    total, first = 0.0, 0
    for i, w in enumerate(ws):
        if total <= 0:
            total, first = 0.0, i
        total += w
        if total > best:
            best, best_first, best_last = total, first, i
    return best_first, best_last
