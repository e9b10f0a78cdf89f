"""Ensembles of multi-task checkpoints, built from the soft outputs each run saved in its best checkpoint.

    minbert ensemble --members runs/a/best,runs/b/best,runs/c/best --method best

At the end of training, multitask_classifier.py writes outputs-{task}-{dev,test}.pt into OUTPUT_DIR/best/:
SST class probabilities [N, 5], P(paraphrase) [N], STS scores [N]. Per task, the ensemble's output is a
weighted average of its members' outputs, turned into predictions as for a single model. --method sets
the weights of each task:
    mean      equal weights.
    best      all the weight on the member with the best dev metric (Chen's report's ensemble: the best
              model of each task).
    weighted  weights fitted on dev by greedy ensemble selection (Caruana et al., 2004): --rounds times,
              add (again, if it helps most) the member whose addition gives the best dev metric; the
              weights are how often each member was added. The best ensemble seen over the rounds is
              kept; the first round picks the best single member, so it never scores below that member.
The weights of `best` and `weighted` are chosen on dev, so their dev scores are optimistic: they measure
a choice made on the very examples it is scored on. Test (the leaderboard) scores them fairly.

A member may have been trained on some of the tasks only; each task's ensemble uses the members that
have it. Writes {task}-{dev,test}-output.csv into --predictions-dir and, to --out, the dev
metrics of every member and of the ensemble (with the course's overall score) and the weights. The files of
--predictions-dir (and --out, when it lies there) are written as one set, with written-by.json naming the
ensemble (its --out): a folder holding another run's or ensemble's leaderboard files is refused unless
--overwrite is given, and so is an --out that holds an ensemble's report already (the default
predictions/ensemble.json too).
"""
from __future__ import annotations

import json
import math
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from minbert.common import cli
from minbert.common.cli import AT_LEAST_1, check_ranges, flag
from minbert.common.errors import CheckpointError, UsageError
from minbert.common.files import DEFAULT_DATA, in_repository, write_json
from minbert.common.outputs import LeaderboardFolder, not_ours, output_file, write_output
from minbert.common.run_folder import RunFolder
from minbert.common.tables import markdown_table

# The outputs are read and scored by modules that load torch, imported where they are used (weigh, dev_score), so
# that --help answers at once; torch is here for the annotations alone.
if TYPE_CHECKING:
    import torch

METHODS = ("mean", "best", "weighted")


@dataclass
class EnsembleConfig:
    members: str = flag("", "the finished runs to combine, comma-separated (required): run folders (their best/) "
                            "or checkpoint folders holding outputs-*.pt")
    method: str = flag("mean", "mean: equal weights; best: per task all the weight on the member best on dev; "
                                "weighted: per task weights fitted on dev by greedy selection (--rounds)",
                       choices=METHODS)
    rounds: int = flag(20, "weighted: rounds of greedy selection; the weights are multiples of 1/rounds",
                       range=AT_LEAST_1)
    data_dir: str = flag(str(DEFAULT_DATA), "folder with the course's dev files (the labels)")
    predictions_dir: str = flag(in_repository("predictions"), "the ensemble's leaderboard CSVs go here")
    out: str = flag(in_repository("predictions/ensemble.json"),
                    "dev metrics of every member and of the ensemble, and the weights")
    overwrite: bool = flag(False, "replace the report of an ensemble at --out, and the leaderboard files of another "
                                  "run or ensemble in --predictions-dir")
    COMMAND_LINE_ONLY = ("overwrite",)  # typed each time, never taken from a --config file

    def __post_init__(self):
        self.member_list = [m.strip() for m in self.members.split(",") if m.strip()]
        if not self.member_list:
            raise ValueError("--members: give at least one checkpoint folder")
        checkpoints = {}  # B, B/, ./B and a link to B are one run: weighed twice, it would count twice
        for member in self.member_list:
            checkpoint = RunFolder(member).checkpoint().resolve()
            if checkpoint in checkpoints:
                raise ValueError(f"--members: {checkpoints[checkpoint]} and {member} are one checkpoint "
                                 f"({checkpoint}); list each run once")
            checkpoints[checkpoint] = member
        check_ranges(self)


