"""The default banding keeps its promise with no options: near-duplicates at Jaccard >= 0.8
are found (>= 0.95 of them) in word and in CJK text, and flagged pairs are similar."""

import json
import random

from llmtk.dedup.config import DedupConfig, auto_verify, candidate_probability
from llmtk.dedup.minhash import MinHasher
from tests.util import llmtk


def test_default_curve():
    cfg = DedupConfig()
    assert (cfg.bands, cfg.rows, cfg.verify) == (16, 7, 0.5)
    assert cfg.permutations == 112  # the same signature cost as datatrove's 14 x 8
    assert candidate_probability(0.8, cfg.bands, cfg.rows) >= 0.975
    assert candidate_probability(0.8, 14, 8) < 0.95  # why the default is not datatrove's
    assert auto_verify(None) == 0.5 and auto_verify(0.6) == 0.3 and auto_verify(0.2) == 0.0


def _pairs(seed: int = 3):
    """Base documents in Chinese (characters) and a Latin-script language (words), and one
    copy of each with a few tokens replaced, inserted or deleted, or its lines shuffled."""
    rng = random.Random(seed)
    han = [chr(c) for c in range(0x4E00, 0x4E00 + 3000)]
    vocab = ["".join(rng.choice("aeioubdgklmnprstvz") for _ in range(rng.randint(2, 9)))
             for _ in range(5000)]
    records, pairs = [], []
    for i in range(160):
        cjk = i % 2 == 0
        pool, join = (han, "") if cjk else (vocab, " ")
        lines = [[rng.choice(pool) for _ in range(rng.randint(40, 80))] for _ in range(6)]
        copy = [list(line) for line in lines]
        rate = rng.uniform(0.0, 0.04)
        for line in copy:
            for j in range(len(line)):
                if rng.random() < rate:
                    line[j] = rng.choice(pool)
        if i % 3 == 0:
            rng.shuffle(copy)
        base = {"id": f"b{i}", "text": "\n".join(join.join(x) for x in lines)}
        dup = {"id": f"c{i}", "text": "\n".join(join.join(x) for x in copy)}
        records.append(base)
        pairs.append((base, dup))
    records += [dup for _, dup in pairs]  # copies after all bases
    return records, pairs


def test_recall_and_precision_with_no_options():
    records, pairs = _pairs()
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()
    r = llmtk("dedup", "--annotate", "-q", input=data)
    assert r.returncode == 0, r.stderr
    marked = {d["id"]: d["llmtk"]["dup_of"] for d in map(json.loads, r.stdout.splitlines())
              if "llmtk" in d}
    hasher = MinHasher(DedupConfig())

    def jaccard(a: str, b: str) -> float:
        x, y = set(hasher.shingles(a).tolist()), set(hasher.shingles(b).tolist())
        return len(x & y) / len(x | y)

    text = {rec["id"]: rec["text"] for rec in records}
    for script in (0, 1):  # CJK, word
        high = [(b, c) for i, (b, c) in enumerate(pairs)
                if i % 2 == script and jaccard(b["text"], c["text"]) >= 0.8]
        assert len(high) >= 30
        found = sum(c["id"] in marked for _, c in high) / len(high)
        assert found >= 0.95, (script, found)
    assert all(jaccard(text[d], text[ref]) >= 0.5 for d, ref in marked.items())
