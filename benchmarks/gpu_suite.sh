#!/bin/bash
# Everything a GPU figure of this project rests on, in one GPU session: two calls of the device tool, each under
# 9 minutes, then a third (search, or compiled), within 29 minutes of machine time with its start
# (benchmarks/README.md has the estimates). Stage first, here:
#   EXTRA_WHEELS="$(cat benchmarks/device-wheels.txt)" bash ../shared/tools/device-stage.sh      (carry .device)
# begin every call with  source .device/setup.sh &&  and issue each call right after the one before returns (the
# machine goes back 30 s after a call).
#
#   call1     the set-up; a world of one process through DistributedDataParallel on NCCL (benchmarks/ddp_smoke.py);
#             the trainer's CUDA graphs against eager code, and their dropout new at each replay (graph_check.py);
#             the eager throughput table (benchmarks/gpu_throughput.py: our encoder against a tuned
#             transformers loop, fp32 and bf16, padded and packed, bert-base-shaped and MODEL); the shapes table
#             (bert-base-shaped, bf16: real batches as they are and bucketed, eager and as CUDA graphs); our AdamW,
#             reference and fused, against torch's (benchmarks/optimizer_speed.py); one
#             3-epoch run of the documented recipe alone on the GPU (training, dev evaluation and test prediction
#             timed apart) and the transformers baseline (3 epochs a task, same precision); then the quality
#             campaign (benchmarks/quality_campaign.sh, every other run) starts in the background in its own
#             session (setsid), every run stopped at a deadline 16 minutes after call1 began; call1 returns
#             CALL1_SECONDS (510) after it began, or once the campaign is done
#   call2     waits for the campaign (until its deadline at most), builds its tables (seeds, ensembles) and
#             every other one
#   search    the full recipe's hyperparameter study (search.py over minbert/recipes/search/mtdnn-minilm.yaml, its first
#             trial the recipe itself): SEARCH_WORKERS (8) workers share the GPU, each starts one trial in its
#             first minute and none later, all stopped at 7.5 minutes; its table, pictures and journal bundled
#             (optional, right after call2; it needs optuna staged: see benchmarks/README.md)
#   compiled  the throughput table's compiled rows, bert-base-shaped, 32 x 128, bf16, a graph a shape, Inductor's
#             cache kept in PLAN_DIR for the next call (optional; at most 4 minutes)
#   list      the campaign's runs, one a line (call1's solo run first)
# Each call ends by bundling every result so far into OUT (the device tool's $OUT): tables.md, tables.json, the
# call's log and results.tar.gz (logs, each run's metrics.jsonl, soft outputs and leaderboard files). A step that
# fails or overruns its limit is recorded (its exit code, its log) and the call goes on, then exits with 1. If
# call2 comes too late (the machine given back), what is kept is call1's bundle: its steps, and the campaign's
# runs as far as they had come when call1 returned.
#
#   source .device/setup.sh && bash benchmarks/gpu_suite.sh call1
#   source .device/setup.sh && bash benchmarks/gpu_suite.sh call2
#   source .device/setup.sh && bash benchmarks/gpu_suite.sh search
#   bash benchmarks/rehearse_gpu_plan.sh    # all of it on this CPU, as the GPU machine would run it
#
# MODEL and DATA come from .device/setup.sh. Also settable: PLAN_DIR (/tmp/gpu_plan: outlives the calls on the
# machine), OUT (PLAN_DIR/out-CALL), PRECISION (bf16), PYTHON (python3), CALL1_SECONDS (510), SCALE (full; tiny:
# the rehearsal's sizes: the tiny random shape beside MODEL, 24 rows a file, 8 of them trained on, the campaign's
# runs on a random BERT of the tiny shape with MODEL's vocabulary (call1's solo run of the recipe loads MODEL), and
# call1 waiting 20 s for the campaign).
#
# usage: bash benchmarks/gpu_suite.sh call1|call2|search|compiled|list
set -euo pipefail
case "${1:-}" in
  # The comment above is the help: every line of it up to the first line of code, without its "# ".
  -h|--help) sed -n '1d; /^#/!q; s/^# \{0,1\}//p' "$0"; exit 0 ;;
  call1|call2|search|compiled|list|_campaign) call=$1 ;;
  *) echo "gpu_suite.sh: give call1, call2, search, compiled or list (got '${1:-}'; see --help)" >&2; exit 2 ;;
