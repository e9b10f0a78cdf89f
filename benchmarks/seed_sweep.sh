#!/bin/bash
# How much the documented mtdnn run moves with the seed (and with a few flags): every argument
# "NAME|FLAGS" is one run of the README's command plus FLAGS and --eval-every 379, all started at once
# (one GPU holds a dozen all-MiniLM-L6-v2 runs), each on one CPU thread. Every line of each run's metrics.jsonl
# goes to $RESULTS with the run's name and flags, then a line saying how the run ended ("event": "exit", its
# exit code: 124 when LIMIT stopped it); benchmarks/summarize_sweep.py tables them.
#
#   DEVICE=cuda bash benchmarks/seed_sweep.sh "base-s1|--seed 1" "lw2-s1|--seed 1 --loss-weights sst=2"
#
# Settings, as environment variables (default in brackets):
#   MODEL      starting weights: hub id, checkpoint folder, or all-MiniLM-L6-v2 [all-MiniLM-L6-v2]
#   DATA       folder with the course's data files [../shared/data]
#   DEVICE     cpu, cuda, cuda:1, ... or auto (cuda when present) [auto]
#   PRECISION  fp32, tf32 (fp32 with TF32 matrix products), bf16 or fp16 (autocast on a GPU), or auto [fp32]
#   RUNS       each run's folder goes to RUNS/NAME, its log to RUNS/NAME.log [runs/sweep]
#   RESULTS    the JSON lines file of dev metrics [RUNS/sweep.jsonl]
#   LIMIT      stop each run after this many seconds; 0: no limit [0]
#   EXTRA      flags added to every run, e.g. --max-train-examples 64 for a quick try [none]
#   PYTHON     the Python to run [.venv/bin/python, else python3]
#
# usage: bash benchmarks/seed_sweep.sh "NAME|FLAGS" ...
case "$1" in
  # The comment above is the help: every line of it up to the first line of code, without its "# ".
  -h|--help) sed -n '1d; /^#/!q; s/^# \{0,1\}//p' "$0"; exit 0 ;;
  -*) echo "seed_sweep.sh: unknown option $1; arguments are NAME|FLAGS (see --help)" >&2; exit 2 ;;
esac
set -eo pipefail
MODEL=${MODEL:-all-MiniLM-L6-v2} DATA=${DATA:-../shared/data} DEVICE=${DEVICE:-auto}
PRECISION=${PRECISION:-fp32} RUNS=${RUNS:-runs/sweep} RESULTS=${RESULTS:-$RUNS/sweep.jsonl}
PYTHON=${PYTHON:-$(command -v .venv/bin/python || command -v python3)}
# A dozen processes share the machine's cores: torch's thread pool in each would only make them wait for each other.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$RUNS"
# The README's command, as a --config file: a run's FLAGS (and EXTRA) on the command line win over its values (a
# flag given twice on one command line is refused).
cat > "$RUNS/base.yaml" <<EOF
model: $MODEL
data-dir: $DATA
device: $DEVICE
precision: $PRECISION
schedule: mtdnn
option: finetune
pair-encoding: para=cross,sts=bi
sts-target: cosine-range
task-weights: para=0.8
lr: 5e-5
epochs: 3
eval-every: 379
EOF
pids=()
for spec in "$@"; do
  name="${spec%%|*}"; flags="${spec#*|}"
  timeout "${LIMIT:-0}" "$PYTHON" multitask_classifier.py --config "$RUNS/base.yaml" $flags ${EXTRA:-} --output-dir "$RUNS/$name" \
    --predictions-dir "$RUNS/$name/predictions" > "$RUNS/$name.log" 2>&1 &
  pids+=($!)
done
codes=()
for pid in "${pids[@]}"; do
  rc=0; wait "$pid" || rc=$?
  codes+=($rc)
done
"$PYTHON" - "$RUNS" "${codes[*]}" "$@" > "$RESULTS" <<'PY'
import json, sys
runs, codes, specs = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
for spec, rc in zip(specs, codes):
    name, _, flags = spec.partition("|")
    try:
        lines = open(f"{runs}/{name}/metrics.jsonl", encoding="utf-8").read().splitlines()
    except FileNotFoundError:
        lines = []
    for line in lines:
        print(json.dumps({"run": name, "flags": flags.strip(), **json.loads(line)}))
    print(json.dumps({"run": name, "flags": flags.strip(), "event": "exit", "rc": int(rc), "log": f"{runs}/{name}.log"}))
    if rc != "0":
        print(f"{name}: exit code {rc} (124: stopped at LIMIT); see {runs}/{name}.log", file=sys.stderr)
PY
echo "results: $RESULTS"
