"""The same flags give the same runs: small runs of two revisions of the code end with bit-identical weights,
leaderboard files and saved soft outputs. A check for a refactor (each revision is exported with git archive into
a temporary folder and run there, on CPU, one thread):

    python benchmarks/same_runs.py afd375e HEAD

The runs: the README's multi-task recipe, small (MT-DNN, Quora cross-encoded, cosine-range STS, task weights);
PCGrad with a common layer; the three tasks' mean loss every step (--schedule avg); round-robin with --grad-accum 2 --eval-every 3 --smart; SimCSE on NLI; Contrastive
Tension; ConSERT's two stages (sup-unsup); SimCSE with --fusion and gradient caching. Each run's SHA-256 covers
its weights (safetensors files), its leaderboard CSVs and its saved soft outputs (their ids and tensor bytes:
torch.save's bytes depend on the temporary file's name). Every run is pinned to --precision fp32 (which every
revision with these commands accepts): --precision auto picks bf16 on a processor that computes it natively.
Each run's hash is printed as it ends; off a terminal, a progress line at least every 30 seconds besides.
"""
import argparse
import hashlib
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from minbert.common.files import DEFAULT_DATA  # noqa: E402
from minbert.common.progress import log_to_stderr, progress  # noqa: E402

MULTITASK = ["multitask_classifier.py", "--max-train-examples", "96", "--max-eval-examples", "96"]
RUNS = {
    "recipe": [*MULTITASK, "--schedule", "mtdnn", "--option", "finetune", "--pair-encoding", "para=cross,sts=bi",
               "--sts-target", "cosine-range", "--task-weights", "para=0.8", "--lr", "5e-5", "--epochs", "2",
               "--seed", "1"],
    "pcgrad": [*MULTITASK, "--schedule", "pcgrad", "--common-layer", "--epochs", "1"],
    "average": [*MULTITASK, "--schedule", "avg", "--epochs", "1"],
    "accumulation": [*MULTITASK, "--schedule", "rr-batch", "--grad-accum", "2", "--eval-every", "3", "--smart",
                     "--layer-lr-decay", "0.9", "--epochs", "1", "--tasks", "sst,sts", "--loss-weights", "sts=2"],
    "simcse": ["pretrain_contrastive.py", "--method", "simcse", "--data", "nli", "--max-steps", "4",
               "--max-train-examples", "256", "--batch-size", "16"],
    "ct": ["pretrain_contrastive.py", "--method", "ct", "--data", "unlabeled", "--max-steps", "4",
           "--max-train-examples", "256"],
    "consert": ["pretrain_contrastive.py", "--method", "consert", "CONSERT_STAGES", "sup-unsup", "--data", "sts",
                "--max-steps", "2", "--batch-size", "8", "--max-train-examples", "64"],
    "fusion": ["pretrain_contrastive.py", "--method", "simcse", "--data", "sst", "--fusion", "--max-steps", "3",
               "--batch-size", "8", "--grad-cache-chunk", "4", "--max-train-examples", "64"],
}


def run_hash(folder: Path) -> str:
    total = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if path.name.endswith((".safetensors", "-output.csv")):
            data = path.read_bytes()
        elif path.name.startswith("outputs-") and path.suffix == ".pt":
            saved = torch.load(path, weights_only=True)
            data = "\n".join(saved["ids"]).encode() + saved["outputs"].numpy().tobytes()
        else:
            continue
        total.update(f"{hashlib.sha256(data).hexdigest()} {path.relative_to(folder)}\n".encode())
    return total.hexdigest()


def consert_stages_flag(code: Path) -> str:
    """ConSERT's stage order as the revision in `code` spells it: --schedule until the method registry
    (training/methods.py, now minbert/training/methods.py) named it --consert-schedule, now --consert-stages (its old
    names still work, with a note)."""
    methods = next((path for path in (code / "minbert" / "training" / "methods.py", code / "training" / "methods.py")
                    if path.exists()), None)
    if methods is None:
        return "--schedule"
    return "--consert-stages" if "consert_stages" in methods.read_text(encoding="utf-8") else "--consert-schedule"


def hashes(revision: str, data_dir: str, names: list[str]) -> dict[str, str]:
    with tempfile.TemporaryDirectory() as temp:
        code, out = Path(temp) / "code", Path(temp) / "out"
        code.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(code)], input=archive, check=True)
        stages_flag = consert_stages_flag(code)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
        results = {}
        for name in progress(names, f"same_runs, {revision}", unit="run"):
            argv = [stages_flag if a == "CONSERT_STAGES" else a for a in RUNS[name]]
            subprocess.run([sys.executable, *argv, "--model", "all-MiniLM-L6-v2", "--device", "cpu",
                            "--precision", "fp32", "--quiet",
                            "--data-dir", data_dir, "--output-dir", str(out / name)]
                           + (["--predictions-dir", str(out / name / "predictions")] if argv[0] == MULTITASK[0]
                              else []),
                           cwd=code, env=env, check=True, capture_output=True)
            results[name] = run_hash(out / name)
            print(f"  {revision} {name}: {results[name][:16]}", file=sys.stderr)
        return results


def main(argv: list[str] | None = None) -> bool:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", help="the revision to compare with, e.g. a commit before a refactor")
    parser.add_argument("after", help="the revision that must give the same runs, e.g. HEAD")
    parser.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated, of: {', '.join(RUNS)}")
    parser.add_argument("--data-dir", default=str(DEFAULT_DATA), help="folder with the course's data files")
    args = parser.parse_args(argv)
    names = args.runs.split(",")
    if unknown := sorted(set(names) - set(RUNS)):
        parser.error(f"unknown --runs {', '.join(unknown)}; choose from {', '.join(RUNS)}")
    log_to_stderr(logging.WARNING, progress_lines=True)
    before, after = (hashes(revision, args.data_dir, names) for revision in (args.before, args.after))
    print(f"| run | {args.before} | {args.after} | same |\n|---|---|---|---|")
    for name in names:
        same = "yes" if before[name] == after[name] else "NO"
        print(f"| {name} | {before[name][:16]} | {after[name][:16]} | {same} |")
    return before == after


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