# ---- members' saved outputs ----

def aligned(members: dict[str, dict], task: str, split: str) -> tuple[list[str], dict[str, torch.Tensor]]:
    """The ids of one task's split and each member's outputs for them, once all members are seen to agree on the ids."""
    having = {name: member[task][split] for name, member in members.items() if task in member}
    (first_name, first), *others = having.items()
    for name, saved in others:
        if saved["ids"] != first["ids"]:
            difference = next((i for i, (a, b) in enumerate(zip(first["ids"], saved["ids"])) if a != b), None)
            where = (f"{len(first['ids'])} vs {len(saved['ids'])} ids" if difference is None else
                     f"position {difference}: {first['ids'][difference]!r} vs {saved['ids'][difference]!r}")
            raise CheckpointError(f"{task} {split}: members {first_name} and {name} have different ids ({where}); "
                                  f"an ensemble needs the same examples in the same order")
    return first["ids"], {name: saved["outputs"] for name, saved in having.items()}


# ---- weights ----

def combine(outputs: list[torch.Tensor], weights: list[float]) -> torch.Tensor:
    # Summed in float64, so that members that are all the same give back exactly their own outputs.
    total = sum(weight * output.double() for weight, output in zip(weights, outputs))
    return total.to(outputs[0].dtype)


def dev_score(task: str, outputs: torch.Tensor, labels: torch.Tensor) -> float:
    """The dev metric as a score to maximise: nan (the Pearson r of a constant output) ranks last."""
    from minbert.tasks import REGISTRY

    metric = REGISTRY[task].metric(outputs, labels)
    return -math.inf if math.isnan(metric) else metric


def ensemble_selection(task: str, outputs: list[torch.Tensor], labels: torch.Tensor, rounds: int) -> list[float]:
    """Greedy forward selection with replacement (Caruana et al., 2004); ties go to the earlier member."""
    counts = [0] * len(outputs)
    best_counts, best_score = None, -math.inf
    for _ in range(rounds):
        scores = []
        for member in range(len(outputs)):
            trial = list(counts)
            trial[member] += 1
            scores.append(dev_score(task, combine(outputs, [c / sum(trial) for c in trial]), labels))
        chosen = max(range(len(outputs)), key=lambda m: (scores[m], -m))
        counts[chosen] += 1
        if best_counts is None or scores[chosen] > best_score:
            best_counts, best_score = list(counts), scores[chosen]
    return [c / sum(best_counts) for c in best_counts]


def fit_weights(method: str, task: str, outputs: list[torch.Tensor], labels: torch.Tensor,
                rounds: int) -> list[float]:
    """One weight per member, non-negative and summing to 1."""
    if method == "mean":
        return [1 / len(outputs)] * len(outputs)
    if method == "best":
        scores = [dev_score(task, output, labels) for output in outputs]
        best = max(range(len(outputs)), key=lambda m: (scores[m], -m))
        return [float(m == best) for m in range(len(outputs))]
    return ensemble_selection(task, outputs, labels, rounds)


# ---- the command ----

def ensemble(config: EnsembleConfig) -> dict:
    """Fit the weights, write the ensemble's predictions and the JSON report, and return the report."""
    out = Path(config.out)
    folder = LeaderboardFolder(config.predictions_dir, "--predictions-dir",
                               f"the ensemble reported in {out.expanduser().resolve()}")
    if out.expanduser().resolve() == folder.path.expanduser().resolve():
        raise UsageError(f"--out {out}: the --predictions-dir itself; give a file for the report, e.g. --out "
                         f"{out / 'ensemble.json'}")
    report_in_set = out.expanduser().resolve().parent == folder.path.expanduser().resolve()
    if report_in_set and out.is_file() and not config.overwrite and out.name not in (
            folder.record() or {"files": {}})["files"]:
        raise not_ours(out, "--out")  # a file of the user's in the folder, which the set would replace
    with nullcontext() if report_in_set else output_file(out, "--out", overwrite=config.overwrite):
        check_report(out, config.overwrite)
        folder.claim(config.overwrite)
        try:
            report, files = weigh(config)
            if report_in_set:
                files[out.name] = lambda path: write_json(path, report)
            folder.write(files)
            if not report_in_set:
                with write_output(out, "ensemble.py") as temp:
                    write_json(temp, report)
        finally:
            folder.release()
    return report


