"""What a study leaves to read in its folder, rewritten by every worker as it ends (and by search.py --report):

    trials.md                      a Markdown table of the trials, best first
    best.yaml                      the best trial's flags: a recipe that multitask_classifier.py --config takes,
                                   trained into STUDY-best/ beside the study folder (its printed command)
    history.png                    the objective of every trial, in order, and the best so far
    importance.png                 how much of the objective's spread each searched flag explains (fANOVA), once
                                   IMPORTANCE_TRIALS trials are complete
    slice-FLAG.png                 the objective against each searched flag's value
"""
import logging
import os
import warnings
from pathlib import Path

import optuna
import yaml
from optuna.trial import TrialState

from minbert.common.cli import flag_words, printed_command, program
from minbert.common.files import atomic_file
from minbert.common.progress import duration
from minbert.common.tables import cell

log = logging.getLogger(__name__)
TRAIN = program("multitask_classifier.py", "train")  # how the printed commands run a trial's recipe
# Complete trials before importance.png is drawn: fANOVA's ranking from fewer, over a dozen flags, is noise (the
# quick start's study ranked another flag first at 12 trials than at 24: docs/results.md).
IMPORTANCE_TRIALS = 10
MARKER_EDGE = "0.15"  # every marker outlined in near-black: Optuna's colour map draws the first trials near white


def flag_name(name: str) -> str:
    return name.replace("_", "-")


def finished_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """The trials with a value (complete), best first."""
    return sorted(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), key=lambda t: -t.value)


def trial_state(trial: optuna.trial.FrozenTrial) -> str:
    if trial.state == TrialState.PRUNED:
        return f"pruned at step {trial.user_attrs.get('pruned_at', '?')}"
    if trial.state == TrialState.FAIL and trial.user_attrs.get("interrupted"):  # search.py queued it again
        return "interrupted, queued again"
    if trial.state == TrialState.FAIL:
        return "not run (--trials reached)" if trial.user_attrs.get("not_run") else "failed"
    return trial.state.name.lower()


def seconds(trial: optuna.trial.FrozenTrial) -> float | None:
    if trial.datetime_start is None or trial.datetime_complete is None:
        return None
    return (trial.datetime_complete - trial.datetime_start).total_seconds()


