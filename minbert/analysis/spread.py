"""spread: the cosine similarity of the STS training pairs in each gold-score bucket: Contrastive Tension
(Carlsson et al., 2021), Figure 3. Its lowest bucket's mean is the M of multitask_classifier.py --sts-target
cosine-range."""
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure

from minbert.analysis.figures import POOLING_NAMES, integer_ticks, model_style, new_figure, poolings_in
from minbert.analysis.flags import SpreadConfig
from minbert.analysis.report import Report, encoders, label, short_names, title_note
from minbert.common.tables import markdown_table
from minbert.data.readers import read_sts, sample_records
from minbert.evaluation.sts_benchmark import pair_cosines
from minbert.heads.similarity import LOWEST_BUCKET_WIDTH, MAX_SCORE, lowest_bucket_mean_cosine

BUCKET_WIDTH = LOWEST_BUCKET_WIDTH  # 0.25: 20 buckets over [0, 5]
NUM_BUCKETS = round(MAX_SCORE / BUCKET_WIDTH)


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

def draw_spread(buckets: dict[str, dict[str, list[dict]]], lowest_means: dict[str, dict[str, float | None]],
                title: str) -> Figure:
    """buckets[encoder][pooling] = bucket_statistics: the mean cosine per gold bucket with error bars of one
    standard deviation, a panel per encoder (rows) and pooling (columns), all on the same axes; above each
    column, the pairs per bucket (the same pairs in every panel)."""
    # A panel each, not every encoder in one with their points dodged: within a bucket 0.25 wide, four encoders'
    # markers stand about 4 pt apart, as wide as a marker or an error bar's cap, and a thicket of bars is all one
    # sees. Alone in its panel, an encoder's spread reads at once; the shared axes and their grid still compare
    # the encoders, row against row.
    poolings = poolings_in(buckets)
    figure = new_figure(max(9.0, 5.0 * len(poolings)), 2.0 + 2.6 * len(buckets))
    grid = figure.subplots(1 + len(buckets), len(poolings), sharex=True, squeeze=False,
                           height_ratios=(1, *[2.5] * len(buckets)))
    first = next(iter(next(iter(buckets.values())).values()))
    centres = np.array([(b["low"] + b["high"]) / 2 for b in first])
    width = first[0]["high"] - first[0]["low"]
    for column, counts in enumerate(grid[0]):
        counts.bar(centres, [b["count"] for b in first], width=0.9 * width, color="0.6")
        if column:
            counts.sharey(grid[0, 0])
        integer_ticks(counts.yaxis)
        counts.grid(axis="y", alpha=0.3)
        counts.set(ylabel="pairs per bucket" if column == 0 else "")
    for number, (encoder, by_pooling) in enumerate(buckets.items()):
        for column, pooling in enumerate(poolings):
            panel = grid[1 + number, column]
            if panel is not grid[1, 0]:
                panel.sharey(grid[1, 0])
            panel.grid(alpha=0.3)
            if pooling not in by_pooling:
                continue
            statistics, lowest = by_pooling[pooling], lowest_means[encoder][pooling]
            mean = np.array([np.nan if b["mean"] is None else b["mean"] for b in statistics])
            std = np.array([np.nan if b["std"] is None else b["std"] for b in statistics])
            panel.errorbar(centres, mean, yerr=std, **model_style(number), markersize=4, capsize=2)
            panel.set_title(f"{encoder}, {POOLING_NAMES[pooling]}: "
                            + ("no pairs scored <= 0.25" if lowest is None else f"M = {lowest:.3f}"), fontsize="medium")
            panel.set(ylabel="cosine (mean ± 1 s.d.)" if column == 0 else "")
    for panel in grid[-1]:
        panel.set(xlabel=f"gold similarity score (0-5), buckets of {width:g}", xticks=np.arange(0, 5.01, 0.5),
                  xlim=(0, 5))
    figure.suptitle(title)
    return figure


# ---- the subcommand: compute and draw ----

def build(config: SpreadConfig) -> Report:
    path = Path(config.data_dir) / "sts-train.csv"
    pairs = sample_records(read_sts(path)[0], config.max_pairs)
    gold = torch.tensor([p.label for p in pairs])
    by_encoder, lowest_by_encoder = {}, {}  # encoder -> pooling -> bucket_statistics, M
    for name, encoder, tokenizer in encoders(config):
        for pooling in config.pooling_list:
            first, second = pair_cosines(encoder, tokenizer, pairs, pooling, config.max_length, config.batch_size,
                                         f"{name}, {pooling} pooling", config.precision)
            cosines = (first * second).sum(-1)
            statistics = bucket_statistics(cosines, gold)
            by_encoder.setdefault(name, {})[pooling] = statistics
            lowest_by_encoder.setdefault(name, {})[pooling] = (lowest_bucket_mean_cosine(cosines, gold)
                                                               if statistics[0]["count"] else None)
    pooling_note = title_note(config.pooling_list)
    picture = draw_spread(by_encoder, lowest_by_encoder,
                          title=f"Cosine similarity of {len(pairs):,} STS training pairs by gold score{pooling_note}")
    # the table's and the JSON's columns: an encoder's label, with its pooling where there are several
    buckets = {label(name, pooling, config.pooling_list): statistics
               for name, by_pooling in by_encoder.items() for pooling, statistics in by_pooling.items()}
    lowest = {label(name, pooling, config.pooling_list): m
              for name, by_pooling in lowest_by_encoder.items() for pooling, m in by_pooling.items()}
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
    return Report({"spread.png": picture}, markdown, numbers)
