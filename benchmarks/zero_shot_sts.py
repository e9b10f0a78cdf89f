"""A model's zero-shot STS dev score through our encoder and through sentence-transformers, side by side: the
course's STS dev pairs, each sentence embedded as the model's sentence-transformers folder says (pooling,
Normalize, max_seq_length), scored by the Pearson and Spearman correlations of the pairs' cosines with the gold
scores. Equal scores (and the largest difference between the two sides' embeddings) show that our encoder computes
the model's embeddings.

    python benchmarks/zero_shot_sts.py --model all-mpnet-base-v2       # needs bash setup.sh --with-mpnet

fp32 on the CPU, one sentence list for both sides; off a terminal, a progress line at least every 30 seconds.
"""
import argparse
import logging
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from scipy.stats import pearsonr, spearmanr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from minbert.common.cli import HelpFormatter  # noqa: E402
from minbert.common.files import DEFAULT_DATA  # noqa: E402
from minbert.common.precision import processor  # noqa: E402
from minbert.common.progress import log_to_stderr  # noqa: E402
from minbert.common.tables import markdown_table  # noqa: E402
from minbert.evaluation.sts_benchmark import distinct_sentences, read_sets  # noqa: E402
from minbert.models import SentenceEncoder  # noqa: E402
from minbert.models.loading import resolve_checkpoint  # noqa: E402


def scores(embeddings: torch.Tensor, first: list[int], second: list[int], gold: list[float]) -> dict[str, float]:
    unit = F.normalize(embeddings.double(), dim=-1)
    cosines = (unit[first] * unit[second]).sum(-1).numpy()
    return {"pearson": pearsonr(cosines, gold).statistic, "spearman": spearmanr(cosines, gold).statistic}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--model", default="all-mpnet-base-v2", help="a model name, hub id or folder")
    parser.add_argument("--data-dir", default=str(DEFAULT_DATA), help="the folder holding sts-dev.csv")
    parser.add_argument("--batch-size", type=int, default=32, help="sentences a batch")
    args = parser.parse_args()
    log_to_stderr(logging.WARNING, progress_lines=True)
    from sentence_transformers import SentenceTransformer

    pairs = read_sets(args.data_dir, ("sts-dev",))["sts-dev"]
    sentences, first, second = distinct_sentences(pairs)
    gold = [pair.label for pair in pairs]
    ours = SentenceEncoder.from_pretrained(args.model, device="cpu", precision="fp32")
    start = time.perf_counter()
    mine = ours.encode(sentences, args.batch_size, "our encoder")
    our_seconds = time.perf_counter() - start
    theirs_model = SentenceTransformer(str(resolve_checkpoint(args.model)), device="cpu")
    start = time.perf_counter()
    theirs = theirs_model.encode(sentences, batch_size=args.batch_size, convert_to_tensor=True)
    their_seconds = time.perf_counter() - start
    print(f"{args.model}, STS dev ({len(pairs)} pairs, {len(sentences)} sentences), fp32 on {processor()}, "
          f"{torch.get_num_threads()} thread(s)")
    rows = {"ours (minbert)": {**scores(mine, first, second, gold), "seconds": our_seconds},
            "sentence-transformers": {**scores(theirs, first, second, gold), "seconds": their_seconds}}
    print(markdown_table(rows, ["pearson", "spearman", "seconds"], label="embeddings by", digits=4))
    print(f"largest difference between the two sides' embeddings: {(mine - theirs).abs().max().item():.2e}")


if __name__ == "__main__":
    main()