def trials_table(study: optuna.Study, objective: str) -> str:
    """A line per trial, complete ones best first, then pruned, failed and running ones by number."""
    names = sorted({name for trial in study.trials for name in trial.params})
    order = {trial.number: i for i, trial in enumerate(finished_trials(study))}
    trials = sorted(study.trials, key=lambda t: (order.get(t.number, len(order)), t.number))
    lines = ["| trial | " + " | ".join([objective, "state", "time", *map(flag_name, names)]) + " |",
             "|---" * (len(names) + 4) + "|"]
    for trial in trials:
        value = trial.value if trial.value is not None else (
            trial.intermediate_values[max(trial.intermediate_values)] if trial.intermediate_values else None)
        taken = seconds(trial)
        cells = [f"{value:.4f}" if value is not None else "-", trial_state(trial),
                 duration(taken) if taken is not None else "-",
                 *(cell(shown(trial.params[name])) if name in trial.params else "-" for name in names)]
        lines.append(f"| {trial.number} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def shown(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def beside(study_folder: Path, name: str) -> Path:
    """The run folder of one of a study's recipes (best.yaml -> STUDY-best/): beside the study folder, not inside it,
    where no command but the study's own may write (common/outputs.py's check_place)."""
    study = Path(os.path.normpath(study_folder))
    if study.name in ("", ".", ".."):  # the current folder, or one above it: named by its place
        study = study.resolve()
    return study.with_name(f"{study.name}-{name}")


def write_recipe(path: Path, run: Path, study: optuna.Study, trial: optuna.trial.FrozenTrial, recipe: dict,
                 fixed: dict, objective: str, what: str) -> str:
    """A trial's flags as a recipe file (the study's recipe, the space's fixed values, the trial's values) that
    multitask_classifier.py --config takes; returns the command line that trains it, into its run folder `run`
    (its leaderboard files in run/predictions/). what: which trial it is."""
    flags = {flag_name(name): value for name, value in {**recipe, **fixed, **trial.params}.items()}
    seeds = trial.user_attrs.get("seeds")
    over = f", the mean over seeds {seeds}" if seeds and len(seeds) > 1 else ""
    place = ["--output-dir", str(run), "--predictions-dir", str(run / "predictions")]
    header = (f"# {what} of search.py's study {study.study_name!r}: trial {trial.number}, {objective} "
              f"{trial.value:.4f} on dev{over}.\n# Train it: {printed_command([*TRAIN, '--config', str(path), *place])}\n")
    with atomic_file(path) as temp:
        temp.write_text(header + yaml.safe_dump(flags, sort_keys=False, allow_unicode=True))
    words = [word for name, value in flags.items() for word in flag_words(name, value)]
    return printed_command([*TRAIN, *words, *place])


def write_best(folder: Path, study: optuna.Study, recipe: dict, fixed: dict, objective: str) -> str | None:
    """The study folder's best.yaml, and the command line that trains its recipe into STUDY-best/ beside the study
    folder (None while no trial is complete)."""
    best = finished_trials(study)
    return write_recipe(folder / "best.yaml", beside(folder, "best"), study, best[0], recipe, fixed, objective,
                        "The best trial") if best else None


def write_pictures(study: optuna.Study, folder: Path, objective: str) -> list[Path]:
    """history.png, importance.png and a slice-FLAG.png per searched flag, with Optuna's matplotlib backend, every
    marker outlined; a picture that the trials so far cannot give is left out, and so is importance.png before
    IMPORTANCE_TRIALS complete trials (a line says so)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import PathCollection
    from matplotlib.ticker import NullFormatter
    from optuna.visualization import matplotlib as plots

    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        return []
    searched = sorted({name for trial in complete for name in trial.params})
    pictures = {"history": lambda: plots.plot_optimization_history(study, target_name=objective)}
    if len(complete) >= IMPORTANCE_TRIALS and searched:
        pictures["importance"] = lambda: plots.plot_param_importances(study, target_name=objective)
    elif searched:
        log.warning("no importance.png: importances need %d complete trials, and %d are", IMPORTANCE_TRIALS,
                    len(complete))
    for name in searched:
        pictures[f"slice-{flag_name(name)}"] = lambda name=name: plots.plot_slice(study, params=[name],
                                                                                  target_name=objective)
    written = []
    plt.rcParams.update({"font.size": 12, "figure.figsize": (7, 4.5)})
    for stem, draw in pictures.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Optuna's "experimental feature" warnings, once a picture
            try:
                axes = draw()
            except (ValueError, RuntimeError, ZeroDivisionError) as error:  # e.g. importances of constant values
                log.info("no %s.png yet: %s", stem, error)
                continue
        figure = (axes.flat[0] if hasattr(axes, "flat") else axes).figure
        for ax in figure.axes:  # a log axis's minor ticks labelled too run into each other
            ax.xaxis.set_minor_formatter(NullFormatter())
            for markers in ax.collections:
                if isinstance(markers, PathCollection):
                    markers.set_edgecolor(MARKER_EDGE)
                    markers.set_linewidth(0.8)
        if stem.startswith("slice-"):
            figure.axes[0].set_title(f"{objective} against --{stem.removeprefix('slice-')}")
        figure.tight_layout()
        path = folder / f"{stem}.png"
        with atomic_file(path) as temp:
            figure.savefig(temp, format="png", dpi=110)
        plt.close(figure)
        written.append(path)
    return written


def best_line(study: optuna.Study, objective: str) -> str:
    best = finished_trials(study)
    return f"best {objective} {best[0].value:.4f} (trial {best[0].number})" if best else "no complete trial yet"
