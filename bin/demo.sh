#!/usr/bin/env bash
# The main job, end to end, on bundled data (demo/sample.jsonl.zst: 2,360 real documents
# in five languages): inspect -> clean -> dedup -> contam-check -> mix -> estimate -> train -> plot-loss
# -> diagnose. Run through `make demo`, which installs everything first. Measured on a 2-core
# machine: 1 min when idle (training 42 s), 10 min at load average 14-19 from other jobs
# (training 6 min of it, with a progress line every 10 steps); everything lands in demo-out/.
set -euo pipefail
cd "$(dirname "$0")/.."
llmtk() { .venv/bin/python -m llmtk "$@"; }
OUT=demo-out
STEPS=${DEMO_STEPS:-300}
rm -rf "$OUT" && mkdir -p "$OUT"
say() { printf '\n== %s\n' "$*"; }

say "0. inspect: what the sample holds before anything acts on it"
llmtk inspect demo/sample.jsonl.zst --by source --json --report "$OUT/inspect.html" \
  > "$OUT/inspect.json"

say "1. clean: normalise, language-ID, quality rules, PII (every drop has a reason)"
# Fortune cookies are shorter than the Gopher quality rules' 50-word minimum, so the demo runs
# the repetition and FineWeb rules; the full default set drops ~99% of this sample.
llmtk clean demo/sample.jsonl.zst --lang en,de,it,ru,zh --filters gopher_repetition,fineweb \
  --rejects "$OUT/clean.rejects.jsonl.zst" --stats "$OUT/clean.stats.json" \
  -o "$OUT/clean.jsonl.zst"

say "2. dedup: exact + MinHash near-duplicates, first of each cluster kept"
llmtk dedup "$OUT/clean.jsonl.zst" --rejects "$OUT/dedup.rejects.jsonl.zst" \
  --stats "$OUT/dedup.stats.json" -o "$OUT/dedup.jsonl.zst"

say "3. contam-check: drop documents that contain the demo evaluation set"
llmtk contam-check "$OUT/dedup.jsonl.zst" --eval demo/eval.jsonl --eval-field question \
  --drop --report "$OUT/contam.report.json" -o "$OUT/decontam.jsonl.zst"

say "4. mix: English 60% / other languages 40% (split with clean --lang), 300 k byte tokens"
llmtk clean "$OUT/decontam.jsonl.zst" --lang en --filters none --no-pii -q -o "$OUT/en.jsonl.zst"
llmtk clean "$OUT/decontam.jsonl.zst" --lang de,it,ru,zh --filters none --no-pii -q -o "$OUT/intl.jsonl.zst"
llmtk mix -s en="$OUT/en.jsonl.zst":0.6 -s intl="$OUT/intl.jsonl.zst":0.4 --tokens 300k \
  --report "$OUT/mix.report.json" -o "$OUT/train.jsonl.zst" --max-epochs 2

say "5. estimate: what the same recipe costs at scale, then the tiny model measured on CPU"
llmtk estimate --model gpt2-124m --tokens 2.5e9 --gpus 8xH100 --price-per-gpu-hour 2.5
llmtk estimate --layers 2 --d-model 128 --heads 4 --vocab 257 --seq-len 128 --measure

say "6. train: a tiny byte-level GPT on the mix, on CPU ($STEPS steps, resumable)"
# One thread: the model is tiny, and on a machine whose cores are busy with anything else,
# torch's threads wait on each other at every operation (measured on a 2-core machine at
# load 13: 0.40 s/step with --threads 1, 4.6-7.7 s/step with 2). Progress every 10 steps.
llmtk train --data "$OUT/train.jsonl.zst" --val-fraction 0.05 --out "$OUT/run" \
  --layers 2 --d-model 128 --heads 4 --seq-len 128 --batch-size 16 --lr 3e-3 --warmup 30 \
  --steps "$STEPS" --log-every 10 --eval-every 100 --checkpoint-every 100 --threads 1

say "7. plot-loss and diagnose"
llmtk plot-loss "$OUT/run" --all --findings -o "$OUT/loss.png"
llmtk plot-loss "$OUT/run" --metric loss --metric val_loss
llmtk diagnose "$OUT/run" --fail-on error

printf '\ndemo outputs are in %s/ (loss curve: %s/loss.png)\n' "$OUT" "$OUT"
