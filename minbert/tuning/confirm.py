"""Confirming a study's best (search.py --confirm K --seeds 1,2,3): one seed cannot rank close recipes (the seed
alone moves SST by about ±0.008), so the recipe and the study's K best complete trials are each trained again with
every seed, as the trials were trained, and compared on their means over the seeds.

    STUDY_DIR/confirm/recipe/seed-S/        the recipe's run with seed S; its output in seed-S.log beside it, and
    STUDY_DIR/confirm/trial-NNNN/seed-S/    its best dev metrics in seed-S.json once it has finished
    STUDY_DIR/confirm/trial-NNNN.yaml       that trial's recipe, for multitask_classifier.py --config
    STUDY_DIR/confirm.md                    each configuration's mean ± standard deviation over the seeds; the verdict

A configuration beats the recipe when its mean objective is above the recipe's by more than the seed spread (the
larger of the two standard deviations over the seeds) and no task's mean is below the recipe's by more than
MAX_TASK_LOSS. A finished run is not trained again, so a stopped confirmation continues where it stopped, and
several search.py --confirm processes share the runs: a run that another process holds is left to it.
"""
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import optuna

from minbert.common import locks
from minbert.common.errors import UsageError
from minbert.common.files import atomic_file, read_json, write_json
from minbert.task_info import TASK_NAMES
from minbert.training.multitask_config import best_metric
from minbert.tuning import report

MAX_TASK_LOSS = 0.005  # a new recipe may cost a task at most this much of its dev metric (its mean over seeds)


@dataclass
class Configuration:
    name: str                  # "recipe", or "trial-NNNN" (the study's trial)
    values: dict               # the flags it sets over the recipe: the space's fixed values and the trial's own
    trial: optuna.trial.FrozenTrial | None = None


def configurations(study: optuna.Study, best: int, fixed: dict, baseline: dict | None) -> list[Configuration]:
    """The recipe (with its own trial, if the study has one), then the study's `best` best complete trials."""
    finished = report.finished_trials(study)
    trials = [trial for trial in finished if trial.params != baseline][:best]
    if not trials:
        raise UsageError(f"the study {study.study_name!r} has no complete trial besides the recipe's own to confirm")
    recipe = next((trial for trial in finished if trial.params == baseline), None)
    return [Configuration("recipe", dict(fixed), recipe)] + [
        Configuration(f"trial-{trial.number:04d}", {**fixed, **trial.params}, trial) for trial in trials]


RunOne = Callable[[dict, Path, int], dict]  # (flags over the recipe, run folder, seed) -> the run's best dev metrics


def result_file(folder: Path, config: Configuration, seed: int) -> Path:
    return folder / config.name / f"seed-{seed}.json"


def run_all(folder: Path, configs: list[Configuration], seeds: list[int], run_one: RunOne) -> None:
    """Train every configuration with every seed that has no result yet, but those another process trains."""
    for config in configs:
        for seed in seeds:
            result = result_file(folder, config, seed)
            if result.exists():
                continue
            claim = result.with_suffix(".lock")
            claim.parent.mkdir(parents=True, exist_ok=True)
            try:
                locks.lock(claim, "")
            except UsageError:  # another search.py --confirm trains it
                continue
            try:
                if not result.exists():  # finished by another process between our look and our lock
                    write_json(result, run_one(config.values, result.with_suffix(""), seed))
            finally:
                locks.unlock(claim)


def pending(folder: Path, configs: list[Configuration], seeds: list[int]) -> list[str]:
    """The runs without a result: under way in another process, or stopped."""
    return [f"{config.name}/seed-{seed}" for config in configs for seed in seeds
            if not result_file(folder, config, seed).exists()]


@dataclass
class Scores:
    """A configuration's results over its seeds: the objective's and each task's values."""
    objective: list[float]
    tasks: dict[str, list[float]]

    @staticmethod
    def of(results: list[dict], objective: str) -> "Scores":
        tasks = [name for name in TASK_NAMES if all(name in result for result in results)]
        return Scores([best_metric(result, objective) for result in results],
                      {name: [result[name] for result in results] for name in tasks})


