"""curves: training loss per task and dev metrics over optimizer steps, for one or several runs, from their
metrics.jsonl."""
import dataclasses
import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.figure import Figure

from minbert.analysis.figures import counted, integer_ticks, legend_outside, model_style, new_figure
from minbert.analysis.flags import CurvesConfig
from minbert.analysis.report import Report, short_names
from minbert.common.errors import DataError
from minbert.common.run_folder import RunFolder
from minbert.common.tables import markdown_table
from minbert.tasks import REGISTRY, Classification, Paraphrase, Similarity, selection_score

log = logging.getLogger(__name__)
METRIC_AXES = {"accuracy": "accuracy (fraction of dev examples)", "pearson": "Pearson r of predicted and gold scores"}
# Each kind of task's training loss (its Task.loss), for the axis; a new kind of task (tasks.py) adds its own.
LOSS_AXES = {Classification: "cross-entropy (nats)", Paraphrase: "binary cross-entropy (nats)",
             Similarity: "squared error of the 0-5 score"}
# metric -> (title, y axis, table header): each task's own, then the course's two scores (tasks.summary)
DEV_METRICS = {
    **{name: (f"Dev {task.title} {task.metric_name}", METRIC_AXES[task.metric_name],
              f"{task.title} {'acc' if task.metric_name == 'accuracy' else 'r'}") for name, task in REGISTRY.items()},
    "overall": ("Dev overall score (the course leaderboard's)", "mean(SST acc, Quora acc, (STS r + 1) / 2)",
                "overall"),
    "mean": ("Dev mean of the three metrics", "mean(SST acc, Quora acc, STS r)", "mean")}


# ---- compute ----

@dataclass
class RunCurves:
    """A run's metrics.jsonl as series of (step, value), each sorted by step."""
    train_loss: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # task -> series
    dev: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # sst, para, sts, overall, mean -> series
    train_loss_from: str = "train lines"  # or "eval lines" (older runs: the mean loss of the epoch so far)
    train_lines: int = 0
    eval_lines: int = 0


def read_metrics(path: Path) -> tuple[list[dict], list[dict]]:
    """(train lines, eval lines) of a metrics.jsonl. "event": "train" lines are written every --log-every
    steps; evaluation lines carry "event": "eval" or, in older runs, no event; the "event": "finish" line draws
    nothing. A line that is not a JSON object with a step (a run killed while writing leaves half a line) is
    skipped and reported."""
    if not path.is_file():
        raise DataError(f"{path}: file not found" if not path.exists() else f"{path}: not a file")
    train, evals, skipped = [], [], []
    for number, text in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        if not text.strip():
            continue
        try:
            line = json.loads(text)
        except json.JSONDecodeError:
            line = None
        if not isinstance(line, dict) or not isinstance(line.get("step"), int):
            skipped.append(number)
        elif line.get("event") == "train" and isinstance(line.get("loss"), dict):
            train.append(line)
        elif line.get("event", "eval") == "eval" and isinstance(line.get("dev"), dict):
            evals.append(line)
        elif line.get("event") == "finish":  # the trainer's last line: the time its test predictions took
            continue
        else:
            skipped.append(number)
    if skipped:
        log.warning("%s: skipped %d line(s) that are neither train nor eval lines: %s", path, len(skipped),
                    ", ".join(map(str, skipped[:5])) + (" ..." if len(skipped) > 5 else ""))
    if not train and not evals:
        raise DataError(f"{path}: no train or eval lines (one JSON object a line, with a step)")
    return train, evals


def _series(lines: list[dict], key: str) -> dict[str, list[tuple[int, float]]]:
    # A resumed run repeats the steps after its last checkpoint: the later line of a step wins.
    by_metric: dict[str, dict[int, float]] = {}
    for line in lines:
        for metric, value in line[key].items():
            if isinstance(value, (int, float)) and math.isfinite(value):
                by_metric.setdefault(metric, {})[line["step"]] = float(value)
    return {metric: sorted(values.items()) for metric, values in by_metric.items()}


def with_overall(evals: list[dict], dev: dict[str, list[tuple[int, float]]]) -> dict[str, list[tuple[int, float]]]:
    """The dev series with the overall score each evaluation picked best/ by, where its lines do not hold it (a run
    of fewer than the three course tasks): the mean of its tasks' scores on [0, 1], as its trainer computed it."""
    if "overall" in dev:
        return dev
    scored = [{"step": line["step"], "scores": {"overall": selection_score(line["dev"])}} for line in evals
              if any(name in REGISTRY for name in line["dev"])]
    return dev | _series(scored, "scores") if scored else dev


