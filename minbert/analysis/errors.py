"""errors: a finished multi-task run's dev errors, each task's as its kind calls for (task_errors, error_report,
error_panel: a classification's confusion matrix, a paraphrase task's false positives and negatives, a similarity
task's predictions against gold), and whether errors fall on the sentences the tasks share. A new kind of task
(tasks.py) registers its three here (and the axis of its training loss in analysis/curves.py)."""
import functools
import textwrap
from collections.abc import Callable
from itertools import combinations
from pathlib import Path

import matplotlib
import numpy as np
import torch
from matplotlib.figure import Figure

from minbert.analysis.figures import counted, integer_ticks, new_figure
from minbert.analysis.flags import ErrorsConfig
from minbert.analysis.report import Report, short_names
from minbert.common.errors import DataError
from minbert.common.metrics import accuracy, confusion_matrix, pearson, row_normalised
from minbert.common.tables import cell, markdown_table
from minbert.evaluation.outputs import dev_records, load_member
from minbert.tasks import REGISTRY, Classification, Paraphrase, Similarity, Task

FEW_SHARED = 30  # below this many sentences shared by two dev sets, their errors say nothing about each other


# ---- compute and report: each kind of task's errors ----

@functools.singledispatch
def task_errors(task: Task, records: list, soft: torch.Tensor, tolerance: float) -> dict:
    """The numbers of a task's errors on dev records; "wrong": one bool an example (for the tasks' comparison).
    tolerance: how far a regression's prediction may be from gold before it counts as wrong."""
    raise NotImplementedError(f"no error analysis for a {type(task).__name__} task")


@functools.singledispatch
def error_report(task: Task, result: dict, top: int) -> list[str]:
    """Markdown sections of task_errors(...)'s result; lists cut to `top` rows."""
    raise NotImplementedError(f"no error report for a {type(task).__name__} task")


@functools.singledispatch
def error_panel(task: Task, result: dict, records: list, soft: torch.Tensor) -> tuple[Callable, dict]:
    """Its panel of the errors picture: the drawing (below) and its arguments."""
    raise NotImplementedError(f"no error panel for a {type(task).__name__} task")


@task_errors.register
def _classification_errors(task: Classification, records, soft, tolerance):
    """Accuracy, the confusion matrix (counts and row-normalised), and the misclassified sentences, the most
    confident first (confidence: the predicted class's probability)."""
    predicted, gold = task.hard(soft).tolist(), [r.label for r in records]
    counts = confusion_matrix(gold, predicted, task.num_classes)
    misclassified = [{"id": r.id, "sentence": r.sentence, "gold": g, "predicted": p, "confidence": soft[i, p].item()}
                     for i, (r, g, p) in enumerate(zip(records, gold, predicted)) if g != p]
    return {"accuracy": accuracy(predicted, gold), "confusion": counts.tolist(),
            "confusion_normalised": row_normalised(counts).tolist(),
            "misclassified": sorted(misclassified, key=lambda e: -e["confidence"]),
            "wrong": [g != p for g, p in zip(gold, predicted)]}


@error_report.register
def _classification_report(task: Classification, result, top):
    names = [f"{number} {name}" for number, name in enumerate(task.class_names)]
    counts = {names[g]: dict(zip(names, row)) for g, row in enumerate(result["confusion"])}
    fractions = {names[g]: dict(zip(names, row)) for g, row in enumerate(result["confusion_normalised"])}
    wrong = {e["id"]: {**e, "sentence": cell(e["sentence"]), "gold": names[e["gold"]],
                       "predicted": names[e["predicted"]]} for e in result["misclassified"][:top]}
    return [f"## {task.title}: accuracy {result['accuracy']:.4f}\n",
            "Counts (rows: gold class, columns: predicted):\n",
            markdown_table(counts, names, label="gold \\ predicted"),
            "\nEach gold class's row as fractions (recall on the diagonal):\n",
            markdown_table(fractions, names, label="gold \\ predicted", digits=3),
            (f"\n{len(result['misclassified'])} misclassified; the {min(top, len(wrong))} most confident "
             f"(confidence: the predicted class's probability):\n"),
            markdown_table(wrong, ["sentence", "gold", "predicted", "confidence"], label="id", digits=3)]


