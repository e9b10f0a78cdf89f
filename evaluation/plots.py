"""The pictures of `python -m evaluation.analyze`: each function draws numbers evaluation/analysis.py computed.

Matplotlib figures on the Agg canvas (files only, no display, none of pyplot's global state); constrained
layout and legends outside the axes, so that labels never overlap what they label.
"""
import textwrap
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

POOLING_NAMES = {"mean": "mean pooling", "cls": "[CLS]", "max": "max pooling", "pooler": "pooler output"}
POOLING_STYLES = {"mean": ("-", "o"), "cls": ("--", "s"), "max": (":", "^"), "pooler": ("-.", "D")}
COLORS = matplotlib.colormaps["tab10"]


def _figure(width: float, height: float) -> Figure:
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _save(figure: Figure, path: Path) -> Path:
    figure.savefig(path, dpi=150)
    return path


def _legend_outside(figure, axes, below: bool = False) -> None:
    # Outside the axes, so the lines stay visible however many there are; below (in two columns) where the
    # labels are long, so that the axes keep the figure's width.
    figure.legend(*axes.get_legend_handles_labels(), loc="outside lower center" if below else "outside right upper",
                  ncols=2 if below else 1, fontsize="small")


def plot_layers(results: dict[str, dict[str, list[float]]], path: Path, ylabel: str, title: str,
                note: str = "") -> Path:
    """results[encoder][pooling] = one value per layer: a colour per encoder, a line style per pooling; `note`
    goes under the axes."""
    figure = _figure(9, 5)
    axes = figure.subplots()
    for number, (encoder, by_pooling) in enumerate(results.items()):
        for pooling, values in by_pooling.items():
            style, marker = POOLING_STYLES[pooling]
            axes.plot(range(len(values)), values, linestyle=style, marker=marker, color=COLORS(number % 10),
                      label=f"{encoder}, {POOLING_NAMES[pooling]}")
    axes.set(xlabel="layer (0 = embedding layer)", ylabel=ylabel, title=title)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.grid(alpha=0.3)
    if note:
        figure.supxlabel(note, fontsize="small", color="0.3")
    _legend_outside(figure, axes)
    return _save(figure, path)


def plot_spread(buckets: dict[str, list[dict]], lowest_means: dict[str, float | None], path: Path,
                title: str) -> Path:
    """Mean cosine per gold bucket with error bars of one standard deviation, encoders side by side within
    each bucket; above it, the pairs per bucket (the same pairs for every encoder)."""
    figure = _figure(9, 6.5)
    counts, means = figure.subplots(2, 1, sharex=True, height_ratios=(1, 3))
    first = next(iter(buckets.values()))
    centres = np.array([(b["low"] + b["high"]) / 2 for b in first])
    width = first[0]["high"] - first[0]["low"]
    counts.bar(centres, [b["count"] for b in first], width=0.9 * width, color="0.6")
    counts.set(ylabel="pairs per bucket", title=title)
    counts.grid(axis="y", alpha=0.3)
    # Side by side: each encoder's points shifted within the bucket, so that error bars do not hide each other.
    offsets = (np.arange(len(buckets)) - (len(buckets) - 1) / 2) * 0.6 * width / max(len(buckets), 1)
    for number, (label, statistics) in enumerate(buckets.items()):
        mean = np.array([np.nan if b["mean"] is None else b["mean"] for b in statistics])
        std = np.array([np.nan if b["std"] is None else b["std"] for b in statistics])
        lowest = lowest_means.get(label)
        means.errorbar(centres + offsets[number], mean, yerr=std, marker="o", markersize=4, capsize=2,
                       color=COLORS(number % 10), label=label + ("" if lowest is None else f" (M = {lowest:.3f})"))
    means.set(xlabel=f"gold similarity score (0-5), buckets of {width:g}", ylabel="cosine similarity (mean ± 1 s.d.)",
              xticks=np.arange(0, 5.01, 0.5), xlim=(0, 5))
    means.grid(alpha=0.3)
    _legend_outside(figure, means)
    return _save(figure, path)


def plot_alignment_uniformity(points: dict[str, dict[str, dict[str, float]]], path: Path, title: str) -> Path:
    """points[encoder][pooling] = {alignment, uniformity, sts-dev}: uniformity across, alignment up (SimCSE's
    Figure 2), a colour per encoder and a marker per pooling; lower-left is better."""
    figure = _figure(8, 6)
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
    _legend_outside(figure, axes, below=True)
    return _save(figure, path)


