#!/bin/bash
# Everything a GPU figure in the README rests on, in one command: on one H100 each part should take under
# 10 minutes and all of them under 15 (estimated: to be confirmed by the first run).
#   throughput  our encoder against a tuned transformers loop (benchmarks/gpu_throughput.py), eager, fp32 and bf16,
#               padded, packed and unpadded, a bert-base-shaped random model and MODEL, 32x128 and real sentences
#   compiled    the same table's compiled rows, in bf16
#   recipe      one epoch of the documented recipe (multitask_classifier.py) on the bert-base-shaped model and on
#               MODEL, against the transformers baseline (benchmarks/hf_single_task_baseline.py, 1 epoch a task)
#   eval        dev and test prediction time (predict.py) of each recipe run, task by task
# Each part writes its numbers into RESULTS/parts/ (its commands' output into RESULTS/logs/); every call then
# merges whatever parts are there into RESULTS/suite.md (a Markdown table a part) and RESULTS/suite.json.
#
#   MODEL=/tmp/minilm DATA=/data bash benchmarks/gpu_suite.sh
#   bash benchmarks/gpu_suite.sh --part recipe          # one part (eval needs recipe's runs)
#   bash benchmarks/gpu_suite.sh --dry-run              # all parts at tiny shapes on the CPU, in about a minute
#
# MODEL (default all-MiniLM-L6-v2; none: only the random model), DATA (../shared/data), PYTHON, DEVICE (auto),
# PRECISION (the trainer's --precision, auto) and RESULTS (runs/gpu_suite) can be set. EXTRA_FLAGS are added to
# multitask_classifier.py's flags (e.g. "--max-tokens 4096 --compile" once the trainer has them).
#
# usage: bash benchmarks/gpu_suite.sh [--part throughput|compiled|recipe|eval]... [--dry-run]
set -euo pipefail
ALL_PARTS="throughput compiled recipe eval"
parts="" dry_run=""
while [ $# -gt 0 ]; do
  case "$1" in
    # The comment above is the help: every line of it up to the first line of code, without its "# ".
    -h|--help) sed -n '1d; /^#/!q; s/^# \{0,1\}//p' "$0"; exit 0 ;;
    --dry-run) dry_run=1 ;;
    --part)
      case " $ALL_PARTS " in
        *" ${2:-} "*) parts="$parts $2"; shift ;;
        *) echo "gpu_suite.sh: --part takes one of: $ALL_PARTS (got '${2:-}')" >&2; exit 2 ;;
      esac ;;
    *) echo "gpu_suite.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
parts=${parts:-$ALL_PARTS}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-$(command -v "$ROOT/.venv/bin/python" || command -v python3)}
DATA=${DATA:-$ROOT/../shared/data} DEVICE=${DEVICE:-auto} PRECISION=${PRECISION:-auto}
EXTRA_FLAGS=${EXTRA_FLAGS:-} SHAPE=bert-base
# The same commands at tiny sizes: a 2-layer random model, the first rows of each course file, a step or two.
THROUGHPUT_FLAGS="" COMPILED_FLAGS="--precisions bf16" RECIPE_FLAGS="" HF_FLAGS="" EVAL_FLAGS=""
if [ -n "$dry_run" ]; then
  MODEL=${MODEL:-none} DEVICE=cpu SHAPE=tiny RESULTS=${RESULTS:-runs/gpu_suite-dry-run}
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # tiny models on a shared CPU: threads cost more than they give
  THROUGHPUT_FLAGS="--steps 2 --warmup 1 --fixed 4x16 --real-batches 2 --batch-size 4"
  COMPILED_FLAGS="--steps 1 --warmup 1 --fixed 4x16 --real-batches 0 --precisions fp32 --sides ours"
  RECIPE_FLAGS="--batch-size 8 --eval-batch-size 16 --max-length 32 --quiet"
  HF_FLAGS="--batch-size 8 --max-length 32" EVAL_FLAGS="--batch-size 16"
  mkdir -p "$RESULTS/data"
  for file in ids-sst-train.csv ids-sst-dev.csv ids-sst-test-student.csv quora-train.csv quora-dev.csv \
              quora-test-student.csv sts-train.csv sts-dev.csv sts-test-student.csv; do
    head -n 25 "$DATA/$file" > "$RESULTS/data/$file"
  done
  DATA=$RESULTS/data
