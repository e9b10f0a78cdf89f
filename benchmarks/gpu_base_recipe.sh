#!/bin/bash
# The base recipe at full strength on one GPU (issue 70; docs/base-size.md, "The base recipe on a GPU"): each call
# below is one call of the device tool, of at most 9 minutes, after the calls that send all-mpnet-base-v2 there.
# Stage first, here: the data, MiniLM and the base model's five chunks; and the bank of unlabeled sentences (for the
# silver data: 17 MB, which .device, 56 MB, has no room for) in a folder of its own:
#   bash ../shared/tools/device-stage.sh --with-mpnet
#   mkdir -p .device-bank && cp ../shared/data/unlabeled-sentences.txt .device-bank/
#   echo /.device-bank/ >> .git/info/exclude      (once: the folder travels only when carried)
# then send the chunks, one call each, each issued as soon as the one before returns (the machine goes back 30 s
# after a call; what the calls put in /tmp stays), the bank with the last, smallest chunk:
#   carry [".device-mpnet/part-K"]   command: mkdir -p /tmp/mpnet-chunks && cp .device-mpnet/part-K/* /tmp/mpnet-chunks/
#   carry [".device-mpnet/part-5", ".device-bank"]   command: the same with K=5, then && cp -r .device-bank /tmp/bank
# then carry [".device"] and begin with  source .device/setup.sh &&  (it joins the chunks and sets MODEL_BASE):
#   source .device/setup.sh && BANK=/tmp/bank/unlabeled-sentences.txt bash benchmarks/gpu_base_recipe.sh base
#
#   base     the recipe (--config mtdnn-mpnet-gpu) over SEEDS (1 2 3) at once on the one GPU, a process each, each
#            stopped at 330 s; the mean ensemble of the runs that finished (minbert ensemble); silver data with
#            that ensemble as the teacher, on the GPU (minbert silver: the whole bank); the tables: dev per run and
#            task, mean ± sd over the seeds, training seconds, the ensemble against its best seed, silver's counts
#   grid     the recipe's choices measured on dev, seed 1, all at once, each stopped at 450 s: GRID's runs (default
#            the recipe, --lr 2e-5, Quora's weight 1 and layer-wise decay; smart, the costliest, by name), each with
#            its dev score after every epoch (the number of epochs)
#   student  the small model's full recipe (--config mtdnn-minilm, MODEL) over SEEDS on gold data alone and with
#            the silver data of SILVER (benchmarks/results/gpu/base/silver: the base call's, committed), all six at
#            once, each stopped at 420 s
#   list CALL  the call's runs, NAME|FLAGS, one a line
# Each call ends by bundling into OUT (the device tool's $OUT): CALL.md and CALL.json (the tables), CALL.log,
# runs.tar.gz (each run's metrics.jsonl, run_config.json and six leaderboard files, the ensemble's, the steps'
# times and logs; no weights) and silver.tar.gz (the base call's silver folder). Back here, into the committed
# folder, and its dev scores from the leaderboard files:
#   python benchmarks/gpu_base_report.py unpack FOLDER_OF_THE_RETURNED_FILES
#   python benchmarks/gpu_base_report.py score
# A step that fails or overruns its limit is recorded (its exit code, its log) and the call goes on, then exits 1.
#
# MODEL_BASE (all-mpnet-base-v2), MODEL (all-MiniLM-L6-v2: silver's retriever, and the student) and DATA come
# from .device/setup.sh. Also settable: BANK (the base call's bank: DATA/unlabeled-sentences.txt), SEEDS, GRID,
# SILVER, PLAN_DIR (/tmp/gpu_base), OUT (PLAN_DIR/out-CALL), PYTHON (python3), SCALE (full; tiny: the rehearsal on a
# CPU, tests/test_gpu_base_recipe.py: the first 24 rows of each data file and 400 of the bank, 8 trained on, 2
# epochs, the limits 5 times longer).
#
# usage: bash benchmarks/gpu_base_recipe.sh base|grid|student|list CALL
set -euo pipefail
case "${1:-}" in
  # The comment above is the help: every line of it up to the first line of code, without its "# ".
  -h|--help) sed -n '1d; /^#/!q; s/^# \{0,1\}//p' "$0"; exit 0 ;;
  base|grid|student) call=$1 ;;
  list) [[ "${2:-}" =~ ^(base|grid|student)$ ]] ||
          { echo "gpu_base_recipe.sh: list base, grid or student (got '${2:-}')" >&2; exit 2; }
        call=$2 ;;
  *) echo "gpu_base_recipe.sh: give base, grid, student or list CALL (got '${1:-}'; see --help)" >&2; exit 2 ;;
