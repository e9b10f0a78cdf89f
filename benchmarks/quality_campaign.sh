#!/bin/bash
# The quality campaign on all-MiniLM-L6-v2, all at once on one GPU: the documented recipe over five seeds,
# SMART (Jiang et al., 2020) at the paper's settings and at a three times larger adversarial weight, layer-wise
# learning-rate decay with a faster head, and single runs that differ in kind (mean against [CLS] pooling, a
# cross-encoded STS head, the rr-batch schedule), each with an evaluation after every epoch, in bf16 (SMART's
# perturbed passes run in fp32 whatever the precision). Then the tables: the spread of each recipe over seeds
# (benchmarks/summarize_sweep.py) and ensembles of the runs (benchmarks/ensemble_study.py: plain mean and
# dev-fitted weights against the best member, with a check on held-out halves of dev).
#
#   DEVICE=cuda bash benchmarks/quality_campaign.sh            # the runs, then the tables
#   bash benchmarks/quality_campaign.sh runs                   # only the runs (on the GPU machine)
#   bash benchmarks/quality_campaign.sh runs base-s1 base-s2   # only these runs
#   bash benchmarks/quality_campaign.sh list                   # the runs' names, one a line
#   bash benchmarks/quality_campaign.sh tables                 # only the tables, from the runs' folders
#
# MODEL, DATA, DEVICE, PRECISION (here bf16), LIMIT, EXTRA, RUNS (default runs/quality) and RESULTS (default
# RUNS/sweep.jsonl) are passed to benchmarks/seed_sweep.sh. BASE_SEEDS (1 2 3 4 5) are the recipe's seeds,
# VARIANT_SEEDS (1 2 3) those of SMART, SMART x3 and the layer-wise decay. The tables summarize every RUNS/*.jsonl
# and go to RUNS/campaign.md, RUNS/seeds.json and RUNS/ensembles.json. One H100 runs the 17 runs in about 20 minutes.
#
# usage: bash benchmarks/quality_campaign.sh [runs [NAME]...|list|tables]
case "${1:-all}" in
  -h|--help) sed -n '1d; /^#/!q; s/^# \{0,1\}//p' "$0"; exit 0 ;;
  all|runs|list|tables) stage=${1:-all}; shift $(( $# > 0 )) ;;
  *) echo "quality_campaign.sh: unknown stage $1; give runs, list, tables or nothing (see --help)" >&2; exit 2 ;;
esac
set -euo pipefail
cd "$(dirname "$0")/.."
export RUNS=${RUNS:-runs/quality} PRECISION=${PRECISION:-bf16}
PYTHON=${PYTHON:-$(command -v .venv/bin/python || command -v python3)}
EPOCH_ENDS="--eval-every 0"   # the sweep's default evaluates every 379 steps; the documented recipe after each epoch
SPECS=()
for seed in ${BASE_SEEDS:-1 2 3 4 5}; do SPECS+=("base-s$seed|--seed $seed $EPOCH_ENDS"); done
for seed in ${VARIANT_SEEDS:-1 2 3}; do
  SPECS+=("smart-s$seed|--seed $seed --smart $EPOCH_ENDS"
          "smart3-s$seed|--seed $seed --smart --smart-weight 3 $EPOCH_ENDS"
          "lld-s$seed|--seed $seed --layer-lr-decay 0.9 --head-lr 3e-3 $EPOCH_ENDS")
done
SPECS+=("cls-s1|--seed 1 --pooling cls $EPOCH_ENDS"
        "cross-sts-s1|--seed 1 --pair-encoding cross --sts-target score $EPOCH_ENDS"
        "rr-batch-s1|--seed 1 --schedule rr-batch --task-weights para=1 $EPOCH_ENDS")
if [ "$stage" = list ]; then
  for spec in "${SPECS[@]}"; do echo "${spec%%|*}"; done
  exit 0
fi
if [ "$stage" != tables ]; then
  for name in "$@"; do
    printf '%s\n' "${SPECS[@]%%|*}" | grep -qx -- "$name" ||
      { echo "quality_campaign.sh: no run named $name (see: quality_campaign.sh list)" >&2; exit 2; }
  done
  chosen=()  # the runs named, or all
  for spec in "${SPECS[@]}"; do
    case " ${*:-${spec%%|*}} " in *" ${spec%%|*} "*) chosen+=("$spec") ;; esac
  done
  RESULTS="${RESULTS:-$RUNS/sweep.jsonl}" bash benchmarks/seed_sweep.sh "${chosen[@]}"
fi
if [ "$stage" != runs ]; then
  {
    "$PYTHON" benchmarks/summarize_sweep.py "$RUNS"/*.jsonl --targets sst=0.495,para=0.855,sts=0.885 \
      --precision "$PRECISION" --out "$RUNS/seeds.json"
    echo
    echo "Ensembles of the runs (dev; each member's --precision $PRECISION):"
    "$PYTHON" benchmarks/ensemble_study.py --runs "$RUNS" --data-dir "${DATA:-../shared/data}" \
      --out "$RUNS/ensembles.json"
  } > "$RUNS/campaign.md"
  cat "$RUNS/campaign.md"
fi
