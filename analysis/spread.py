"""spread: the cosine similarity of the STS training pairs in each gold-score bucket: Contrastive Tension
(Carlsson et al., 2021), Figure 3. Its lowest bucket's mean is the M of multitask_classifier.py --sts-target
cosine-range."""
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from analysis.figures import COLORS, POOLING_NAMES, legend_outside, new_figure, save
from analysis.report import EncoderFlags, encoders, label, short_names, write
from common.cli import flag
from common.tables import markdown_table
from data.readers import read_sts, sample_records
from evaluation.sts_benchmark import pair_cosines
from heads.similarity import LOWEST_BUCKET_WIDTH, MAX_SCORE, lowest_bucket_mean_cosine

BUCKET_WIDTH = LOWEST_BUCKET_WIDTH  # 0.25: 20 buckets over [0, 5]
NUM_BUCKETS = round(MAX_SCORE / BUCKET_WIDTH)


@dataclass
class SpreadConfig(EncoderFlags):
    """The cosine similarity of the STS training pairs (sts-train.csv) in 20 gold-score buckets of 0.25.

    Per bucket and encoder: the mean cosine and its standard deviation (Contrastive Tension, Carlsson et
    al., 2021, Figure 3), and M, the mean cosine of the lowest bucket (gold <= 0.25): the cosine floor that
    multitask_classifier.py --sts-target cosine-range sets when it starts from that encoder with the same
    pooling (its residual pair MLP starts as the identity).

        python analyze.py spread --models all-MiniLM-L6-v2,runs/multitask/best
    """
    out: str = flag("runs/analysis/spread", "folder for spread.png, spread.md and spread.json")


# ---- compute ----

def bucket_index(gold: torch.Tensor, width: float = BUCKET_WIDTH) -> torch.Tensor:
    """Bucket 0 holds gold scores in [0, w], bucket k > 0 holds (k w, (k + 1) w]: bucket 0 is the
    gold <= w of lowest_bucket_mean_cosine, so its mean is M."""
    return (torch.ceil(gold.double() / width) - 1).clamp(0, round(MAX_SCORE / width) - 1).long()


def bucket_statistics(cosines: torch.Tensor, gold: torch.Tensor, width: float = BUCKET_WIDTH) -> list[dict]:
    """Per bucket: its gold range, the number of pairs, the mean and the (population) standard deviation of
    their cosines; mean and std are None for an empty bucket."""
    index, cosines = bucket_index(gold, width), cosines.double()
    statistics = []
    for bucket in range(round(MAX_SCORE / width)):
        inside = cosines[index == bucket]
        statistics.append({"low": bucket * width, "high": (bucket + 1) * width, "count": len(inside),
                           "mean": inside.mean().item() if len(inside) else None,
                           "std": inside.std(correction=0).item() if len(inside) else None})
    return statistics


# ---- draw ----

def plot_spread(buckets: dict[str, list[dict]], lowest_means: dict[str, float | None], path: Path,
                title: str) -> Path:
    """Mean cosine per gold bucket with error bars of one standard deviation, encoders side by side within
    each bucket; above it, the pairs per bucket (the same pairs for every encoder)."""
    figure = new_figure(9, 6.5)
    counts, means = figure.subplots(2, 1, sharex=True, height_ratios=(1, 3))
    first = next(iter(buckets.values()))
    centres = np.array([(b["low"] + b["high"]) / 2 for b in first])
    width = first[0]["high"] - first[0]["low"]
    counts.bar(centres, [b["count"] for b in first], width=0.9 * width, color="0.6")
    counts.set(ylabel="pairs per bucket", title=title)
    counts.grid(axis="y", alpha=0.3)
    # Side by side: each encoder's points shifted within the bucket, so that error bars do not hide each other.
    offsets = (np.arange(len(buckets)) - (len(buckets) - 1) / 2) * 0.6 * width / max(len(buckets), 1)
    for number, (name, statistics) in enumerate(buckets.items()):
        mean = np.array([np.nan if b["mean"] is None else b["mean"] for b in statistics])
        std = np.array([np.nan if b["std"] is None else b["std"] for b in statistics])
        lowest = lowest_means.get(name)
        means.errorbar(centres + offsets[number], mean, yerr=std, marker="o", markersize=4, capsize=2,
                       color=COLORS(number % 10), label=name + ("" if lowest is None else f" (M = {lowest:.3f})"))
    means.set(xlabel=f"gold similarity score (0-5), buckets of {width:g}", ylabel="cosine similarity (mean ± 1 s.d.)",
              xticks=np.arange(0, 5.01, 0.5), xlim=(0, 5))
    means.grid(alpha=0.3)
    legend_outside(figure, means)
    return save(figure, path)


# ---- the subcommand: compute, draw, write ----

def run(config: SpreadConfig) -> list[Path]:
    path = Path(config.data_dir) / "sts-train.csv"
    pairs = sample_records(read_sts(path)[0], config.max_pairs)
    gold = torch.tensor([p.label for p in pairs])
    Path(config.out).mkdir(parents=True, exist_ok=True)
    buckets, lowest = {}, {}
    for name, encoder, tokenizer in encoders(config):
        for pooling in config.pooling_list:
            first, second = pair_cosines(encoder, tokenizer, pairs, pooling, config.max_length, config.batch_size)
            cosines = (first * second).sum(-1)
            row = label(name, pooling, config.pooling_list)
            buckets[row] = bucket_statistics(cosines, gold)
            lowest[row] = lowest_bucket_mean_cosine(cosines, gold) if buckets[row][0]["count"] else None
    pooling_note = "" if len(config.pooling_list) > 1 else f", {POOLING_NAMES[config.pooling_list[0]]}"
    picture = plot_spread(buckets, lowest, Path(config.out) / "spread.png",
                          title=f"Cosine similarity of {len(pairs):,} STS training pairs by gold score{pooling_note}")
    rows = {}
    for bucket in range(NUM_BUCKETS):
        first = next(iter(buckets.values()))[bucket]
        rows[f"{'[' if bucket == 0 else '('}{first['low']:.2f}, {first['high']:.2f}]"] = {
            "pairs": first["count"],
            **{name: "-" if s[bucket]["mean"] is None else f"{s[bucket]['mean']:.3f} ± {s[bucket]['std']:.3f}"
               for name, s in buckets.items()}}
    m_line = "; ".join(f"{name} {'-' if m is None else f'{m:.4f}'}" for name, m in lowest.items())
    markdown = (f"# Cosine similarity of STS training pairs by gold score{pooling_note}\n\n"
                f"{len(pairs):,} pairs of {path.name}; each cell: mean ± standard deviation of the pairs' cosines.\n\n"
                f"M (mean cosine of the pairs scored <= 0.25, the cosine floor of --sts-target cosine-range): "
                f"{m_line}\n\n" + markdown_table(rows, ["pairs", *buckets], label="gold score"))
    numbers = {"pairs": len(pairs), "M": lowest, "buckets": buckets,
               "models": dict(zip(short_names(config.model_list), config.model_list))}
    return [picture, *write(config.out, "spread", markdown, numbers, config)]