esac
HERE=$(cd "$(dirname "$0")" && pwd)
SEEDS=${SEEDS:-1 2 3} SILVER=${SILVER:-benchmarks/results/gpu/base/silver}  # from the repository's root
GRID=${GRID:-recipe lr2e-5 para1 lld}
# The runs of each call: NAME|FLAGS, the flags added to the call's recipe.
runs_of() {
  local seed name
  case $1 in
    base) for seed in $SEEDS; do echo "base-s$seed|--seed $seed"; done ;;
    grid) for name in $GRID; do
            case $name in
              recipe) echo "recipe|--seed 1" ;;
              lr2e-5) echo "lr2e-5|--seed 1 --lr 2e-5" ;;
              para1) echo "para1|--seed 1 --task-weights para=1" ;;
              lld) echo "lld|--seed 1 --layer-lr-decay 0.9 --head-lr 3e-3" ;;   # the quality campaign's
              smart) echo "smart|--seed 1 --smart" ;;
              *) echo "gpu_base_recipe.sh: GRID: no run named $name (recipe, lr2e-5, para1, lld, smart)" >&2
                 return 2 ;;
            esac
          done ;;
    student) for seed in $SEEDS; do echo "gold-s$seed|--seed $seed"; done
             for seed in $SEEDS; do echo "silver-s$seed|--seed $seed --silver $SILVER"; done ;;
  esac
}
specs=$(runs_of "$call") || exit 2
if [ "$1" = list ]; then echo "$specs"; exit 0; fi
for setting in MODEL_BASE MODEL DATA; do
  [ -n "${!setting:-}" ] || { echo "gpu_base_recipe.sh: $setting is not set: begin with  source .device/setup.sh &&" \
                                   "(MODEL_BASE: after the calls that send all-mpnet-base-v2's chunks)" >&2
                              exit 2; }
done
BANK=${BANK:-$DATA/unlabeled-sentences.txt}
if [ "$call" = base ] && [ ! -f "$BANK" ]; then  # found out now, not after the training
  echo "gpu_base_recipe.sh: BANK=$BANK: no such file (the bank of unlabeled sentences, for the silver data)" >&2
  exit 2
fi
if [ "$call" = student ] && [ ! -f "$SILVER/silver.json" ]; then
  echo "gpu_base_recipe.sh: SILVER=$SILVER holds no silver data (silver.json): the base call makes it" >&2
  exit 2