@error_panel.register
def _classification_panel(task: Classification, result, records, soft):
    return confusion_panel, {"counts": np.array(result["confusion"]), "title": task.title,
                             "fractions": np.array(result["confusion_normalised"]),
                             "classes": list(task.class_names), "accuracy": result["accuracy"]}


@task_errors.register
def _paraphrase_errors(task: Paraphrase, records, soft, tolerance):
    """Accuracy, the false positives and false negatives, the most confident first (confidence: the probability
    given to the wrong answer)."""
    predicted, gold = task.hard(soft).tolist(), [int(r.label) for r in records]
    errors = {"false_positives": [], "false_negatives": []}
    for r, g, p, probability in zip(records, gold, predicted, soft.tolist()):
        if g != p:
            errors["false_positives" if p else "false_negatives"].append(
                {"id": r.id, "sentence1": r.sentence1, "sentence2": r.sentence2, "gold": g,
                 "p_paraphrase": probability, "confidence": probability if p else 1 - probability})
    return {"accuracy": accuracy(predicted, gold),
            **{kind: sorted(rows, key=lambda e: -e["confidence"]) for kind, rows in errors.items()},
            "wrong": [g != p for g, p in zip(gold, predicted)]}


@error_report.register
def _paraphrase_report(task: Paraphrase, result, top):
    sections = [f"## {task.title}: accuracy {result['accuracy']:.4f}\n"]
    for kind, words in (("false_positives", "false positives (gold: not paraphrase)"),
                        ("false_negatives", "false negatives (gold: paraphrase)")):
        rows = {e["id"]: {**e, "sentence1": cell(e["sentence1"]), "sentence2": cell(e["sentence2"])}
                for e in result[kind][:top]}
        sections += [f"\n{len(result[kind])} {words}; the {len(rows)} most confident:\n",
                     markdown_table(rows, ["sentence1", "sentence2", "p_paraphrase"], label="id", digits=3,
                                    headers=["question 1", "question 2", "P(paraphrase)"])]
    return sections


@error_panel.register
def _paraphrase_panel(task: Paraphrase, result, records, soft):
    return probabilities_panel, {"p_paraphrase": soft.numpy(), "gold": np.array([r.label for r in records]),
                                 "title": task.title, "accuracy": result["accuracy"]}


@task_errors.register
def _similarity_errors(task: Similarity, records, soft, tolerance):
    """Pearson r, and every pair with its absolute error, the largest first; a pair counts as wrong when its error
    exceeds `tolerance`."""
    gold = [r.label for r in records]
    pairs = [{"id": r.id, "sentence1": r.sentence1, "sentence2": r.sentence2, "gold": g, "predicted": s,
              "error": abs(s - g)} for r, g, s in zip(records, gold, soft.tolist())]
    return {"pearson": pearson(soft, gold), "largest_errors": sorted(pairs, key=lambda e: -e["error"]),
            "wrong": [e["error"] > tolerance for e in pairs]}


@error_report.register
def _similarity_report(task: Similarity, result, top):
    rows = {e["id"]: {**e, "sentence1": cell(e["sentence1"]), "sentence2": cell(e["sentence2"])}
            for e in result["largest_errors"][:top]}
    return [f"## {task.title}: Pearson r {result['pearson']:.4f}\n",
            f"The {len(rows)} pairs with the largest absolute error:\n",
            markdown_table(rows, ["sentence1", "sentence2", "gold", "predicted", "error"], label="id")]


@error_panel.register
def _similarity_panel(task: Similarity, result, records, soft):
    return scatter_panel, {"predicted": soft.numpy(), "gold": np.array([r.label for r in records]),
                           "title": task.title, "r": result["pearson"]}


# ---- compute: do two tasks get the same sentences wrong? ----