def _confusion_panel(axes, counts: np.ndarray, fractions: np.ndarray, classes: list[str], accuracy: float,
                     title: str) -> None:
    image = axes.imshow(fractions, cmap="Blues", vmin=0, vmax=1)
    for gold in range(len(classes)):
        for predicted in range(len(classes)):
            axes.text(predicted, gold, f"{counts[gold, predicted]}\n{fractions[gold, predicted]:.0%}", ha="center",
                      va="center", fontsize="small", color="white" if fractions[gold, predicted] > 0.5 else "black")
    names = [textwrap.fill(name, 9) for name in classes]
    axes.set_xticks(range(len(classes)), names, fontsize="small")
    axes.set_yticks(range(len(classes)), names, fontsize="small")
    axes.set(xlabel="predicted class", ylabel="gold class", title=f"{title} dev: counts and % of the gold class\n"
                                                                  f"(accuracy {accuracy:.3f})")
    axes.figure.colorbar(image, ax=axes, shrink=0.8, label="fraction of the gold class")


def _paraphrase_panel(axes, p_paraphrase: np.ndarray, gold: np.ndarray, accuracy: float, title: str) -> None:
    # The two gold classes' bars side by side in each bin (overlaid, they would hide each other).
    axes.hist([p_paraphrase[gold == 0], p_paraphrase[gold == 1]], bins=np.linspace(0, 1, 21),
              label=["gold: not paraphrase (right of 0.5: false positive)",
                     "gold: paraphrase (left of 0.5: false negative)"])
    axes.axvline(0.5, color="black", linestyle="--", linewidth=1)
    axes.set(xlabel="predicted P(paraphrase)", ylabel="dev pairs", xlim=(0, 1),
             title=f"{title} dev: predicted probability by gold label\n(accuracy {accuracy:.3f})")
    # Under the axes: wherever the bars are, the legend is not on them.
    axes.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.16))


def _similarity_panel(axes, predicted: np.ndarray, gold: np.ndarray, r: float, title: str) -> None:
    axes.scatter(gold, predicted, s=8, alpha=0.4)
    axes.plot([0, 5], [0, 5], color="black", linestyle="--", linewidth=1, label="predicted = gold")
    axes.set(xlabel="gold similarity (0-5)", ylabel="predicted similarity (0-5)", xlim=(-0.2, 5.2), ylim=(-0.2, 5.2),
             title=f"{title} dev: predicted against gold\n(Pearson r = {r:.3f})")
    axes.set_aspect("equal")
    axes.legend(fontsize="small", loc="upper left")


PANELS = {"confusion": _confusion_panel, "paraphrase": _paraphrase_panel, "similarity": _similarity_panel}


def plot_errors(path: Path, title: str, panels: list[tuple[str, dict]]) -> Path:
    """A panel per task the run has, (kind, arguments): confusion = {counts, fractions, classes, accuracy, title},
    paraphrase = {p_paraphrase, gold, accuracy, title}, similarity = {predicted, gold, r, title}."""
    panels = [(PANELS[kind], arguments) for kind, arguments in panels]
    # Larger type than the other pictures: three panels side by side are shrunk the most in a report.
    with matplotlib.rc_context({"font.size": 12}):
        figure = _figure(6 * len(panels), 6.5)
        for panel, (draw, arguments) in zip(figure.subplots(1, len(panels), squeeze=False)[0], panels):
            draw(panel, **arguments)
        figure.suptitle(title)
        return _save(figure, path)


def plot_curve(series: dict[str, list[tuple[int, float]]], path: Path, ylabel: str, title: str) -> Path:
    """One line per run over optimizer steps; markers where there are few points (evaluations)."""
    figure = _figure(8, 5)
    axes = figure.subplots()
    for number, (run, points) in enumerate(series.items()):
        steps, values = zip(*points)
        axes.plot(steps, values, marker="o" if len(points) <= 30 else None, markersize=4,
                  color=COLORS(number % 10), label=run)
    axes.set(xlabel="optimizer step", ylabel=ylabel, title=title)
    axes.grid(alpha=0.3)
    _legend_outside(figure, axes, below=True)
    return _save(figure, path)
