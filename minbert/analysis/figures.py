"""What the pictures share: Matplotlib figures on the Agg canvas (files only, no display, none of pyplot's global
state), constrained layout, legends outside the axes (so that labels never overlap what they label), one look
per model (encoder or run) across every picture, integer ticks on the axes that count, and one panel per pooling
where a picture has several (a model's look is taken, and a line per model and pooling would be a thicket)."""
from pathlib import Path

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

POOLING_NAMES = {"mean": "mean pooling", "cls": "[CLS]", "max": "max pooling", "pooler": "pooler output"}
COLORS = matplotlib.colormaps["tab10"]
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
# The four named line styles, then three dash patterns (on, off, ... in line widths) unlike any of them.
LINE_STYLES = ("-", "--", ":", "-.", (0, (6, 2, 1, 2, 1, 2)), (0, (10, 3)), (0, (1, 1)))


def model_style(number: int) -> dict:
    """The number-th model's colour, line style and marker (keywords of Axes.plot and Axes.errorbar), the same in
    every picture. Not colour alone: similar models' lines lie on each other, and a picture may be printed in grey.
    Any two of the first 7 models differ in all three; of the first 10 in colour and marker; of the first 70 in
    (line style, marker), as 7 and 10 share no factor."""
    return {"color": COLORS(number % COLORS.N), "linestyle": LINE_STYLES[number % len(LINE_STYLES)],
            "marker": MARKERS[number % len(MARKERS)]}


def counted(number: int, noun: str) -> str:
    """'1 evaluation', '1,234 evaluations': what a title or label counts."""
    return f"{number:,} {noun}" + ("" if number == 1 else "s")


def integer_ticks(axis) -> None:
    """Ticks at whole numbers only, on an axis of steps, layers or counts. min_n_ticks=1: MaxNLocator's default
    (2) gives up on integers, and ticks 9.45 .. 10.65, where the view holds one whole number (a single evaluation
    at step 10); the steps are AutoLocator's, so that longer axes tick as they did."""
    axis.set_major_locator(MaxNLocator(nbins="auto", steps=[1, 2, 2.5, 5, 10], integer=True, min_n_ticks=1))


def poolings_in(by_model: dict[str, dict]) -> list[str]:
    """The poolings of {model: {pooling: ...}}, in the order first met: a panel (or column) each."""
    return list(dict.fromkeys(pooling for by_pooling in by_model.values() for pooling in by_pooling))


def pooling_panels(figure: Figure, poolings: list[str]) -> list:
    """A row of panels on the same axes, one per pooling."""
    return figure.subplots(1, len(poolings), sharex=True, sharey=True, squeeze=False)[0]


def new_figure(width: float, height: float) -> Figure:
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def save(figure: Figure, path: Path) -> Path:
    figure.savefig(path, dpi=150)
    return path


def legend_outside(figure, axes, below: bool = False) -> None:
    # Outside the axes, so the lines stay visible however many there are; below (in two columns) where the
    # labels are long, so that the axes keep the figure's width.
    figure.legend(*axes.get_legend_handles_labels(), loc="outside lower center" if below else "outside right upper",
                  ncols=2 if below else 1, fontsize="small")