def normalise_sentence(text: str) -> str:
    """The same sentence in two files may differ in case and spacing."""
    return " ".join(text.lower().split())


def sentence_errors(texts: list[tuple[str, ...]], wrong: list[bool]) -> dict[str, bool]:
    """Normalised sentence -> whether any dev example holding it (either side of a pair) is wrong."""
    errors = {}
    for sentences, is_wrong in zip(texts, wrong):
        for text in sentences:
            key = normalise_sentence(text)
            errors[key] = errors.get(key, False) or bool(is_wrong)
    return errors


def cross_task_overlap(errors: dict[str, dict[str, bool]]) -> list[dict]:
    """For every two tasks: the sentences both dev sets hold, and how many of them each task gets wrong,
    beside each task's error rate over all its sentences (what coinciding errors would be compared with)."""
    rows = []
    for a, b in combinations(errors, 2):
        shared = errors[a].keys() & errors[b].keys()
        rows.append({"tasks": f"{a} & {b}", "shared": len(shared),
                     "both_wrong": sum(errors[a][s] and errors[b][s] for s in shared),
                     f"only_{a}_wrong": sum(errors[a][s] and not errors[b][s] for s in shared),
                     f"only_{b}_wrong": sum(errors[b][s] and not errors[a][s] for s in shared),
                     "neither_wrong": sum(not errors[a][s] and not errors[b][s] for s in shared),
                     f"{a}_error_rate": sum(errors[a].values()) / len(errors[a]),
                     f"{b}_error_rate": sum(errors[b].values()) / len(errors[b])})
    return rows


def overlap_section(overlap: list[dict], sts_error: float) -> list[str]:
    rows = {}
    for row in overlap:
        a, b = row["tasks"].split(" & ")
        rows[f"{REGISTRY[a].title} & {REGISTRY[b].title}"] = {
            "shared": row["shared"], "both": row["both_wrong"], "only a": row[f"only_{a}_wrong"],
            "only b": row[f"only_{b}_wrong"], "neither": row["neither_wrong"],
            "rate a": row[f"{a}_error_rate"], "rate b": row[f"{b}_error_rate"]}
    most = max((row["shared"] for row in overlap), default=0)
    if most == 0:
        verdict = "No two dev sets share a sentence: there is nothing to say about coinciding errors."
    elif most < FEW_SHARED:
        verdict = f"No two dev sets share more than {most} sentences: too few to say whether errors coincide."
    else:
        verdict = "Where 'both' is well above shared x rate a x rate b, errors coincide more than chance."
    return ["\n## Sentences in more than one task's dev set\n",
            (f"Sentences compared lower-cased, spaces collapsed; a sentence is wrong in a pair task if any pair "
             f"holding it is (Quora: misclassified; STS: error > {sts_error:g}). a and b: the two tasks in the "
             f"row's order; rate: the share of each task's own sentences that are wrong. {verdict}\n"),
            markdown_table(rows, ["shared", "both", "only a", "only b", "neither", "rate a", "rate b"],
                           label="tasks", digits=3,
                           headers=["shared sentences", "wrong in both", "only a wrong", "only b wrong",
                                    "neither wrong", "error rate a", "error rate b"])]


# ---- draw: the panels error_panel names ----

def confusion_panel(axes, counts: np.ndarray, fractions: np.ndarray, classes: list[str], accuracy: float,
                    title: str) -> None:
    image = axes.imshow(fractions, cmap="Blues", vmin=0, vmax=1)
    for gold in range(len(classes)):
        for predicted in range(len(classes)):
            axes.text(predicted, gold, f"{counts[gold, predicted]}\n{fractions[gold, predicted]:.0%}", ha="center",
                      va="center", fontsize="small", color="white" if fractions[gold, predicted] > 0.5 else "black")
    names = [textwrap.fill(name, 9) for name in classes]
    axes.set_xticks(range(len(classes)), names, fontsize="small")
    axes.set_yticks(range(len(classes)), names, fontsize="small")
    axes.set(xlabel="predicted class", ylabel="gold class",
             title=f"{title} dev, {counted(int(counts.sum()), 'sentence')}: counts and % of the gold class\n"
                   f"(accuracy {accuracy:.3f})")
    axes.figure.colorbar(image, ax=axes, shrink=0.8, label="fraction of the gold class")