fi
MODEL=${MODEL:-all-MiniLM-L6-v2} RESULTS=${RESULTS:-runs/gpu_suite}
mkdir -p "$RESULTS/parts" "$RESULTS/logs"
# Paths as given, from here: the commands run in the repository's root.
RESULTS=$(cd "$RESULTS" && pwd) DATA=$(cd "$DATA" && pwd)
[ ! -d "$MODEL" ] || MODEL=$(cd "$MODEL" && pwd)

# timed PART NAME COMMAND...: runs COMMAND (its output to RESULTS/logs/NAME.log), appends its wall seconds and
# exit code to RESULTS/parts/PART.timings.jsonl; a failed command is recorded and reported, not fatal.
timed() {
  local part=$1 name=$2 start milliseconds rc=0
  shift 2
  start=$(date +%s%N)
  "$@" > "$RESULTS/logs/$name.log" 2>&1 || rc=$?
  milliseconds=$(( ($(date +%s%N) - start) / 1000000 ))
  [ $rc -eq 0 ] || echo "  $name failed (exit code $rc): see $RESULTS/logs/$name.log" >&2
  printf '{"name": "%s", "seconds": %d.%03d, "rc": %d}\n' "$name" $((milliseconds / 1000)) \
    $((milliseconds % 1000)) "$rc" >> "$RESULTS/parts/$part.timings.jsonl"
}

# The recipe's checkpoints, as NAME|FOLDER lines: the random one, written by transformers (with BERT's uncased
# WordPiece vocabulary, MODEL's tokenizer or MiniLM's), and MODEL.
RANDOM_CHECKPOINT=$RESULTS/$SHAPE-random
write_random_checkpoint() {
  [ -f "$RANDOM_CHECKPOINT/config.json" ] ||
    "$PYTHON" - "$RANDOM_CHECKPOINT" "$SHAPE" "$([ "$MODEL" = none ] && echo all-MiniLM-L6-v2 || echo "$MODEL")" <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, ".")
import torch, transformers
from benchmarks.gpu_throughput import SHAPES
from models import Tokenizer
folder, shape, tokenizer = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
torch.manual_seed(0)
transformers.BertModel(transformers.BertConfig(**SHAPES[shape])).save_pretrained(folder)
Tokenizer.from_pretrained(tokenizer).backend.save_pretrained(folder)
PY
}
checkpoints() {
  echo "$SHAPE|$RANDOM_CHECKPOINT"
  # Its folder's (or hub id's) last part names it; the table's names are dot-separated.
  [ "$MODEL" = none ] || echo "$(basename "$MODEL" | tr . _)|$MODEL"
}