def mean_sd(values: list[float]) -> str:
    spread = f" ± {statistics.stdev(values):.4f}" if len(values) > 1 else ""
    return f"{statistics.fmean(values):.4f}{spread}"


def verdict(recipe: Scores, other: Scores) -> tuple[bool, str]:
    """Whether `other` beats the recipe (the rule above), and why in a few words."""
    gain = statistics.fmean(other.objective) - statistics.fmean(recipe.objective)
    spread = max(statistics.stdev(recipe.objective), statistics.stdev(other.objective))
    losses = {name: statistics.fmean(recipe.tasks[name]) - statistics.fmean(values)
              for name, values in other.tasks.items() if name in recipe.tasks}
    worst = max(losses, key=losses.get)
    if gain < -spread:
        return False, f"{gain:+.4f}, below the recipe by more than the seed spread {spread:.4f}"
    if gain <= spread:
        return False, f"{gain:+.4f}, within the seed spread {spread:.4f}"
    if losses[worst] > MAX_TASK_LOSS:
        return False, f"{gain:+.4f} (spread {spread:.4f}), but {worst} {-losses[worst]:+.4f}"
    return True, f"{gain:+.4f}, beyond the seed spread {spread:.4f}; no task below by more than {MAX_TASK_LOSS}"


def summary(folder: Path, configs: list[Configuration], seeds: list[int], objective: str) -> tuple[str, str | None]:
    """confirm.md's table (a line per configuration: its scores over the seeds finished so far) and the name of
    the best configuration that beats the recipe with every seed finished (None if none does)."""
    scores = {}
    for config in configs:
        results = [read_json(path) for seed in seeds if (path := result_file(folder, config, seed)).exists()]
        if results:
            scores[config.name] = Scores.of(results, objective)
    tasks = [name for name in TASK_NAMES if any(name in score.tasks for score in scores.values())]
    lines = [f"| configuration | its trial's {objective} (one seed) | seeds | {objective} | "
             + " | ".join(tasks) + " | against the recipe |", "|---" * (len(tasks) + 5) + "|"]
    winner, winner_mean = None, float("-inf")
    recipe = scores.get("recipe")
    for config in configs:
        if config.name not in scores:
            continue
        score, done = scores[config.name], len(scores[config.name].objective)
        against = "-"
        if config.name != "recipe" and recipe and len(recipe.objective) == len(seeds) and done == len(seeds):
            beats, against = verdict(recipe, score)
            mean = statistics.fmean(score.objective)
            if beats and mean > winner_mean:
                winner, winner_mean = config.name, mean
        study_value = f"{config.trial.value:.4f}" if config.trial is not None else "-"
        cells = [study_value, f"{done}/{len(seeds)}", mean_sd(score.objective),
                 *(mean_sd(score.tasks[name]) if name in score.tasks else "-" for name in tasks), against]
        lines.append(f"| {config.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines), winner


def write_report(folder: Path, configs: list[Configuration], seeds: list[int], objective: str) -> str:
    """STUDY_DIR/confirm.md (folder: STUDY_DIR/confirm): the table, the rule and the outcome; returns what to print."""
    left = pending(folder, configs, seeds)  # runs that other processes still train
    table, winner = summary(folder, configs, seeds, objective)
    rule = (f"A configuration beats the recipe when its mean {objective} is above the recipe's by more than the seed "
            f"spread (the larger standard deviation) and no task's mean is below the recipe's by more than "
            f"{MAX_TASK_LOSS}.")
    if left:
        outcome = f"Runs without a result yet (under way in another process, or stopped): {', '.join(left)}."
    elif winner:
        outcome = f"{winner} beats the recipe: its recipe is {folder / winner}.yaml."
    else:
        outcome = "No configuration beats the recipe: keep it."
    seeds_text = ",".join(map(str, seeds))
    with atomic_file(folder.parent / "confirm.md") as temp:
        temp.write_text(f"Seeds {seeds_text}; mean ± standard deviation over the seeds of each run's best dev "
                        f"metrics.\n\n{table}\n\n{rule} {outcome}\n", encoding="utf-8")
    return f"{table}\n{outcome} ({folder.parent / 'confirm.md'})"