esac
# The campaign that fits the session (benchmarks/README.md): the recipe over five seeds (base-s1 is call1's solo
# run), SMART and layer-wise decay once each, and the three single runs. SMART with a three times larger weight
# would leave no margin: a later session's.
export BASE_SEEDS="1 2 3 4 5" VARIANT_SEEDS="1"
[ "${SCALE:-}" != tiny ] || BASE_SEEDS="1 2"
HERE=$(cd "$(dirname "$0")" && pwd)
campaign_runs() { bash "$HERE/quality_campaign.sh" list | grep -v '^smart3-'; }
if [ "$call" = list ]; then campaign_runs; exit 0; fi
for setting in MODEL DATA; do
  [ -n "${!setting:-}" ] || { echo "gpu_suite.sh: $setting is not set: begin with  source .device/setup.sh &&" >&2
                              exit 2; }
done
cd "$HERE/.."
export PYTHON=${PYTHON:-python3} PRECISION=${PRECISION:-bf16} PLAN_DIR=${PLAN_DIR:-/tmp/gpu_plan} SCALE=${SCALE:-full}
export RUNS=$PLAN_DIR/runs MODEL DEVICE=${DEVICE:-auto}
# Inductor's compiled kernels, kept between the calls (PLAN_DIR outlives them): a setting compiled again is read back.
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$PLAN_DIR/inductor}
CALL1_SECONDS=${CALL1_SECONDS:-510}
SEARCH_WORKERS=${SEARCH_WORKERS:-8} SEARCH_START=60  # the search call's workers start trials for this many seconds
# The campaign's deadline: call1's end, 30 s to issue call2, then 420 s of call2's (whose tables and bundle take
# well under its last 90 s of 9 minutes).
CALL2_WAIT=420
# How far a step may overrun the GPU's limits: 1 on the GPU. The CPU rehearsal checks what the plan does, not how
# fast a CPU does it: a loaded machine must not stop its tiny steps at the GPU's limits.
LIMIT_FACTOR=1
THROUGHPUT_FLAGS="--shape bert-base --no-bucketed" BASELINE_FLAGS=""
# The few-shapes rows: the random bert-base alone (MODEL's tokenizer cuts the real sentences), in bf16.
SHAPES_FLAGS="--shape bert-base --precisions bf16"
OPTIMIZER_FLAGS="--repeats 20"
# Compiling took about a minute a setting (issue 71): a fixed shape, our side and transformers', static shapes.
COMPILED_FLAGS="--shape bert-base --precisions bf16 --attention padded --real-batches 0 --steps 10"
if [ "$SCALE" = tiny ]; then
  THROUGHPUT_FLAGS="--shape tiny --steps 1 --warmup 0 --fixed 2x16 --real-batches 1 --batch-size 2 --max-length 16"
  THROUGHPUT_FLAGS+=" --no-bucketed"
  SHAPES_FLAGS="--shape tiny --steps 1 --warmup 0 --fixed 2x16 --real-batches 1 --batch-size 2 --max-length 16"
  SHAPES_FLAGS+=" --precisions fp32"
  OPTIMIZER_FLAGS="--repeats 1"
  COMPILED_FLAGS="--shape tiny --steps 1 --warmup 1 --fixed 2x16 --real-batches 0 --precisions fp32 --sides ours"
  BASELINE_FLAGS="--max-train-examples 8 --batch-size 8 --max-length 16"
  export EXTRA="--max-train-examples 8 --batch-size 8 --eval-batch-size 24 --max-length 16 --quiet"
  CALL1_SECONDS=20  # a short wait for the campaign: call1's wait rehearsed, call2's too (the campaign goes on)
  SEARCH_WORKERS=2 SEARCH_START=1
  LIMIT_FACTOR=5
  CALL2_WAIT=$(( CALL2_WAIT * LIMIT_FACTOR ))
  # The first rows of each staged file (the sts-eval sets are not used here), made once: the campaign started by
  # call1 inherits DATA as this folder.
  if [ ! -f "$PLAN_DIR/data/.made" ]; then
    mkdir -p "$PLAN_DIR/data"
    for file in "$DATA"/*.csv; do head -n 25 "$file" > "$PLAN_DIR/data/$(basename "$file")"; done
    touch "$PLAN_DIR/data/.made"
  fi
  DATA=$PLAN_DIR/data
fi
export DATA
mkdir -p "$PLAN_DIR/logs" "$RUNS"

# timed NAME LIMIT COMMAND...: COMMAND stopped after LIMIT seconds (exit code 124), its output in logs/NAME.log;
# a line of steps.jsonl says how long it took and how it ended. A failed step is reported, never fatal, and makes
# the call's exit code 1 once it has bundled.
failed=0
timed() {
  local name=$1 limit=$(( $2 * LIMIT_FACTOR )) start milliseconds rc=0
  shift 2
  last_rc=0
  echo "$(date +%T) $call: $name (at most $limit s)"
  start=$(date +%s%N)
  timeout "$limit" "$@" > "$PLAN_DIR/logs/$name.log" 2>&1 || rc=$?
  milliseconds=$(( ($(date +%s%N) - start) / 1000000 ))
  printf '{"call": "%s", "step": "%s", "seconds": %d.%03d, "limit": %d, "rc": %d}\n' "$call" "$name" \
    $((milliseconds / 1000)) $((milliseconds % 1000)) "$limit" "$rc" >> "$PLAN_DIR/steps.jsonl"
  [ $rc -eq 0 ] || { echo "  $name: exit code $rc (124: its $limit s limit); see $PLAN_DIR/logs/$name.log" >&2
                     failed=1; }
  last_rc=$rc
}

bundle() {  # into the device tool's $OUT (elsewhere PLAN_DIR/out-CALL)
  "$PYTHON" benchmarks/gpu_report.py bundle "$PLAN_DIR" "${OUT:-$PLAN_DIR/out-$call}" "$call" ||
    { echo "  bundling failed" >&2; failed=1; }
}

# wait_for_campaign UNTIL: until the campaign is done or the clock reaches UNTIL (seconds since 1970), a line a minute.
wait_for_campaign() {
  while [ ! -f "$PLAN_DIR/campaign.rc" ] && [ "$(date +%s)" -lt "$1" ]; do
    sleep 5
    [ $(( $(date +%s) % 60 )) -ge 5 ] ||
      echo "  $(date +%T): $(cat "$RUNS"/*/metrics.jsonl 2>/dev/null | grep -c '"event": "eval"') evaluations so far"
  done
}