cd "$ROOT"
for part in $parts; do
  echo "== $part"
  rm -f "$RESULTS/parts/$part.timings.jsonl"
  case $part in
    throughput|compiled)
      if [ $part = throughput ]; then flags="--compile eager $THROUGHPUT_FLAGS"
      else flags="--compile compiled $COMPILED_FLAGS"; fi
      timed $part $part "$PYTHON" benchmarks/gpu_throughput.py --shape $SHAPE --model "$MODEL" --data "$DATA" \
        --device $DEVICE $flags --out "$RESULTS/parts/$part.json"
      sed -n '/^| model/,$p' "$RESULTS/logs/$part.log" ;;
    recipe)
      write_random_checkpoint
      for spec in $(checkpoints); do
        name=${spec%%|*} folder=${spec#*|}
        timed recipe "recipe.ours.$name" "$PYTHON" multitask_classifier.py --model "$folder" --data-dir "$DATA" \
          --device $DEVICE --precision $PRECISION --schedule mtdnn --option finetune \
          --pair-encoding para=cross,sts=bi --sts-target cosine-range --task-weights para=0.8 --lr 5e-5 --epochs 1 \
          --output-dir "$RESULTS/runs/$name" --predictions-dir "$RESULTS/runs/$name/predictions" \
          $RECIPE_FLAGS $EXTRA_FLAGS
        timed recipe "recipe.transformers.$name" "$PYTHON" benchmarks/hf_single_task_baseline.py --model "$folder" \
          --data "$DATA" --device $DEVICE --epochs sst=1,para=1,sts=1 $HF_FLAGS \
          --out "$RESULTS/runs/hf-$name.json"
      done ;;
    eval)
      for spec in $(checkpoints); do
        name=${spec%%|*}
        if [ ! -d "$RESULTS/runs/$name/best" ]; then
          echo "  no run $RESULTS/runs/$name: run --part recipe first" >&2
          continue
        fi
        for task_file in sst:ids-sst para:quora sts:sts; do
          task=${task_file%%:*} file=${task_file#*:}
          for split in dev test-student; do
            timed eval "eval.$name.$task.$split" "$PYTHON" predict.py "$RESULTS/runs/$name" --task $task \
              --input "$DATA/$file-$split.csv" --output "$RESULTS/runs/$name/predict-$task-$split.tsv" \
              --device $DEVICE $EVAL_FLAGS
          done
        done
      done ;;
  esac
done

# One table and one JSON file from every part's results so far.
"$PYTHON" - "$RESULTS" <<'PY'
import json, sys
from pathlib import Path
sys.path.insert(0, ".")
from benchmarks.gpu_throughput import markdown

results = Path(sys.argv[1])
def timings(part):
    file = results / "parts" / f"{part}.timings.jsonl"
    return [json.loads(line) for line in file.read_text().splitlines()] if file.exists() else []

suite, text = {}, []
for part in ("throughput", "compiled"):
    file = results / "parts" / f"{part}.json"
    if file.exists():
        table = json.loads(file.read_text())
        suite[part] = table
        peak = table["peak_bf16_tflops"]
        text += [f"## Training throughput ({part}): {table['device']}, MFU against "
                 f"{f'{peak:g} TFLOP/s dense bf16' if peak else 'no known peak'}, torch {table['torch']}", "",
                 markdown(table["rows"]), ""]
recipe = []
for timing in timings("recipe"):
    side, name = timing["name"].split(".")[1:]
    row = {"model": name, "side": side, "wall_seconds": round(timing["seconds"], 1), "rc": timing["rc"]}
    if side == "ours" and (results / "runs" / name / "metrics.jsonl").exists():
        records = [json.loads(line) for line in (results / "runs" / name / "metrics.jsonl").read_text().splitlines()]
        evals = [r for r in records if r.get("event") == "eval"]
        if evals:  # seconds from the start to the end of the first evaluation: training and one dev pass
            row.update(train_and_dev_seconds=evals[0].get("seconds"), dev=evals[0].get("dev"))
    elif side == "transformers" and (results / "runs" / f"hf-{name}.json").exists():
        tasks = json.loads((results / "runs" / f"hf-{name}.json").read_text())["results"]
        row.update(train_seconds=sum(t["train_seconds"] for t in tasks),
                   dev={t["task"]: round(t["dev_metric"], 4) for t in tasks})
    recipe.append(row)
if recipe:
    suite["recipe"] = recipe
    text += ["## One epoch of the documented recipe (ours) and of the transformers baseline (1 epoch a task)", "",
             "| model | side | wall s (command) | training s | dev |", "| --- | --- | --- | --- | --- |"]
    for r in recipe:
        train = r.get("train_and_dev_seconds", r.get("train_seconds"))
        dev = " ".join(f"{k} {v:.4f}" for k, v in (r.get("dev") or {}).items())
        text.append(f"| {r['model']} | {r['side']} | {r['wall_seconds']}{'' if r['rc'] == 0 else ' (failed)'} "
                    f"| {'' if train is None else train} | {dev} |")
    text += ["", "training s: ours from the start to the end of the epoch's dev evaluation (metrics.jsonl); "
             "transformers: its training loops only.", ""]
evaluation = [dict(zip(("model", "task", "split"), t["name"].split(".")[1:]), seconds=round(t["seconds"], 1),
                   rc=t["rc"]) for t in timings("eval")]
if evaluation:
    suite["eval"] = evaluation
    text += ["## Prediction time (predict.py, loading included)", "", "| model | task | split | seconds |",
             "| --- | --- | --- | --- |"]
    text += [f"| {e['model']} | {e['task']} | {e['split']} | {e['seconds']}{'' if e['rc'] == 0 else ' (failed)'} |"
             for e in evaluation]
    text.append("")
suite["parts_seconds"] = {part: round(sum(t["seconds"] for t in timings(part)), 1)
                          for part in ("throughput", "compiled", "recipe", "eval") if timings(part)}
text += ["Seconds a part: " + ", ".join(f"{k} {v}" for k, v in suite["parts_seconds"].items())]
(results / "suite.md").write_text("\n".join(text) + "\n")
(results / "suite.json").write_text(json.dumps(suite, indent=2) + "\n")
print("\n".join(text))
print(f"\nwritten: {results}/suite.md, {results}/suite.json")
PY
