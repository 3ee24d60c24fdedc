"""The parallel-text benchmark's pieces: page extraction, the untranslated check, the table.

benchmarks/gnome_help_corpus.py, debian_reference_corpus.py and clean_parallel.py measure
clean's consistency across languages (docs/clean.md, "Consistency on parallel text"); these
tests pin what they count, on small pages written here (no package, no benchmarks/out).
"""

import importlib
import json
import sys
from collections import Counter

import pytest

from tests.util import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
gnome = importlib.import_module("gnome_help_corpus")
debref = importlib.import_module("debian_reference_corpus")
parallel = importlib.import_module("_parallel_corpus")
clean_parallel = importlib.import_module("clean_parallel")

MALLARD = """<page xmlns="http://projectmallard.org/1.0/"
      xmlns:if="http://projectmallard.org/if/1.0/" type="topic" id="files-copy">
  <info>
    <credit type="author"><name>Shaun McCance</name><email>shaunm@gnome.org</email></credit>
    <desc>Copy or move items to a new folder.</desc>
  </info>
  <title>Copy or move files</title>
  <comment><cite>Editor</cite><p>Check this page.</p></comment>
  <media type="image" src="figures/copy.png"><p>A screenshot</p></media>
  <p>Press <keyseq><key>Ctrl</key><key>C</key></keyseq> or choose
     <guiseq><gui>Edit</gui><gui>Copy</gui></guiseq>.</p>
  <if:choose>
    <if:when test="platform:gnome-classic"><p>Classic branch.</p></if:when>
    <if:else><p>Other branch.</p></if:else>
  </if:choose>
  <steps><item><p>Open the folder.</p></item><item>Plain item text</item></steps>
  <screen>$ cp a b
$ ls</screen>
</page>
"""


def test_mallard_page_keeps_the_running_text_and_drops_metadata(tmp_path):
    page = tmp_path / "files-copy.page"
    page.write_text(MALLARD, encoding="utf-8")
    assert gnome.page_text(page) == [
        ("Copy or move files", False),
        ("Press Ctrl+C or choose Edit ▸ Copy.", False),
        ("Classic branch.", False),  # the first branch only, the same in every language
        ("Open the folder.", False),
        ("Plain item text", False),
        ("$ cp a b", True),
        ("$ ls", True),
    ]


def test_docbook_sections_are_the_units_and_table_rows_one_line(tmp_path):
    html = """<?xml version="1.0" encoding="UTF-8"?>
<html xmlns="http://www.w3.org/1999/xhtml"><body>
<div class="toc"><p>Table of contents</p></div>
<div class="chapter">
  <div class="section"><h2 class="title"><a id="_basics"/>1.1. Basics</h2>
    <div class="section"><h3 class="title"><a id="_the_prompt"/>1.1.1. The prompt</h3>
      <p>You see the <code class="literal">login</code> prompt.</p>
      <pre class="screen">foo login:</pre>
      <table><tr><th>package</th><th>size</th></tr><tr><td>mc</td><td>1482</td></tr></table>
    </div>
  </div>
  <div class="section"><h2 class="title"><a id="_alone"/>1.2. Alone</h2><p>Text.</p></div>
</div></body></html>"""
    path = tmp_path / "ch01.en.html"
    path.write_text(html, encoding="utf-8")
    assert list(debref.units(path)) == [
        ("_the_prompt", [("1.1.1. The prompt", False), ("You see the login prompt.", False),
                         ("foo login:", True), ("package size", False), ("mc 1482", False)]),
        ("_alone", [("1.2. Alone", False), ("Text.", False)]),
    ]


def test_untranslated_counts_english_prose_paragraphs_of_three_words_or_more():
    english = [("Click on Settings.", False), ("Bluetooth", False), ("$ ls -l", True)]
    translation = [("Click on Settings.", False),  # left in English
                   ("Bluetooth", False),  # too short to tell
                   ("Pulse en Configuración.", False),
                   ("$ ls -l", True)]  # code is the same in every language
    assert parallel.untranslated(translation, english) == (3, 1)


def test_largely_untranslated_pages_go_to_their_own_file(tmp_path):
    en = [("One two three four.", False), ("Five six seven eight.", False)]
    records = [("p", "en", "pkg", en),
               ("p", "de", "pkg", [("Eins zwei drei vier.", False),
                                   ("Fünf sechs sieben acht.", False)]),
               ("p", "es", "pkg", [("Uno dos tres cuatro.", False), en[1]])]
    out = tmp_path / "corpus.jsonl"
    parallel.write_corpus(str(out), records, max_untranslated=0.1, min_chars=10)
    def ids(path):
        return [json.loads(line)["id"] for line in path.read_text(encoding="utf-8").splitlines()]

    assert ids(out) == ["p/en", "p/de"]
    assert ids(tmp_path / "corpus-untranslated.jsonl") == ["p/es"]  # half its prose English