case $call in
  call1)
    exec > >(tee -a "$PLAN_DIR/logs/call1.log") 2>&1
    begun=$(date +%s)
    timed setup 30 "$PYTHON" benchmarks/gpu_report.py machine "$PLAN_DIR"
    cat "$PLAN_DIR/machine.json" 2>/dev/null || true
    # A world of one process through DistributedDataParallel, as the trainers wrap it (engine/ddp.py): NCCL's
    # start-up and the wrapper checked on the GPU (gloo in the rehearsal), before any figure depends on them.
    timed ddp 60 "$PYTHON" -m torch.distributed.run --standalone --nproc-per-node 1 benchmarks/ddp_smoke.py
    timed graphs 60 "$PYTHON" benchmarks/graph_check.py
    timed throughput 110 "$PYTHON" benchmarks/gpu_throughput.py $THROUGHPUT_FLAGS --model "$MODEL" --data "$DATA" \
      --model-name all-MiniLM-L6-v2 --compile eager --out "$PLAN_DIR/throughput.json"
    timed shapes 90 "$PYTHON" benchmarks/gpu_throughput.py $SHAPES_FLAGS --model none --tokenizer "$MODEL" \
      --data "$DATA" --compile eager,graphs --out "$PLAN_DIR/shapes.json"
    timed optimizer 30 "$PYTHON" benchmarks/optimizer_speed.py $OPTIMIZER_FLAGS
    timed recipe 190 env LIMIT=180 RESULTS="$RUNS/solo.jsonl" bash benchmarks/quality_campaign.sh runs base-s1
    timed baseline 180 "$PYTHON" benchmarks/hf_single_task_baseline.py --model "$MODEL" --data "$DATA" \
      --epochs sst=3,para=3,sts=3 --precision "$PRECISION" $BASELINE_FLAGS --out "$PLAN_DIR/baseline.json"
    # In a session of its own, the campaign outlives this call; its deadline tells call2 how long to wait.
    rm -f "$PLAN_DIR/campaign.rc"
    echo $(( begun + CALL1_SECONDS + 30 + CALL2_WAIT )) > "$PLAN_DIR/campaign.deadline"
    setsid bash benchmarks/gpu_suite.sh _campaign < /dev/null > /dev/null 2>&1 &
    echo $! > "$PLAN_DIR/campaign.pid"
    echo "$(date +%T) call1: the campaign runs until $(date -d @"$(cat "$PLAN_DIR/campaign.deadline")" +%T) at most"
    wait_for_campaign $(( begun + CALL1_SECONDS ))
    echo "$(date +%T) call1: done; issue call2 now"
    bundle ;;
  _campaign)  # call1's background part: every campaign run but call1's solo one, then the exit code for call2
    call=background
    if [ "$SCALE" = tiny ]; then
      # On a CPU, six MiniLM runs at once (each writing a gigabyte of checkpoints) were most of the rehearsal's
      # time and showed nothing that call1's solo run of MODEL does not: here they train a random tiny BERT.
      "$PYTHON" - "$MODEL" "$PLAN_DIR/tiny-model" > "$PLAN_DIR/logs/tiny-model.log" 2>&1 <<'PY' ||
