"""Hard-wrapped text: the line-based rules see paragraphs, and the text keeps its lines."""

import json
import textwrap
from pathlib import Path

from llmtk.clean import CleanConfig, Cleaner
from llmtk.clean.filters import DocText
from llmtk.clean.wrap import width
from llmtk.io import Doc

ARTICLES = Path(__file__).parent / "data" / "clean" / "articles.jsonl"
ENGLISH = json.loads(ARTICLES.read_text(encoding="utf-8").splitlines()[0])["text"]
CLEANER = Cleaner(CleanConfig().with_values({"langid.enabled": False, "pii.enabled": False}),
                  annotate=True)


def wrap(text: str, columns: int = 72) -> str:
    return "\n\n".join(textwrap.fill(p, columns) for p in text.split("\n") if p.strip())


def clean(text: str) -> tuple[str | None, Doc]:
    doc = Doc({"text": text}, None, "t", 1, 0)
    return CLEANER(doc), doc


def test_a_wrapped_article_gets_the_verdict_of_its_paragraphs_and_keeps_its_lines():
    assert clean(ENGLISH)[0] is None
    for columns in (60, 72, 80):
        text = wrap(ENGLISH, columns)
        assert width(text.split("\n")) is not None
        reason, doc = clean(text)
        assert reason is None  # line by line, C4 found too few sentences: most lines break
        assert doc.text == text  # mid-sentence; the lines are kept as they were
        assert doc.data["llmtk"]["c4"]["sentences"] >= 5


def test_c4_drops_a_wrapped_paragraph_whole():
    junk = "Please enable JavaScript in your browser settings to view the interactive " \
           "map of the region and its historical boundaries over the centuries."
    text = wrap(ENGLISH + "\n" + junk)
    reason, doc = clean(text)
    assert reason is None
    assert doc.text == wrap(ENGLISH)  # the paragraph went, line breaks and all


def test_web_text_and_lists_are_not_hard_wrapped():
    assert DocText(ENGLISH).units is None  # one line per paragraph
    items = "\n".join(f"- item number {i} of the list" for i in range(30))
    assert width(items.split("\n")) is None  # short lines, all of them ending a unit
    code = "\n".join(f"    x{i} = compute(x{i - 1}, {i})" for i in range(1, 30))
    assert width(code.split("\n")) is None


def test_c4_removes_citations_from_the_lines_of_a_wrapped_paragraph():
    paras = [p for p in ENGLISH.split("\n") if p.strip()]
    paras[0] = paras[0].replace(". ", ". [12] ", 1)
    text = wrap("\n".join(paras))
    assert "[12]" in text
    reason, doc = clean(text)
    assert reason is None
    assert "[12]" not in doc.text
    assert doc.text.count("\n") == text.count("\n")  # the physical lines are kept
