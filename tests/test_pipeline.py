"""The data tools chained in one real shell pipeline, every record accounted for at every stage."""

import json

import orjson
import pytest

from tests.util import ROOT, shell

ARTICLES = [json.loads(line) for line in
            (ROOT / "tests" / "data" / "clean" / "articles.jsonl").read_text().splitlines()]
EVAL_Q = ("In the nineteenth century the river became a route for trade. Boats carried timber, "
          "wool and coal to the harbour")


def corpus() -> list[dict]:
    docs = [dict(a) for a in ARTICLES]  # en, de, ru, zh, ja, fr: real paragraphs
    en = next(a for a in ARTICLES if a["id"] == "article-en")
    docs.append({"id": "copy-of-en", "text": en["text"], "lang": "en"})  # exact duplicate
    docs.append({"id": "junk", "text": "buy now!!! $$$ click", "lang": "en"})  # too short
    de = next(d for d in docs if d["id"] == "article-de")
    de["text"] += "\n\nSchreiben Sie uns an max.mustermann@example.org, wir antworten gern."
    return docs


@pytest.mark.integration
def test_clean_dedup_contam_pipeline_accounts_for_every_record(tmp_path):
    src = tmp_path / "in.jsonl.zst"
    import zstandard

    src.write_bytes(zstandard.ZstdCompressor().compress(
        b"".join(orjson.dumps(d) + b"\n" for d in corpus())))
    ev = tmp_path / "eval.jsonl"
    ev.write_text(json.dumps({"id": "q-river", "text": EVAL_Q}) + "\n")
    t = tmp_path
    r = shell(
        f"cat {src} "
        f"| llmtk clean --stats {t}/s1.json --rejects {t}/r1.jsonl -q "
        f"| llmtk dedup --stats {t}/s2.json --rejects {t}/r2.jsonl -q "
        f"| llmtk contam-check --eval {ev} --drop --stats {t}/s3.json --rejects {t}/r3.jsonl -q "
        f"> {t}/out.jsonl; echo \"${{PIPESTATUS[@]}}\""
    )
    assert r.stdout.decode().split() == ["0", "0", "0", "0"], r.stderr
    stats = [json.loads((t / f"s{i}.json").read_text()) for i in (1, 2, 3)]
    assert stats[0]["records_in"] == len(corpus())
    for prev, cur in zip(stats, stats[1:], strict=False):
        assert cur["records_in"] == prev["records_out"]
    for i, s in enumerate(stats, 1):
        dropped = sum(s["dropped"].values())
        assert s["records_in"] == s["records_out"] + dropped
        assert len((t / f"r{i}.jsonl").read_text().splitlines()) == dropped
    reasons = {}
    for i in (1, 2, 3):
        for line in (t / f"r{i}.jsonl").read_text().splitlines():
            rec = json.loads(line)
            reasons[rec["id"]] = rec["llmtk"]["reason"]
    assert reasons["junk"].startswith("gopher.")
    assert reasons["copy-of-en"] == "dedup.exact"
    assert reasons["article-en"] == "contam.ngram"  # it holds the eval question
    out = [json.loads(line) for line in (t / "out.jsonl").read_text().splitlines()]
    kept = {d["id"] for d in out}
    assert kept == {"article-de", "article-ru", "article-zh", "article-ja", "article-fr"}
    pii = next(d for d in out if d["id"] == "article-de")
    assert "<EMAIL>" in pii["text"] and "example.org" not in pii["text"]
    assert stats[0]["counts"].get("pii.EMAIL") == 1
