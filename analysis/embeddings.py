"""embeddings: alignment against uniformity on STS dev (Wang and Isola, 2020), as SimCSE (Gao, Yao and Chen,
2021) plots them."""
from dataclasses import dataclass
from pathlib import Path

from analysis.figures import COLORS, POOLING_NAMES, POOLING_STYLES, legend_outside, new_figure, save
from analysis.report import EncoderFlags, encoders, label, short_names, spearman_x100, write
from common.cli import flag
from common.tables import markdown_table
from data.readers import sample_records
from evaluation.sts_benchmark import alignment_and_uniformity, pair_cosines, read_sets


@dataclass
class EmbeddingsConfig(EncoderFlags):
    """Alignment against uniformity on STS dev (Wang and Isola, 2020), one labelled point per encoder.

    Alignment: the mean squared distance of the unit-length embeddings of pairs scored >= 4; uniformity:
    log E exp(-2 squared distance) over all sentences; lower is better for both (SimCSE's picture, Gao,
    Yao and Chen, 2021). The table adds each encoder's STS dev Spearman.

        python analyze.py embeddings --models all-MiniLM-L6-v2,runs/multitask/best --poolings cls,mean
    """
    out: str = flag("runs/analysis/embeddings", "folder for embeddings.png, embeddings.md and embeddings.json")


# ---- draw (the numbers are evaluation/sts_benchmark.py's) ----

def plot_alignment_uniformity(points: dict[str, dict[str, dict[str, float]]], path: Path, title: str) -> Path:
    """points[encoder][pooling] = {alignment, uniformity, sts-dev}: uniformity across, alignment up (SimCSE's
    Figure 2), a colour per encoder and a marker per pooling; lower-left is better."""
    figure = new_figure(8, 6)
    axes = figure.subplots()
    for number, (encoder, by_pooling) in enumerate(points.items()):
        for pooling, point in by_pooling.items():
            # Hollow markers: two encoders at almost the same point both stay visible.
            axes.scatter(point["uniformity"], point["alignment"], s=80, marker=POOLING_STYLES[pooling][1],
                         facecolors="none", edgecolors=COLORS(number % 10), linewidths=2, zorder=3,
                         label=f"{encoder}, {POOLING_NAMES[pooling]} (STS dev {point['sts-dev']:.1f})")
    axes.set(xlabel="uniformity: log E exp(-2 ||f(x) - f(y)||²), lower is better",
             ylabel="alignment: E ||f(x) - f(x⁺)||², lower is better", title=title)
    axes.margins(0.15)
    axes.grid(alpha=0.3)
    legend_outside(figure, axes, below=True)
    return save(figure, path)


# ---- the subcommand: compute, draw, write ----

def run(config: EmbeddingsConfig) -> list[Path]:
    pairs = sample_records(read_sets(config.data_dir, ("sts-dev",))["sts-dev"], config.max_pairs)
    Path(config.out).mkdir(parents=True, exist_ok=True)
    points = {}
    for name, encoder, tokenizer in encoders(config):
        for pooling in config.pooling_list:
            first, second = pair_cosines(encoder, tokenizer, pairs, pooling, config.max_length, config.batch_size)
            points.setdefault(name, {})[pooling] = {
                **alignment_and_uniformity(first, second, pairs),
                "sts-dev": spearman_x100((first * second).sum(-1), [p.label for p in pairs])}
    rows = {label(name, pooling, config.pooling_list): point
            for name, by_pooling in points.items() for pooling, point in by_pooling.items()}
    pooling_note = "" if len(config.pooling_list) > 1 else f", {POOLING_NAMES[config.pooling_list[0]]}"
    picture = plot_alignment_uniformity(points, Path(config.out) / "embeddings.png",
                                        title=f"Alignment and uniformity of {len(pairs)} STS dev pairs{pooling_note}")
    positives = sum(p.label >= 4 for p in pairs)
    markdown = (f"# Alignment and uniformity on STS dev{pooling_note}\n\n{len(pairs)} pairs; alignment over the "
                f"{positives} scored >= 4, uniformity over all their sentences; lower is better for both. sts-dev: "
                f"Spearman x 100 of cosine similarity.\n\n"
                + markdown_table(rows, ["alignment", "uniformity", "sts-dev"], label="encoder", digits=3))
    numbers = {"pairs": len(pairs), "positive_pairs": positives, "points": points,
               "models": dict(zip(short_names(config.model_list), config.model_list))}
    return [picture, *write(config.out, "embeddings", markdown, numbers, config)]