def run_curves(train: list[dict], evals: list[dict]) -> RunCurves:
    """Train loss per task from the train lines, or from the eval lines' train_loss when there are none;
    dev metrics from the eval lines."""
    from_train = bool(train)
    return RunCurves(train_loss=_series(train, "loss") if from_train else
                     _series([e for e in evals if isinstance(e.get("train_loss"), dict)], "train_loss"),
                     dev=with_overall(evals, _series(evals, "dev")),
                     train_loss_from="train lines" if from_train else "eval lines",
                     train_lines=len(train), eval_lines=len(evals))


# ---- draw ----

def draw_curve(series: dict[str, list[tuple[int, float]]], ylabel: str, title: str) -> Figure:
    """One line per run over optimizer steps, in the run's colour, line style and marker (model_style, by its place
    in `series`: a run without points keeps its place, and so every run its look, and draws nothing). A marker on
    every point where there are few (evaluations), on every tenth of the line where there are many (train lines),
    so that markers still tell the runs apart. Steps are whole numbers, and so are the ticks, however few the
    points (a single evaluation)."""
    figure = new_figure(8, 5)
    axes = figure.subplots()
    for number, (run_name, points) in enumerate(series.items()):
        if points:
            steps, values = zip(*points)
            axes.plot(steps, values, **model_style(number), markersize=5,
                      markevery=None if len(points) <= 30 else 0.1, label=run_name)
    axes.set(xlabel="optimizer step", ylabel=ylabel, title=title)
    integer_ticks(axes.xaxis)
    axes.grid(alpha=0.3)
    legend_outside(figure, axes, below=True)
    return figure


# ---- the subcommand: compute and draw ----

def loss_label(name: str, curves: RunCurves, task: str) -> str:
    """A run's label in a training-loss picture: what its points are and how many."""
    points = len(curves.train_loss.get(task, []))
    if curves.train_loss_from == "eval lines":
        return f"{name} (epoch mean so far, {counted(points, 'evaluation')})"
    return f"{name} ({counted(points, 'train line')})"


def build(config: CurvesConfig) -> Report:
    paths = [Path(spec) if spec.endswith(".jsonl") else RunFolder(spec).metrics_log for spec in config.run_list]
    runs = {name: run_curves(*read_metrics(path))
            for name, path in zip(short_names([str(path.parent) for path in paths]), paths)}
    pictures = {}
    # Every run in every picture's series, with or without points: a run's look is its place among the runs.
    for task, spec in REGISTRY.items():
        series = {loss_label(name, curves, task): curves.train_loss.get(task, []) for name, curves in runs.items()}
        if any(series.values()):
            pictures[f"curves-train-loss-{task}.png"] = draw_curve(
                series, ylabel=f"training loss: {LOSS_AXES[type(spec)]}", title=f"{spec.title} training loss")
    for metric, (title, ylabel, _) in DEV_METRICS.items():
        series = {f"{name} ({counted(len(curves.dev.get(metric, [])), 'evaluation')})": curves.dev.get(metric, [])
                  for name, curves in runs.items()}
        if any(series.values()):
            pictures[f"curves-dev-{metric}.png"] = draw_curve(series, ylabel=ylabel, title=title)
    rows = {}
    for name, curves in runs.items():
        overall = curves.dev.get("overall", [])
        best_step, best = max(overall, key=lambda point: point[1]) if overall else (None, None)
        rows[name] = {"train lines": curves.train_lines, "eval lines": curves.eval_lines,
                      "loss from": curves.train_loss_from,
                      **{metric: series[-1][1] for metric, series in curves.dev.items()},
                      "best overall": best if best is not None else "-",
                      "at step": best_step if best_step is not None else "-"}
    markdown = ("# Training curves\n\nThe dev columns are each run's last evaluation; training loss is read from "
                "the train lines, or (runs without them) from the evaluation lines' mean loss of the epoch so far.\n\n"
                + markdown_table(rows, ["train lines", "eval lines", "loss from", *DEV_METRICS, "best overall",
                                        "at step"], label="run", digits=4,
                                 headers=["train lines", "eval lines", "loss from",
                                          *(header for _, _, header in DEV_METRICS.values()), "best overall",
                                          "at step"]))
    numbers = {"runs": {name: dataclasses.asdict(curves) for name, curves in runs.items()}, "pictures": list(pictures)}
    return Report(pictures, markdown, numbers)
