#!/bin/bash
# The data pipeline on Slurm: job arrays chained with --dependency=afterok.
#
#   bin/llmtk-pipeline.sh CRAWL_DIR WORK_DIR EVAL_DIR
#
#   clean (N) -> dedup signatures (N) -> buckets (M) -> clusters (1) -> filter (N)
#     -> contam-check --drop (N) -> mix --count-only (N) -> mix (N) -> stats merge (1)
#
# Each stage is one array over bin/llmtk-array.sbatch (given its task count with
# --tasks, so a resubmitted index is still task K of N); each waits for the whole
# previous array to succeed. The stages that take --workers use the CPUs Slurm gives
# each task (-j {cpus}: the array script's --cpus-per-task, or your SBATCH's).
# Rerunning this script after a failure resubmits everything, and every task that
# finished before is skipped by its .done marker.
# Settings (environment): TASKS (N, default 64), BUCKET_TASKS (M, default 60:
# 15 units of band or exact key x 4 key ranges), LLMTK (default llmtk), SBATCH
# (default sbatch; add your --partition/--account there), CLEAN_ARGS, DEDUP_ARGS,
# MIX_ARGS (default: all of the decontaminated data as source web).
# Prints the job ids; the last one is the stats merge.
set -euo pipefail
CRAWL=${1:?usage: bin/llmtk-pipeline.sh CRAWL_DIR WORK_DIR EVAL_DIR}
WORK=${2:?usage: bin/llmtk-pipeline.sh CRAWL_DIR WORK_DIR EVAL_DIR}
EVAL=${3:?usage: bin/llmtk-pipeline.sh CRAWL_DIR WORK_DIR EVAL_DIR}
N=${TASKS:-64}
M=${BUCKET_TASKS:-60}
LLMTK=${LLMTK:-llmtk}
SBATCH=${SBATCH:-sbatch}
ARRAY="$(dirname "$0")/llmtk-array.sbatch"
MIX_ARGS=${MIX_ARGS:---source web=$WORK/decontam/}
mkdir -p "$WORK"/{clean,dedup,decontam,mix,stats,reports,logs}

# submit TASKS DEPENDENCY COMMAND...: an array of TASKS over llmtk-array.sbatch; prints its id.
submit() {
  local tasks=$1 dep=$2
  shift 2
  $SBATCH --parsable --array=0-$((tasks - 1)) --output="$WORK/logs/%x-%A_%a.out" \
    ${dep:+--dependency=afterok:$dep} "$ARRAY" --tasks "$tasks" "$@"
}

clean=$(submit "$N" "" $LLMTK clean "$CRAWL" ${CLEAN_ARGS:-} --shard {shard} -j {cpus} \
  -o "$WORK/clean/{k}.jsonl.zst" --stats "$WORK/stats/clean-{k}.json" -q)
sigs=$(submit "$N" "$clean" $LLMTK dedup signatures "$WORK/clean/" ${DEDUP_ARGS:-} \
  --shard {shard} -j {cpus} -o "$WORK/sigs/" -q)
buckets=$(submit "$M" "$sigs" $LLMTK dedup buckets "$WORK/sigs/" --shard {shard} \
  -o "$WORK/buckets/" -q)
clusters=$(submit 1 "$buckets" $LLMTK dedup clusters "$WORK/buckets/" -o "$WORK/clusters/" -q)
filter=$(submit "$N" "$clusters" $LLMTK dedup filter "$WORK/clean/" --index "$WORK/clusters/" \
  --shard {shard} -o "$WORK/dedup/{k}.jsonl.zst" --stats "$WORK/stats/dedup-{k}.json" -q)
contam=$(submit "$N" "$filter" $LLMTK contam-check "$WORK/dedup/" --eval "$EVAL" --drop \
  --shard {shard} -j {cpus} -o "$WORK/decontam/{k}.jsonl.zst" \
  --report "$WORK/reports/contam-{k}.json" --stats "$WORK/stats/contam-{k}.json" -q)
counts=$(submit "$N" "$contam" $LLMTK mix $MIX_ARGS --counts "$WORK/counts" --count-only \
  --shard {shard} -q)
mix=$(submit "$N" "$counts" $LLMTK mix $MIX_ARGS --counts "$WORK/counts" --shard {shard} \
  -o "$WORK/mix/{k}.jsonl.zst" --stats "$WORK/stats/mix-{k}.json" -q)
merge=$(submit 1 "$mix" bash -c "for s in clean dedup contam mix; do $LLMTK stats merge \
  $WORK/stats/\$s-*.json -o $WORK/stats/\$s.json; done; $LLMTK stats merge \
  $WORK/reports/contam-*.json -o $WORK/reports/contam.json")
echo "$clean $sigs $buckets $clusters $filter $contam $counts $mix $merge"
