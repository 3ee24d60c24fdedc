"""Would tiktoken, built from the same byte-level BPE, give `llmtk train tokenize` the same
ids faster? Encodes the whole corpus with both, one thread each, and counts per language
the documents whose ids differ.

tiktoken gets the tokenizer.json's vocabulary as its ranks (each token's bytes through
GPT-2's byte-to-unicode table; the id is the rank) and the GPT-2 split pattern that the
`tokenizers` ByteLevel pre-tokenizer uses. They agree when merging by the rank of the merged
token (tiktoken) picks the same pairs as merging by the rank of the merge rule
(`tokenizers`). That is not guaranteed: tiktoken may join two pieces whose bytes make a
token although no merge rule joins exactly those two, hence the check. Runs in its own
virtualenv (benchmarks/.venvs/tiktoken, created with pip on first use); llmtk does not
depend on tiktoken.

Reproduce:

    make setup
    .venv/bin/llmtk train tokenizer --data CORPUS.jsonl.zst --vocab-size 32000 \
        -o /tmp/tok32k.json
    RAYON_NUM_THREADS=1 .venv/bin/python benchmarks/tiktoken_identity.py /tmp/tok32k.json \
        CORPUS.jsonl.zst

CORPUS is any JSONL(.zst) corpus of yours (the numbers in docs/train.md are from our own
77,944-document corpus, not in the repository).
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / "benchmarks" / ".venvs" / "tiktoken"

CHECK = r'''
import json, sys, time
import orjson, tiktoken, zstandard
from tokenizers import Tokenizer

tok_path, corpus = sys.argv[1], sys.argv[2]
spec = json.load(open(tok_path, encoding="utf-8"))
special = {t["content"] for t in spec.get("added_tokens", [])}
printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
             *range(ord("®"), ord("ÿ") + 1)]
table, extra = {}, 0
for b in range(256):  # GPT-2's byte -> unicode table, inverted
    if b in printable:
        table[chr(b)] = b
    else:
        table[chr(256 + extra)] = b
        extra += 1
ranks = {bytes(table[c] for c in s): i for s, i in spec["model"]["vocab"].items()
         if s not in special}
split = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
enc = tiktoken.Encoding("llmtk", pat_str=split, mergeable_ranks=ranks, special_tokens={})
hf = Tokenizer.from_file(tok_path)
raw = open(corpus, "rb").read()
if raw[:4] == b"\x28\xb5\x2f\xfd":
    import io
    raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw),
                                                     read_across_frames=True).read()
docs = [orjson.loads(line) for line in raw.splitlines() if line.strip()]
texts = [d["text"] for d in docs]
t0 = time.process_time()
a = [e.ids for i in range(0, len(texts), 1024)
     for e in hf.encode_batch_fast(texts[i:i + 1024], add_special_tokens=False)]
t_hf = time.process_time() - t0
t0 = time.process_time()
b = enc.encode_ordinary_batch(texts, num_threads=1)
t_tt = time.process_time() - t0
mb = sum(len(t.encode()) for t in texts) / 1e6
per: dict = {}
for x, y, d in zip(a, b, docs):
    n = per.setdefault(d.get("lang", "?"), [0, 0])
    n[0] += 1
    n[1] += x != y
print(f"{mb:.1f} MB, {len(texts):,} documents, one thread each (CPU time)")
print(f"tokenizers encode_batch_fast {mb / t_hf:.2f} MB/s   tiktoken {mb / t_tt:.2f} MB/s   "
      f"ratio {t_hf / t_tt:.2f}x")
print("documents whose ids differ, per language: " +
      ", ".join(f"{k} {v[1]} of {v[0]:,}" for k, v in sorted(per.items())))
'''


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: tiktoken_identity.py TOKENIZER_JSON CORPUS")
    python = VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "tiktoken",
                        "tokenizers", "orjson", "zstandard"], check=True)
    subprocess.run([str(python), "-c", CHECK, *sys.argv[1:]], check=True)


if __name__ == "__main__":
    main()
