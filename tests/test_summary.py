"""The run summary people read on stderr: short, labelled, and written as one block."""

import io

from llmtk.io.summary import COUNT_ROWS, Summary


def summary_with_langs(n: int) -> Summary:
    s = Summary("clean")
    s.records_in = s.records_out = 1000
    for i in range(n):
        s.counts[f"lang.l{i:02d}"] = 100 - i
    s.counts["pii.email"] = 3
    return s


def test_each_family_of_counts_shows_its_largest_and_sums_the_rest():
    s = summary_with_langs(12)
    rows = dict(s.count_rows())
    langs = [k for k in rows if k.startswith("lang.")]
    assert langs == [f"lang.l{i:02d}" for i in range(COUNT_ROWS)]
    more = rows[f"lang: {12 - COUNT_ROWS} more (in --stats)"]
    assert more == sum(100 - i for i in range(COUNT_ROWS, 12))
    assert rows["pii.email"] == 3
    assert s.as_dict()["counts"] == dict(sorted(s.counts.items()))  # --stats keeps all


def test_summary_is_labelled_and_written_in_one_write(monkeypatch):
    writes = []

    class Recorder(io.StringIO):
        def write(self, text):
            writes.append(text)
            return len(text)

        def isatty(self):
            return False

    from llmtk.io import console

    console.stderr_console.cache_clear()
    monkeypatch.setattr("sys.stderr", Recorder())
    try:
        summary_with_langs(12).print()
    finally:
        console.stderr_console.cache_clear()
    text = "".join(writes)
    assert len([w for w in writes if w]) == 1, writes
    assert "counted in records" in text and "lang: 7 more (in --stats)" in text
    assert len(text.splitlines()) <= 15
