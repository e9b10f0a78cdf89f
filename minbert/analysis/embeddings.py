"""embeddings: alignment against uniformity on STS dev (Wang and Isola, 2020), as SimCSE (Gao, Yao and Chen,
2021) plots them."""
from matplotlib.figure import Figure

from minbert.analysis.flags import EmbeddingsConfig
from minbert.analysis.figures import POOLING_NAMES, legend_outside, model_style, new_figure, pooling_panels, poolings_in
from minbert.analysis.report import Report, encoders, label, short_names, spearman_x100, title_note
from minbert.common.tables import markdown_table
from minbert.data.readers import sample_records
from minbert.evaluation.sts_benchmark import (
    POSITIVE_SCORE, alignment_and_uniformity, pair_cosines, positive_pairs, read_sets)


# ---- draw (the numbers are evaluation/sts_benchmark.py's) ----

def draw_alignment_uniformity(points: dict[str, dict[str, dict[str, float]]], title: str) -> Figure:
    """points[encoder][pooling] = {alignment, uniformity, sts-dev}: uniformity across, alignment up (SimCSE's
    Figure 2), a panel per pooling on the same axes, and each encoder's point in its colour and marker
    (model_style); lower-left is better. The legend gives each encoder's STS dev Spearman per pooling."""
    poolings = poolings_in(points)
    figure = new_figure(max(8.0, 5.0 * len(poolings)), 6)
    panels = pooling_panels(figure, poolings)
    for number, (encoder, by_pooling) in enumerate(points.items()):
        scores = ", ".join((f"{POOLING_NAMES[pooling]} " if len(poolings) > 1 else "") + f"{point['sts-dev']:.1f}"
                           for pooling, point in by_pooling.items())
        for panel, pooling in zip(panels, poolings):
            if pooling in by_pooling:
                # Hollow markers of different shapes: two encoders at almost the same point both stay visible.
                panel.plot(by_pooling[pooling]["uniformity"], by_pooling[pooling]["alignment"],
                           **{**model_style(number), "linestyle": "none"}, markersize=10, markerfacecolor="none",
                           markeredgewidth=2, zorder=3, label=f"{encoder} (STS dev {scores})")
    for panel, pooling in zip(panels, poolings):
        panel.set(xlabel="uniformity: log E exp(-2 ||f(x) - f(y)||²), lower is better",
                  title=POOLING_NAMES[pooling] if len(poolings) > 1 else "")
        panel.margins(0.15)
        panel.grid(alpha=0.3)
    panels[0].set(ylabel="alignment: E ||f(x) - f(x⁺)||², lower is better")
    figure.suptitle(title)
    legend_outside(figure, panels[0], below=True)
    return figure


# ---- the subcommand: compute and draw ----

def build(config: EmbeddingsConfig) -> Report:
    pairs = sample_records(read_sets(config.data_dir, ("sts-dev",))["sts-dev"], config.max_pairs)
    points = {}
    for name, encoder, tokenizer in encoders(config):
        for pooling in config.pooling_list:
            first, second = pair_cosines(encoder, tokenizer, pairs, pooling, config.max_length, config.batch_size,
                                         f"{name}, {pooling} pooling", config.precision)
            points.setdefault(name, {})[pooling] = {
                **alignment_and_uniformity(first, second, pairs),
                "sts-dev": spearman_x100((first * second).sum(-1), [p.label for p in pairs])}
    rows = {label(name, pooling, config.pooling_list): point
            for name, by_pooling in points.items() for pooling, point in by_pooling.items()}
    pooling_note = title_note(config.pooling_list)
    # What each measure is taken over (alignment_and_uniformity): the positive pairs; both sentences of every pair.
    positives, sentences = len(positive_pairs(pairs)), 2 * len(pairs)
    picture = draw_alignment_uniformity(
        points, title=f"Alignment and uniformity on STS dev{pooling_note}\nalignment over the {positives:,} pairs "
                      f"scored ≥ {POSITIVE_SCORE}; uniformity over the {sentences:,} sentences of all {len(pairs):,} "
                      f"pairs")
    markdown = (f"# Alignment and uniformity on STS dev{pooling_note}\n\n{len(pairs):,} pairs; alignment over the "
                f"{positives:,} scored >= {POSITIVE_SCORE}, uniformity over their {sentences:,} sentences (both of "
                f"every pair: a sentence in two pairs counts twice); lower is better for both. sts-dev: Spearman x 100 "
                f"of cosine similarity.\n\n"
                + markdown_table(rows, ["alignment", "uniformity", "sts-dev"], label="encoder", digits=3))
    numbers = {"pairs": len(pairs), "positive_pairs": positives, "sentences": sentences, "points": points,
               "models": dict(zip(short_names(config.model_list), config.model_list))}
    return Report({"embeddings.png": picture}, markdown, numbers)
