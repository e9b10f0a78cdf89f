"""Every contrastive method under one budget, scored on the STS benchmark before and after.

    python benchmarks/compare_contrastive.py --model all-MiniLM-L6-v2 --pooling cls --max-steps 300

The zero-shot encoder is scored once; then each method (one pretrain_contrastive.py run with its paper's
defaults, --pooling P and --max-steps N) and the encoders it saved (CT: both copies) are scored with the same
pooling. Prints a Markdown table with each run's minutes and writes it as JSON to --output-root/results.json.
Any other pretrain_contrastive.py flag is passed on to every run. Off a terminal, a progress line at least every 30
seconds (the runs' and the scorings' own, and one as each run ends).
"""
import argparse
import json
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import pretrain_contrastive  # noqa: E402
from minbert.common.cli import HelpFormatter  # noqa: E402
from minbert.common.files import DEFAULT_DATA, in_repository  # noqa: E402
from minbert.common.progress import log_to_stderr, progress  # noqa: E402
from minbert.common.tables import markdown_table  # noqa: E402
from minbert.evaluation.sts_benchmark import EVAL_SETS, sts_benchmark  # noqa: E402
from minbert.models import SentenceEncoder  # noqa: E402

# row name -> (method, data): seven runs; mnrl takes NLI's (anchor, entailment, contradiction) triplets.
RUNS = {
    "simcse-unlabeled": ("simcse", "unlabeled"),
    "simcse-nli": ("simcse", "nli"),
    "simcse-quora": ("simcse", "quora"),
    "mnrl-nli": ("mnrl", "nli"),
    "ct-unlabeled": ("ct", "unlabeled"),
    "sg-opt-unlabeled": ("sg-opt", "unlabeled"),
    "consert-unlabeled": ("consert", "unlabeled"),
}
RUN_WORDS = {
    "simcse-unlabeled": "unsupervised SimCSE (two dropout views of a sentence) on unlabeled sentences",
    "simcse-nli": "supervised SimCSE on NLI (entailments as positives, contradictions as hard negatives)",
    "simcse-quora": "SimCSE on Quora (duplicates as positives, non-duplicates as negatives)",
    "mnrl-nli": "multiple negatives ranking loss on NLI triplets",
    "ct-unlabeled": "Contrastive Tension (two copies of the encoder) on unlabeled sentences",
    "sg-opt-unlabeled": "self-guided SG-OPT (the frozen encoder's layers guide the trained one) on unlabeled sentences",
    "consert-unlabeled": "ConSERT (two augmented views) on unlabeled sentences",
}


def saved_encoders(folder: Path) -> list[Path]:
    """The encoder checkpoints a run wrote: the folder itself, or CT's model1/ and model2/."""
    return [d for d in (folder, *sorted(p for p in folder.iterdir() if p.is_dir()))
            if (d / "model.safetensors").is_file()]


def score(model: str | Path, pooling: str, data_dir: str) -> dict[str, float]:
    # 128 tokens, as pretrain_contrastive.py --eval scores (no STS sentence is longer)
    return sts_benchmark(SentenceEncoder.from_pretrained(model, pooling, max_length=128), data_dir)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--model", default="all-MiniLM-L6-v2",
                        help="encoder every run starts from: hub id, checkpoint folder, or all-MiniLM-L6-v2")
    parser.add_argument("--pooling", default="cls", choices=("cls", "mean"),
                        help="sentence embedding, in training and scoring: cls = the final [CLS] vector; "
                             "mean = the mean of the final token vectors")
    parser.add_argument("--max-steps", type=int, default=300, help="optimizer steps of each run (of each stage)")
    parser.add_argument("--runs", default=",".join(RUNS),
                        help="the runs to make, comma-separated: " + "; ".join(f"{name}: {words}"
                                                                             for name, words in RUN_WORDS.items()))
    parser.add_argument("--data-dir", default=str(DEFAULT_DATA),
                        help="folder with the training data, sts-eval/ and sts-dev.csv")
    parser.add_argument("--output-root", type=Path, default=Path(in_repository("runs/contrastive")),
                        help="each run's checkpoint goes to OUTPUT_ROOT/POOLING/RUN, the table to "
                             "OUTPUT_ROOT/POOLING/results.json")
    args, passthrough = parser.parse_known_args(argv)
    names = args.runs.split(",")
    if unknown := sorted(set(names) - set(RUNS)):
        parser.error(f"unknown --runs {', '.join(unknown)}; choose from {', '.join(RUNS)}")
    log_to_stderr(logging.WARNING, progress_lines=True)
    root = args.output_root / args.pooling
    rows = {"zero-shot": {"results": score(args.model, args.pooling, args.data_dir), "seconds": 0}}
    for name in progress(names, "compare_contrastive", unit="run"):
        method, data = RUNS[name]
        started = time.time()
        pretrain_contrastive.main(["--model", args.model, "--method", method, "--data", data,
                                   "--pooling", args.pooling, "--max-steps", str(args.max_steps),
                                   "--data-dir", args.data_dir, "--output-dir", str(root / name), *passthrough])
        seconds = time.time() - started
        for encoder in saved_encoders(root / name):
            label = name if encoder == root / name else f"{name} ({encoder.name})"
            rows[label] = {"results": score(encoder, args.pooling, args.data_dir), "seconds": seconds}
    table_rows = {name: {**row["results"], "minutes": f"{row['seconds'] / 60:.1f}" if row["seconds"] else "-"}
               for name, row in rows.items()}
    table = markdown_table(table_rows, columns=(*EVAL_SETS, "sts-dev", "mean", "minutes"), label="run")
    print(f"\n{args.model}, --pooling {args.pooling}, --max-steps {args.max_steps}, "
          f"extra flags: {' '.join(passthrough) or 'none'}; Spearman x 100\n{table}")
    (root / "results.json").write_text(json.dumps(
        {"model": args.model, "pooling": args.pooling, "max_steps": args.max_steps, "extra_flags": passthrough,
         "rows": rows}, indent=2))
    return rows


if __name__ == "__main__":
    main()
