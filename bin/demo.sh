#!/usr/bin/env bash
# The main job on bundled data: validate and recompress a real multilingual
# sample, shard it as a job array would, then the rest of the pipeline.
# Run through `make demo` (which installs everything first).
set -euo pipefail
cd "$(dirname "$0")/.."
LLMTK=(.venv/bin/python -m llmtk)
llmtk() { "${LLMTK[@]}" "$@"; }
OUT=demo-out
rm -rf "$OUT" && mkdir -p "$OUT"

echo "== 1. read, validate and recompress the sample (llmtk cat)"
llmtk cat demo/sample.jsonl.zst -o "$OUT/sample.jsonl.zst" --stats "$OUT/cat.stats.json"

echo "== 2. the same input as a 4-way job array (--shard K/4), merged back"
for k in 0 1 2 3; do
  llmtk cat demo/sample.jsonl.zst --shard "$k/4" -q -o "$OUT/shard-$k.jsonl.gz"
done
echo "records per shard: $(for k in 0 1 2 3; do zcat "$OUT/shard-$k.jsonl.gz" | wc -l; done | paste -sd' ')"

echo
echo "demo outputs are in $OUT/"
