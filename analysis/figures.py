"""What the pictures share: Matplotlib figures on the Agg canvas (files only, no display, none of pyplot's global
state), constrained layout, legends outside the axes (so that labels never overlap what they label), and one
colour per encoder or run and one style per pooling across every picture."""
from pathlib import Path

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

POOLING_NAMES = {"mean": "mean pooling", "cls": "[CLS]", "max": "max pooling", "pooler": "pooler output"}
POOLING_STYLES = {"mean": ("-", "o"), "cls": ("--", "s"), "max": (":", "^"), "pooler": ("-.", "D")}
COLORS = matplotlib.colormaps["tab10"]


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
