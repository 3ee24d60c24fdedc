"""`llmtk clean --host-lines SHARE`: lines repeated at the edges of a host's pages go.

The fixture (tests/data/clean/hostlines, constructed pages) is a 7-page documentation site
whose header, navigation line and generator footer no single page gives away, plus pages
of another host and a record without a URL.
"""

import json
import random
from pathlib import Path

import pytest

from llmtk.clean import hostlines
from llmtk.clean.hostlines import HostCounts, line_keys, removable
from tests.util import llmtk

PAGES = Path(__file__).parent / "data" / "clean" / "hostlines" / "pages.jsonl"
RECORDS = [json.loads(x) for x in PAGES.read_text(encoding="utf-8").splitlines()]
HEADER = "Widget Toolkit 2.1 reference manual"
NAV = "Overview | Classes | Files | Search the manual"
FOOTER = "Generated on 1 December 2026 by the widget documentation tool"
PLAIN = ("--filters", "none", "--no-langid", "--no-pii", "-q")


def clean(path: Path, *args: str, tmp: Path) -> tuple[dict[str, str], dict]:
    out, stats = tmp / "out.jsonl", tmp / "stats.json"
    r = llmtk("clean", path, *PLAIN, *args, "-o", out, "--stats", stats)
    assert r.returncode == 0, r.stderr
    texts = {d["id"]: d["text"] for d in map(json.loads, out.read_text().splitlines())}
    return texts, json.loads(stats.read_text())


def test_site_furniture_goes_from_every_page_and_content_stays(tmp_path):
    texts, stats = clean(PAGES, "--host-lines", "0.3", tmp=tmp_path)
    site = [r for r in RECORDS if r["id"].startswith("docs-") and r["id"] != "docs-index"]
    assert len(site) == 6
    for r in site:
        text = texts[r["id"]]
        assert HEADER not in text and NAV not in text and FOOTER not in text, text
        # the rest of the page, untouched
        assert text == r["text"].split(NAV + "\n\n")[1].split("\n\n" + FOOTER)[0]
    # a heading repeated in the middle of every API page is content
    assert all("Return value and errors" in texts[f"docs-{n}"]
               for n in ("widget_new", "widget_show", "widget_resize"))
    # a licence comment that starts every source listing is code: it stays
    assert texts["docs-widget.h"].startswith(
        "/*\n * Copyright 2026 The Widget Authors")
    # a line at the bottom of 2 of the 7 pages repeats too little
    assert texts["docs-widget_show"].endswith("Last changed in version 2.0 of the toolkit.")
    # the index page was nothing but furniture; another host's 2 pages are too few to
    # judge; a record without a URL has no host
    assert "docs-index" not in texts
    for r in RECORDS:
        if not r["id"].startswith("docs-"):
            assert texts[r["id"]] == r["text"]
    assert stats["dropped"] == {"host_lines.empty": 1}
    # header and navigation on 6 pages, and the index page's 3 lines, all read from its top
    assert stats["counts"] == {"host_lines.top": 2 * 6 + 3, "host_lines.bottom": 6}


def test_off_unless_asked(tmp_path):
    texts, stats = clean(PAGES, tmp=tmp_path)
    assert texts == {r["id"]: r["text"] for r in RECORDS}
    assert "host_lines.top" not in stats["counts"]


def test_the_same_lines_go_whatever_the_order_of_the_pages(tmp_path):
    shuffled = RECORDS[:]
    random.Random(7).shuffle(shuffled)
    other = tmp_path / "shuffled.jsonl"
    other.write_text("".join(json.dumps(r) + "\n" for r in shuffled))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert clean(PAGES, "--host-lines", "0.3", tmp=tmp_path / "a")[0] == \
        clean(other, "--host-lines", "0.3", tmp=tmp_path / "b")[0]


def test_a_higher_share_keeps_lines_that_repeat_less(tmp_path):
    # the note is on 2 of 7 pages: gone with --host-lines 0.2 and 2 pages enough, kept at 0.3
    config = tmp_path / "c.toml"
    config.write_text("[host_lines]\nmin_pages = 2\n")
    texts, _ = clean(PAGES, "--config", config, "--host-lines", "0.2", tmp=tmp_path)
    assert texts["docs-widget_show"].endswith("has no effect.")
    # the blog's 2 pages now reach min_pages too
    assert texts["blog-0"].startswith("The heron waits")


def test_needs_files_and_a_share(tmp_path):
    r = llmtk("clean", "--host-lines", "0.3", "-q", input=PAGES.read_bytes())
    assert r.returncode == 2 and b"--host-lines reads the input twice" in r.stderr
    r = llmtk("clean", PAGES, "--host-lines", "1.5", "-q")
    assert r.returncode == 2 and b"--host-lines" in r.stderr


@pytest.mark.parametrize("line, verdict", [
    ("JsonCpp project page  Classes  Namespace  JsonCpp home page", True),
    ("Overview | Classes | Files | Search the manual", True),
    ("002 * Licensed to the Apache Software Foundation (ASF) under one or more", False),
    (" * SPDX-License-Identifier: MIT", False),
    ("#include <glib.h>", False),
    ("// Copyright The Authors", False),
    ("    return widget_new(parent)", False),
    ("end", False),
    ("});", False),
    ("Description", False),
    ("x = widget size", False),
    ("", False),
])
def test_what_may_be_furniture(line, verdict):
    assert removable(line) is verdict


def test_counts_do_not_depend_on_compaction_or_order(monkeypatch):
    pages = [(r["url"].split("/")[2], r["text"]) for r in RECORDS if "url" in r]

    def common(order) -> frozenset:
        counts = HostCounts()
        for host, text in order:
            counts.add(host, line_keys(host, text))
        return counts.common(0.3, 3)

    whole = common(pages)
    # header, navigation, footer, and the heading in the middle of the 3 API pages (common,
    # but not at an edge, so strip() leaves it)
    assert len(whole) == 4
    monkeypatch.setattr(hostlines, "COMPACT", 4)  # merge every few pages
    assert common(pages[::-1]) == whole


@pytest.mark.integration
def test_the_same_bytes_for_any_workers(tmp_path):
    outs = []
    for j in ("1", "2"):
        out = tmp_path / f"out{j}.jsonl"
        r = llmtk("clean", PAGES, *PLAIN, "--host-lines", "0.3", "-j", j, "-o", out)
        assert r.returncode == 0, r.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] and HEADER.encode() not in outs[0].split(b"blog-0")[0]


def test_the_first_pass_counts_the_text_as_extraction_leaves_it():
    from llmtk.clean import CleanConfig, Cleaner
    from llmtk.clean.stages.hostlines import HostLinesStage
    from llmtk.io import Doc

    cfg = CleanConfig().with_values({"host_lines.share": 0.3})
    cleaner = Cleaner(cfg)
    stage = next(s for s in cleaner.stages if isinstance(s, HostLinesStage))
    page = ("<!DOCTYPE html><html><body><main><p>" + "The river town keeps its old bridge. " * 4
            + "</p></main></body></html>")
    doc = Doc({"url": "https://a.example/1", "content_type": "text/html", "text": page}, None,
              "pages.jsonl", 1, 0)
    work = cleaner.before(stage)(doc)
    assert "<p>" not in work.text and work.text.startswith("The river town")