fi
cd "$HERE/.."
PYTHON=${PYTHON:-python3} PLAN_DIR=${PLAN_DIR:-/tmp/gpu_base} SCALE=${SCALE:-full}
RESULTS=$PLAN_DIR/$call RUNS=$PLAN_DIR/$call/runs  # each call's own: a call run again starts afresh
# Three processes share the machine's 16 cores and one GPU: a few threads each feed it.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
EXTRA="" SILVER_FLAGS="" LIMIT_FACTOR=1
if [ "$SCALE" = tiny ]; then
  # The CPU rehearses what the calls do, not how fast a GPU does it: a loaded machine must not stop its tiny steps.
  EXTRA="--max-train-examples 8 --batch-size 8 --eval-batch-size 24 --max-length 16 --epochs 2 --quiet"
  SILVER_FLAGS="--neighbours 1 --per-class 2 --pair-sentences 8"
  LIMIT_FACTOR=5
  if [ ! -f "$PLAN_DIR/data/.made" ]; then
    mkdir -p "$PLAN_DIR/data"
    for file in "$DATA"/*.csv; do head -n 25 "$file" > "$PLAN_DIR/data/$(basename "$file")"; done
    head -n 400 "$BANK" > "$PLAN_DIR/data/unlabeled-sentences.txt"
    touch "$PLAN_DIR/data/.made"
  fi
  DATA=$PLAN_DIR/data BANK=$PLAN_DIR/data/unlabeled-sentences.txt
fi
rm -rf "$RESULTS"
mkdir -p "$RESULTS/logs" "$RUNS"
exec > >(tee -a "$RESULTS/logs/$call.log") 2>&1

failed=0
# step_done NAME LIMIT RC MILLISECONDS: a line of steps.jsonl; a failed step is reported, never fatal.
step_done() {
  printf '{"call": "%s", "step": "%s", "seconds": %d.%03d, "limit": %d, "rc": %d}\n' "$call" "$1" \
    $(($4 / 1000)) $(($4 % 1000)) "$2" "$3" >> "$RESULTS/steps.jsonl"
  [ "$3" -eq 0 ] || { echo "  $1: exit code $3 (124: its $2 s limit); see $RESULTS/logs/" >&2; failed=1; }
}
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# timed NAME LIMIT COMMAND...: COMMAND stopped after LIMIT seconds (exit code 124), its output in logs/NAME.log.
timed() {
  local name=$1 limit=$(( $2 * LIMIT_FACTOR )) start rc=0
  shift 2
  echo "$(date +%T) $call: $name (at most $limit s)"
  start=$(now_ms)
  timeout "$limit" "$@" > "$RESULTS/logs/$name.log" 2>&1 || rc=$?
  step_done "$name" "$limit" $rc $(( $(now_ms) - start ))
}

# train CONFIG MODEL LIMIT: the call's runs at once on the one GPU, a process each, each stopped after LIMIT
# seconds, its log in logs/NAME.log; a line of runs.jsonl says how each ended, and `finished` names those that did.
finished=()
train() {
  local config=$1 model=$2 limit=$(( $3 * LIMIT_FACTOR )) start spec name rc worst=0 pids=() names=() flags=()
  echo "$(date +%T) $call: $(echo "$specs" | wc -l) runs of --config $config at once (each at most $limit s)"
  start=$(now_ms)
  while IFS= read -r spec; do
    name=${spec%%|*}
    # shellcheck disable=SC2086
    timeout "$limit" "$PYTHON" multitask_classifier.py --config "$config" --model "$model" --data-dir "$DATA" \
      ${spec#*|} --output-dir "$RUNS/$name" --predictions-dir "$RUNS/$name/predictions" --save-every-minutes 0 \
      $EXTRA > "$RESULTS/logs/$name.log" 2>&1 &
    pids+=($!) names+=("$name") flags+=("--config $config ${spec#*|}")
  done <<< "$specs"
  for i in "${!pids[@]}"; do
    rc=0; wait "${pids[$i]}" || rc=$?
    printf '{"call": "%s", "run": "%s", "flags": "%s", "rc": %d}\n' "$call" "${names[$i]}" "${flags[$i]}" $rc \
      >> "$RESULTS/runs.jsonl"
    if [ $rc -eq 0 ]; then finished+=("$RUNS/${names[$i]}"); else worst=$rc; fi
  done
  step_done train "$limit" $worst $(( $(now_ms) - start ))
}

begun=$(date +%s)
timed machine 30 "$PYTHON" benchmarks/gpu_report.py machine "$RESULTS"
case $call in
  base)
    train mtdnn-mpnet-gpu "$MODEL_BASE" 330
    if [ ${#finished[@]} -gt 0 ]; then
      members=$(IFS=,; echo "${finished[*]}")
      timed ensemble 60 "$PYTHON" -m minbert ensemble --members "$members" --method mean --data-dir "$DATA" \
        --predictions-dir "$RUNS/ensemble/predictions" --out "$RUNS/ensemble/ensemble.json"
      # shellcheck disable=SC2086
      timed silver 120 "$PYTHON" -m minbert silver --teacher "$RUNS/ensemble/ensemble.json" --retriever "$MODEL" \
        --bank "$BANK" --data-dir "$DATA" --out "$RESULTS/silver" --cache-dir "$PLAN_DIR/bank-embeddings" $SILVER_FLAGS
    else
      echo "  no run finished: no ensemble, no silver data" >&2
    fi ;;
  grid) train mtdnn-mpnet-gpu "$MODEL_BASE" 450 ;;
  student) train mtdnn-minilm "$MODEL" 420 ;;
esac
echo "$(date +%T) $call: bundling into ${OUT:-$PLAN_DIR/out-$call} after $(( $(date +%s) - begun )) s"
"$PYTHON" benchmarks/gpu_base_report.py bundle "$RESULTS" "${OUT:-$PLAN_DIR/out-$call}" "$call" ||
  { echo "  bundling failed" >&2; failed=1; }
exit $failed