import json, shutil, sys
from pathlib import Path
import torch, transformers
model, folder = Path(sys.argv[1]), Path(sys.argv[2])
torch.manual_seed(0)
vocabulary = json.loads((model / "config.json").read_text())["vocab_size"]
transformers.BertModel(transformers.BertConfig(vocab_size=vocabulary, hidden_size=32, num_hidden_layers=2,
                                               num_attention_heads=2, intermediate_size=64)).save_pretrained(folder)
for file in model.iterdir():  # the tokenizer's files
    if file.name != "config.json" and file.suffix not in (".safetensors", ".bin"):
        shutil.copy(file, folder)
PY
        { echo 1 > "$PLAN_DIR/campaign.rc"; exit 1; }
      export MODEL=$PLAN_DIR/tiny-model
    fi
    rest=$(campaign_runs | grep -vx base-s1 | tr '\n' ' ')
    left=$(( $(cat "$PLAN_DIR/campaign.deadline") - $(date +%s) ))
    timed campaign $((left + 30)) env LIMIT=$left RESULTS="$RUNS/sweep.jsonl" \
      bash benchmarks/quality_campaign.sh runs $rest
    echo "$last_rc" > "$PLAN_DIR/campaign.rc" ;;
  call2)
    exec > >(tee -a "$PLAN_DIR/logs/call2.log") 2>&1
    if [ -f "$PLAN_DIR/campaign.deadline" ]; then
      # Its runs stop at the deadline, and their results are gathered seconds later; but call2 waits no longer
      # than its own share, whenever it was issued.
      until=$(( $(cat "$PLAN_DIR/campaign.deadline") + 20 ))
      until=$(( until < $(date +%s) + CALL2_WAIT + 20 ? until : $(date +%s) + CALL2_WAIT + 20 ))
      echo "$(date +%T) call2: waiting for the campaign (until $(date -d @$until +%T) at most)"
      wait_for_campaign $until
      [ -f "$PLAN_DIR/campaign.rc" ] || echo "  the campaign is past its deadline: its tables from what is there" >&2
      [ "$(cat "$PLAN_DIR/campaign.rc" 2>/dev/null)" = 0 ] || failed=1
    else
      echo "call2: no campaign was started (call1 first): tables of what is there" >&2
    fi
    timed tables 60 bash benchmarks/quality_campaign.sh tables
    bundle ;;
  search)
    exec > >(tee -a "$PLAN_DIR/logs/search.log") 2>&1
    # Every worker the same command: they share the study in its journal file. At full size each starts one trial
    # in its first minute (--timeout) and no other, so the trials end together (8 x 3,411 steps at the GPU's 85 a
    # second: 5.5 minutes); the step's limit stops them all (a trial stopped is failed and queued again).
    study=(--config mtdnn-minilm --model "$MODEL" --data-dir "$DATA" --device "$DEVICE"
           --precision "$PRECISION" --space mtdnn-minilm --study-dir "$RUNS/search"
           --storage journal ${EXTRA:-})
    timed search 450 bash -c 'for i in $(seq "$1"); do "${@:2}" --join & sleep 1; done; wait' \
      workers "$SEARCH_WORKERS" "$PYTHON" search.py "${study[@]}" --timeout "$SEARCH_START"
    timed search-report 60 "$PYTHON" search.py "${study[@]}" --report
    bundle ;;
  compiled)
    exec > >(tee -a "$PLAN_DIR/logs/compiled.log") 2>&1
    timed compiled 240 "$PYTHON" benchmarks/gpu_throughput.py $COMPILED_FLAGS --model none --data "$DATA" \
      --compile compiled --out "$PLAN_DIR/compiled.json"
    bundle ;;
esac
exit $failed