def probabilities_panel(axes, p_paraphrase: np.ndarray, gold: np.ndarray, accuracy: float, title: str) -> None:
    # The two gold classes' bars side by side in each bin (overlaid, they would hide each other), one of them
    # hatched: told apart without their colours too.
    _, _, bars = axes.hist([p_paraphrase[gold == 0], p_paraphrase[gold == 1]], bins=np.linspace(0, 1, 21),
                           label=["gold: not paraphrase (right of 0.5: false positive)",
                                  "gold: paraphrase (left of 0.5: false negative)"])
    for bar in bars[1]:
        bar.set(hatch="///", edgecolor="white")
    axes.axvline(0.5, color="black", linestyle="--", linewidth=1)
    axes.set(xlabel="predicted P(paraphrase)", ylabel="dev pairs", xlim=(0, 1),
             title=f"{title} dev, {counted(len(gold), 'pair')}: predicted probability by gold label\n"
                   f"(accuracy {accuracy:.3f})")
    integer_ticks(axes.yaxis)
    # Under the axes: wherever the bars are, the legend is not on them.
    axes.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.16))


def scatter_panel(axes, predicted: np.ndarray, gold: np.ndarray, r: float, title: str) -> None:
    axes.scatter(gold, predicted, s=8, alpha=0.4)
    axes.plot([0, 5], [0, 5], color="black", linestyle="--", linewidth=1, label="predicted = gold")
    axes.set(xlabel="gold similarity (0-5)", ylabel="predicted similarity (0-5)", xlim=(-0.2, 5.2), ylim=(-0.2, 5.2),
             title=f"{title} dev, {counted(len(gold), 'pair')}: predicted against gold\n(Pearson r = {r:.3f})")
    axes.set_aspect("equal")
    axes.legend(fontsize="small", loc="upper left")


def draw_errors(title: str, panels: list[tuple[Callable, dict]]) -> Figure:
    """A panel per task the run has: (its drawing, its arguments)."""
    # Larger type than the other pictures: three panels side by side are shrunk the most in a report. A text takes
    # its size when it is made, here (ticks made later copy the first), so the figure keeps it when saved outside.
    with matplotlib.rc_context({"font.size": 12}):
        figure = new_figure(6 * len(panels), 6.5)
        for panel, (draw, arguments) in zip(figure.subplots(1, len(panels), squeeze=False)[0], panels):
            draw(panel, **arguments)
        figure.suptitle(title)
        return figure


# ---- the subcommand: compute and draw ----

def build(config: ErrorsConfig) -> Report:
    folder = Path(config.run)
    if not folder.is_dir():
        raise DataError(f"{folder}: run folder not found")
    member = load_member(folder)
    results, sentences, panels, sections = {}, {}, [], [f"# Dev errors of {config.run}"]
    for name in (name for name in REGISTRY if name in member):
        task, saved = REGISTRY[name], member[name]["dev"]
        records, soft = dev_records(config.data_dir, name, saved["ids"]), saved["outputs"].float()
        result = task_errors(task, records, soft, config.sts_error)
        panels.append(error_panel(task, result, records, soft))
        sentences[name] = sentence_errors([task.texts(r) for r in records], result.pop("wrong"))
        results[name] = result
        sections += ["", *error_report(task, result, config.top)]
    picture = draw_errors(f"Dev errors of {short_names([config.run])[0]}", panels)
    overlap = cross_task_overlap(sentences)
    if len(sentences) > 1:
        sections += overlap_section(overlap, config.sts_error)
    numbers = {"results": results, "cross_task": overlap}
    return Report({"errors.png": picture}, "\n".join(sections), numbers)