def test_table_counts_both_directions():
    docs = [{"page": p, "lang": lang} for p in ("a", "b", "c", "d") for lang in ("en", "es")]
    verdicts = ["keep", "keep",                 # a: both kept
                "keep", "gopher.alpha_words",   # b: translation of a kept page dropped
                "c4.too_few_sentences", "keep",  # c: translation of a dropped page kept
                "gopher.short_doc", "gopher.short_doc"]  # d: both dropped
    row = clean_parallel.table(docs, verdicts)["es"]
    assert row == clean_parallel.Row(2, 1, Counter({"gopher.alpha_words": 1}), 2, 1,
                                     Counter({"c4.too_few_sentences": 1}))
    assert (row.share, row.share_dropped, row.agreement) == (0.5, 0.5, 0.5)
    assert not row.meets("es")  # the goal: agreement >= 0.9, kept when EN drops <= 0.15


def test_only_parallel_translations_are_compared():
    en = "NAME\nls - list directory contents\nList information about the FILEs.\n" \
         "Sort entries alphabetically if none of -cftuvSUX is specified.\n--all\n"
    de = "BEZEICHNUNG\nls - Verzeichnisinhalte auflisten\nInformationen über die DATEIen " \
         "auflisten.\nEinträge alphabetisch sortieren, wenn keine Option angegeben ist.\n--all\n"
    half_english = de.replace(de.splitlines()[3], en.splitlines()[3])
    docs = [{"page": "ls.1", "lang": "en", "text": en},
            {"page": "ls.1", "lang": "de", "text": de},
            {"page": "ls.1", "lang": "fr", "text": de + "x" * 400},  # another version
            {"page": "ls.1", "lang": "pl", "text": half_english},
            {"page": "cp.1", "lang": "en", "text": en},
            {"page": "cp.1", "lang": "fr", "text": de},
            {"page": "mv.1", "lang": "en", "text": en},
            {"page": "mv.1", "lang": "fr", "text": de}]
    # one of the Polish page's two prose lines is a line of the English page
    assert clean_parallel.untranslated_share(half_english, en) == 0.5
    assert clean_parallel.untranslated_share(de, en) == 0.0
    kept, left_out = clean_parallel.select(docs)
    assert [(d["page"], d["lang"]) for d in kept] == [
        ("ls.1", "en"), ("ls.1", "de"), ("cp.1", "en"), ("cp.1", "fr"), ("mv.1", "en"),
        ("mv.1", "fr")]
    assert left_out["pl"]["untranslated"] == 1 and left_out["fr"]["other_version"] == 1


def test_calibration_fits_the_threshold_that_gives_englishs_verdict():
    Fact = clean_parallel.Fact
    facts = []
    # English keeps pages with a share >= 0.8; the translation's share is 1.1 times English's
    for i, a in enumerate(x / 100 for x in range(60, 100)):
        page = f"p{i}"
        facts += [Fact(page, "en", "en", True, a), Fact(page, "ja", "ja", True, 1.1 * a)]
    pp = clean_parallel.pairs(facts, "ja", (0, 1))
    assert clean_parallel.fit([pp], "ja", {}) == pytest.approx(0.8 * 1.1, abs=0.011)
    th = {"ja": clean_parallel.fit([pp], "ja", {})}
    assert all(clean_parallel.verdict_at(e, th) == clean_parallel.verdict_at(x, th)
               for e, x in pp)
    # a translation another rule drops is dropped at any threshold
    assert not clean_parallel.verdict_at(Fact("q", "ja", "ja", False, 0.99), th)


def test_the_goal_band_and_the_threshold_moved_into_it():
    Fact = clean_parallel.Fact
    facts = []
    # English keeps shares >= 0.8; the translation's share is English's plus a page's noise
    # of +-0.02, alternating: near the border the verdicts differ whatever the threshold
    for i, a in enumerate(x / 200 for x in range(120, 200)):
        page = f"p{i}"
        noise = 0.02 if i % 2 else -0.02
        facts += [Fact(page, "en", "en", True, a), Fact(page, "pl", "pl", True, a + noise)]
    pp = clean_parallel.pairs(facts, "pl", (0, 1))
    band = clean_parallel.goal_band([pp], "pl", {})
    # the goal (agreement >= 0.9, kept when English drops <= 0.15) holds around 0.8 only
    assert band and min(band) <= 0.8 <= max(band)
    assert 0.75 not in band and 0.85 not in band
    assert clean_parallel.spans([0.789, 0.790, 0.791, 0.809]) == "0.789-0.791, 0.809-0.809"
    # a threshold in the band stays; one outside moves to the band's nearest edge
    assert clean_parallel.nearest(0.8, band) == 0.8
    assert clean_parallel.nearest(0.75, band) == min(band)
    assert clean_parallel.nearest(0.9, band) == max(band)
    assert clean_parallel.nearest(0.75, []) == 0.75