def check_report(out: Path, overwrite: bool) -> None:
    """An --out that exists is replaced only with --overwrite: it is owned as a run folder is (run again, an ensemble
    of other members would silently take its place). A file no command of ours wrote is refused before
    (common.outputs.output_file); inside --predictions-dir, the report is one of the folder's set."""
    if not out.is_file() or overwrite:
        return
    try:
        report = json.loads(out.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        report = None
    if isinstance(report, dict) and {"method", "members"} <= set(report):
        members = ", ".join(map(str, report["members"])) if isinstance(report["members"], dict) else "?"
        raise UsageError(f"--out {out} holds the report of an ensemble already (--method {report['method']} of "
                         f"{members}); replace it with --overwrite, or choose another --out")


def weigh(config: EnsembleConfig) -> tuple[dict, dict]:
    """The report, and the leaderboard files (name -> what writes it)."""
    from minbert.evaluation.outputs import dev_labels, load_member
    from minbert.evaluation.predictions import leaderboard_file
    from minbert.tasks import REGISTRY, summary

    members = {name: load_member(name) for name in config.member_list}
    member_metrics = {name: {} for name in members}
    ensemble_metrics, weights, files = {}, {}, {}
    for task in REGISTRY:
        if not any(task in member for member in members.values()):
            continue  # a task no member trained (cfimdb, usually): nothing to combine, nothing to say
        dev_ids, dev_outputs = aligned(members, task, "dev")
        test_ids, test_outputs = aligned(members, task, "test")
        labels = dev_labels(config.data_dir, task, dev_ids)
        for name, outputs in dev_outputs.items():
            member_metrics[name][task] = REGISTRY[task].metric(outputs, labels)
        names = list(dev_outputs)
        task_weights = fit_weights(config.method, task, list(dev_outputs.values()), labels, config.rounds)
        weights[task] = dict(zip(names, task_weights))
        dev = combine(list(dev_outputs.values()), task_weights)
        test = combine([test_outputs[name] for name in names], task_weights)
        ensemble_metrics[task] = REGISTRY[task].metric(dev, labels)
        files |= leaderboard_file(task, "dev", dev_ids, REGISTRY[task].hard(dev))
        files |= leaderboard_file(task, "test", test_ids, REGISTRY[task].hard(test))
    report = {"method": config.method, "members": {name: summary(m) for name, m in member_metrics.items()},
              "ensemble": summary(ensemble_metrics), "weights": weights,
              "dev_is_optimistic": config.method != "mean"}  # best/weighted chose their weights on dev
    return report, files


def main(argv: list[str] | None = None) -> dict:
    config = cli.parse_config(EnsembleConfig, __doc__, argv, program=cli.program("ensemble.py", "ensemble"))
    report = ensemble(config)
    print(markdown_table({**report["members"], f"ensemble ({config.method})": report["ensemble"]},
                         [*report["weights"], "overall", "mean"], digits=4))
    for task, task_weights in report["weights"].items():
        print(f"{task} weights: " + ", ".join(f"{name} {weight:.2f}" for name, weight in task_weights.items()))
    if report["dev_is_optimistic"]:
        print(f"(--method {config.method} chose its weights on dev: the ensemble's dev scores are optimistic)")
    print(f"predictions in {config.predictions_dir}/, metrics in {config.out}")
    return report

