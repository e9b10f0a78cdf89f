"""Hyperparameter search: an Optuna study over multitask_classifier.py's flags, pruned by the runs' own evaluations.

    minbert search --config quick-start --space quick-start \\
        --study-dir runs/search/quick-start --trials 24 --eval-every 96
    minbert search ... --resume          # continue a stopped study, or join it as one more worker
    minbert search ... --join            # start the study, or join it: for workers started together
    minbert search ... --report          # rewrite its table, pictures and best.yaml, and run no trial
    minbert search ... --confirm 3 --seeds 1,2,3    # the recipe and the 3 best trials again, over 3 seeds

Each trial is a run of multitask_classifier.py: the recipe (--config, and its flags given here), the trial's values
of the flags the space file varies (docs/search.md), its own --seed and --metric-for-best (--objective), in its own
run folder STUDY_DIR/trial-NNNN/ (with --seeds, trial-NNNN/seed-S/) holding its flags, metrics, best/ and dev
leaderboard files (predictions/), its output beside it in trial-NNNN.log. A trial is scored on dev, so it makes no
test predictions (a quarter of a quick-start run's time) unless given --predict-test. Each of its evaluations
(--eval-every, and each epoch's end) is reported to the study; a trial that the pruner finds behind the others at
the same step stops there, as early stopping stops a run. The study is kept in a storage (an SQLite file in
STUDY_DIR by default, recorded in STUDY_DIR, which later commands use): search.py started several times with the
same --study-dir or --storage and --join, on one machine or several, runs one study's trials in parallel, each
process on --threads threads. The best trial is printed at the
end and written to STUDY_DIR/best.yaml, a recipe that `multitask_classifier.py --config` takes as it is (the
command printed trains it into STUDY_DIR-best/, beside the study folder, where a run may write), with trials.md (a table of the trials) and pictures beside it. With --confirm K, search.py trains the recipe and the K
best trials again with each of --seeds and writes STUDY_DIR/confirm.md: which, if any, beats the recipe by more than
the seed spread (tuning/confirm.py).
"""
# Optuna, torch and the modules that load them (the study, its reports, what a run checks) are imported by the
# functions that use them, so that --help answers at once.
from __future__ import annotations

import logging
import signal
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from minbert.commands import train as train_command
from minbert.common import cli, progress
from minbert.common.cli import AT_LEAST_0, AT_LEAST_1, SEED, flag, resolve_device
from minbert.common.errors import Interrupted, UsageError, UserError
from minbert.common.files import (RECIPES, atomic_file, check_writable, in_repository, packaged_recipes,
                                  recipe_file, remove_empty, unknown_recipe)
from minbert.common.outputs import check_place, owning
from minbert.common.progress import duration
from minbert.engine.callbacks import Callback
from minbert.task_info import TASKS
from minbert.training.multitask_config import BEST_METRICS, MultitaskConfig, best_metric
from minbert.tuning.space import OWNED, Param, as_dict, read_space

if TYPE_CHECKING:
    import optuna

log = logging.getLogger("search")
SPACES = RECIPES / "search"  # the packaged search spaces: --space quick-start
PRUNERS = ("median", "halving", "hyperband", "none")
FAILURES_IN_A_ROW = 3  # a worker whose trials fail one after another stops: something is wrong with them all


@dataclass
class SearchConfig:
    """search.py's own flags; every other flag given is multitask_classifier.py's, passed to every trial."""
    space: str = flag("", "the search space: a YAML file of multitask_classifier.py's flags, each with a range "
                          "({low: L, high: H}, with log: true or step: S), a list of values, or a fixed value "
                          "(docs/search.md), or the name of a space that comes with the toolkit "
                          f"({packaged_recipes(SPACES)})")
    study_dir: str = flag(in_repository("runs/search"), "the study's folder: its storage (by default), trial-NNNN/ "
                                                          "run folders, trials.md, best.yaml, pictures")
    study_name: str = flag("", "the study's name in its storage (default: the name of --study-dir)")
    storage: str = flag("", "where the study is kept: empty, an SQLite file STUDY_DIR/study.db; journal, a journal "
                            "file STUDY_DIR/study.journal (plain text, fit for git); an RDB URL (postgresql://..., "
                            "mysql://..., sqlite:///...) or a journal file's path, shared by workers on several "
                            "machines. Recorded in STUDY_DIR/study-storage.json when the study starts: left out, "
                            "later commands use the study's, and another is refused")
    trials: int = flag(0, "run trials until the study has this many complete or pruned ones, counting every "
                          "worker's (0 = no limit: give --timeout)", range=AT_LEAST_0)
    timeout: float = flag(0.0, "start no new trial after this many seconds (0 = no limit: give --trials)",
                          range=AT_LEAST_0)
    objective: str = flag("overall", "the dev metric the study maximises, as --metric-for-best names it (each "
                                     "trial's best/ is picked by it too): overall, mean, or one task's, "
                                     f"{', '.join(BEST_METRICS[2:])}", choices=BEST_METRICS)
    seeds: str = flag("", "score each configuration as the mean over these seeds, e.g. 1,2,3 (default: the "
                          "recipe's --seed); pruning looks at the first seed's evaluations")
    pruner: str = flag("median", "stop a trial whose evaluation is behind: median, behind the median of earlier "
                                 "trials at the same step; halving, successive halving; hyperband; none",
                       choices=PRUNERS)
    prune_after: int = flag(5, "the median pruner prunes nothing before this many trials are complete",
                            range=AT_LEAST_0)
    sampler: str = flag("tpe", "how trial values are drawn: tpe (Optuna's default, random for its first 10 "
                               "trials), or random", choices=("tpe", "random"))
    threads: int = flag(1, "CPU threads of this worker (torch.set_num_threads): run as many workers as cores",
                        range=AT_LEAST_1)
    resume: bool = flag(False, "continue the study in --study-dir (or --storage) that has trials already: a "
                               "stopped study, or one other workers are running; a folder with no study is refused")
    join: bool = flag(False, "start the study, or join it if another worker has (its trials and all): for workers "
                             "started together, e.g. a SLURM array")
    report: bool = flag(False, "only write the study's trials.md, best.yaml and pictures, and run no trial")
    confirm: int = flag(0, "run no trial: train the recipe and the study's N best complete trials again with each "
                           "of --seeds (at least 2), and write STUDY_DIR/confirm.md, the means over the seeds and "
                           "which beats the recipe by more than the seed spread", range=AT_LEAST_0)

    def __post_init__(self):
        cli.check_ranges(self)
        if not self.space:
            raise ValueError("--space FILE is required: the flags to search and their ranges (docs/search.md)")
        try:
            self.seed_list = [int(seed) for seed in self.seeds.split(",")] if self.seeds else []
        except ValueError:
            raise ValueError(f"--seeds {self.seeds!r}: expected seeds separated by commas, e.g. 1,2,3") from None
        bad = [seed for seed in self.seed_list if not SEED.contains(seed)]
        if bad or len(set(self.seed_list)) != len(self.seed_list):
            raise ValueError(f"--seeds {self.seeds!r}: each seed once, each {SEED}")
        if self.confirm and len(self.seed_list) < 2:
            raise ValueError("--confirm needs --seeds with at least 2 seeds: it compares means over seeds")
        if self.join and (self.resume or self.report or self.confirm):
            raise ValueError("--join starts a study or joins it to run trials; with --resume, --report or --confirm, "
                             "which read a study that exists, leave it out")

    def reads_a_study(self) -> bool:
        """Whether the command reads a study that must exist (--resume, --report, --confirm): it starts none."""
        return self.resume or self.report or bool(self.confirm)


def parse_flags(argv: list[str]) -> tuple[SearchConfig, list[str], MultitaskConfig]:
    """search.py's flags, the trials' own (--config RECIPE and multitask_classifier.py's flags), and the recipe
    those make, checked as multitask_classifier.py checks them."""
    parser = cli.Parser(program=cli.program("search.py", "search"), description=__doc__,
                        formatter_class=cli.HelpFormatter,
                        allow_abbrev=False)  # --seed is the trials' flag, not --seeds
    cli.add_flags(parser, SearchConfig)
    parser.add_argument("--config", metavar="RECIPE", help="the recipe every trial starts from: a YAML file of "
                        "multitask_classifier.py's flags (e.g. quick-start); its other flags given "
                        "here are passed to every trial too, and win over the recipe's")
    args, trial_argv = parser.parse_known_args(argv)
    args = vars(args)
    recipe = args.pop("config")
    try:
        config = SearchConfig(**args)
    except ValueError as error:
        parser.error(str(error))
    for word in trial_argv:
        name = word.split("=")[0].removeprefix("--no-").removeprefix("--").replace("-", "_")
        if word.startswith("--") and name in OWNED:
            parser.error(f"{word.split('=')[0]}: search.py sets it in every trial ({OWNED[name]})")
    trial_argv = (["--config", recipe] if recipe else []) + trial_argv
    # The trials' flags are refused as this command's (its name and --help), where the user typed them.
    base = cli.parse_config(MultitaskConfig, train_command.__doc__, trial_argv,
                            program=cli.program("search.py", "search"),
                            other_flags=[option for action in parser._actions for option in action.option_strings])
    return config, trial_argv, base


def recipe_values(base: MultitaskConfig) -> dict:
    """The flags the recipe and the command line give (search.py's own left out): what best.yaml starts from."""
    return {name: getattr(base, name) for name in sorted(base.command.given) if name not in OWNED}


def fixed_values(space: list[Param]) -> dict:
    """The values the space fixes for every trial (part of every trial's recipe, not parameters of the study)."""
    return {param.name: param.value for param in space if param.kind == "fixed"}


def read_checked_space(path: str, base: MultitaskConfig, objective: str) -> list[Param]:
    """The space file, each value a trial could draw checked with the recipe's other flags and the study's
    --objective as multitask_classifier.py checks them before it trains (check_runnable): a value that cannot run
    stops the command before the first trial, not three failed trials later."""
    given = base.command.given  # the flags given, not what the recipe resolved (task weights of its own tasks)
    values = {field.name: getattr(base, field.name) for field in fields(MultitaskConfig)
              if given is None or field.name in given} | {"metric_for_best": objective}

    def check(name, value):
        try:
            check_runnable(MultitaskConfig(**{**values, name: value}))
        except UserError as error:
            raise ValueError(str(error).removeprefix("error: ")) from None

    try:  # the recipe itself, with --objective
        check_runnable(MultitaskConfig(**values))
    except ValueError as error:
        raise UsageError(f"--objective {objective}: {error}") from None
    if unknown_recipe(path, SPACES, "space"):
        raise UsageError(f"--space {path}: {unknown_recipe(path, SPACES, 'space')}")
    return read_space(recipe_file(path, SPACES), cli.build_parser(MultitaskConfig, ""), check)


def check_runnable(config: MultitaskConfig) -> None:
    """What a run checks of its flags before it trains, without loading a model: the device and precision on this
    machine, a local --model folder that exists, the course files of its tasks in --data-dir, and a --max-tokens that
    holds one input of --max-length."""
    from minbert.common.precision import Precision
    from minbert.data.batching import check_token_budget
    from minbert.models.loading import looks_local

    Precision(config.precision, resolve_device(config.device))
    model = Path(config.model).expanduser()
    if not model.is_dir() and looks_local(config.model):
        raise UsageError(f"--model {config.model}: checkpoint folder not found")
    for task in config.task_list:
        for file in TASKS[task].files:
            if not (Path(config.data_dir) / file).is_file():
                raise UsageError(f"--data-dir {config.data_dir}: no {file} (the {task} task's)")
    if config.max_tokens:
        check_token_budget(config.max_tokens, config.max_length)


class ReportToTrial(Callback):
    """Each evaluation's objective reported to the Optuna trial; a trial the pruner finds behind before its last step
    stops there."""

    def __init__(self, trial: optuna.Trial, objective: str, prune: bool):
        self.trial, self.objective, self.prune, self.pruned_at = trial, objective, prune, None

    def on_evaluate(self, state, control, metrics: dict[str, float], score: float) -> None:
        if not self.prune:
            return
        self.trial.report(best_metric(metrics, self.objective), state.step)
        if state.step < state.total_steps and self.trial.should_prune():  # at its end a trial has its value
            self.pruned_at = state.step
            control.should_stop = True


class TrialFailed(Exception):
    """A trial whose run stopped with a user error (a loss that diverged, flags that do not go together)."""


@contextmanager
def output_to(path: Path):
    """A trial's prints and log lines go to its log file (trial-NNNN.log), not between the study's lines; its
    progress lines go there and to the command's own output too, so that a study or --confirm says something at
    least every 30 seconds (common/progress.py) while a trial trains."""
    root = logging.getLogger()
    handlers = root.handlers[:]
    progress_log = logging.getLogger(progress.__name__)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as file, redirect_stdout(file), redirect_stderr(file):
        handler = logging.StreamHandler(file)
        handler.setFormatter(handlers[0].formatter if handlers else None)
        root.handlers = [handler]
        for console in handlers:
            progress_log.addHandler(console)
        try:
            yield
        finally:
            root.handlers = handlers
            for console in handlers:
                progress_log.removeHandler(console)


def train(trial_argv: list[str], values: dict, run: Path, seed: int, objective: str, name: str,
          callbacks: list[Callback] = (), overwrite: bool = False) -> dict:
    """One run of multitask_classifier.py in folder `run` (its output in run.log beside it): the recipe and the
    command line's flags, then `values` (a trial's), then search.py's own; returns its best dev metrics. name: the
    run's, as its progress lines say it ("trial 3"); overwrite: start over a run that was stopped before its end."""
    words = [word for name, value in values.items() for word in cli.flag_words(name, value)]
    # The trial's values win over the recipe's and the command line's, which win over --no-predict-test.
    argv = cli.last_wins(["--no-predict-test", *trial_argv, *words, "--output-dir", str(run),
                          "--predictions-dir", str(run / "predictions"), "--seed", str(seed),
                          "--metric-for-best", objective, *(["--overwrite"] if overwrite else [])])
    try:
        with output_to(run.with_name(run.name + ".log")), progress.named(name):
            return train_command.main(argv, callbacks=callbacks)
    except (UserError, SystemExit) as error:  # SystemExit: flags the run refused (its log says why)
        raise TrialFailed(str(error) if isinstance(error, UserError) else "its flags were refused") from None


class Worker:
    """One search.py process: it runs trials of the study one after another until the study has --trials."""

    def __init__(self, config: SearchConfig, study: optuna.Study, space: list[Param], trial_argv: list[str],
                 base: MultitaskConfig):
        self.config, self.study, self.space, self.trial_argv = config, study, space, trial_argv
        self.seeds = config.seed_list or [base.seed]
        self.folder = Path(config.study_dir)
        self.current: optuna.Trial | None = None
        self.failures = 0  # trials in a row that failed

    def objective(self, trial: optuna.Trial) -> float:
        self.current = trial
        try:
            return self._run(trial)
        except (KeyboardInterrupt, Interrupted):  # a stop, not the configuration's failure: queued again
            trial.set_user_attr("interrupted", True)  # (run_trials), as trials.md says
            raise

    def _run(self, trial: optuna.Trial) -> float:
        import optuna
        import torch

        from minbert.tuning.study import trials_needed, worker_id

        if self.config.trials and trials_needed(self.study, self.config.trials, trial.number) <= 0:
            trial.set_user_attr("not_run", True)  # another worker asked for the last one at the same moment
            self.study.stop()
            raise TrialFailed("the study has its --trials")
        trial.set_user_attr("worker", worker_id())
        trial.set_user_attr("threads", torch.get_num_threads())
        trial.set_user_attr("seeds", self.seeds)
        values = {param.name: param.suggest(trial) for param in self.space}
        folder = self.folder / f"trial-{trial.number:04d}"
        scores = []
        for i, seed in enumerate(self.seeds):
            run = folder if len(self.seeds) == 1 else folder / f"seed-{seed}"
            pruning = ReportToTrial(trial, self.config.objective, prune=i == 0 and self.config.pruner != "none")
            trial.set_user_attr("folder", str(folder))
            try:
                name = f"trial {trial.number}" + (f" seed {seed}" if len(self.seeds) > 1 else "")
                metrics = train(self.trial_argv, values, run, seed, self.config.objective, name, [pruning])
            except TrialFailed as error:
                trial.set_user_attr("error", str(error))
                raise
            if pruning.pruned_at is not None:
                trial.set_user_attr("pruned_at", pruning.pruned_at)
                raise optuna.TrialPruned()
            scores.append(best_metric(metrics, self.config.objective))
            trial.set_user_attr(f"seed {seed}", scores[-1])
        return statistics.fmean(scores)

    def after_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        """A line for the trial this worker ran; the study stopped here once it has --trials."""
        import optuna

        from minbert.tuning import report
        from minbert.tuning.study import trials_needed

        if trial.user_attrs.get("not_run"):
            return
        taken = report.seconds(trial)
        state = report.trial_state(trial)
        value = f"{self.config.objective} {trial.value:.4f}, " if trial.value is not None else ""
        error = f" ({trial.user_attrs['error']})" if "error" in trial.user_attrs else ""
        print(f"trial {trial.number} {state}{error}: {value}{duration(taken or 0)}; "
              f"{report.best_line(study, self.config.objective)}", flush=True)
        self.failures = self.failures + 1 if trial.state == optuna.trial.TrialState.FAIL else 0
        if self.failures == FAILURES_IN_A_ROW:
            print(f"{FAILURES_IN_A_ROW} trials in a row failed: this worker stops (their trial-NNNN.log says why)")
        if self.failures == FAILURES_IN_A_ROW or (self.config.trials and trials_needed(study, self.config.trials) <= 0):
            study.stop()


def build_sampler(name: str) -> optuna.samplers.BaseSampler:
    import optuna

    return optuna.samplers.RandomSampler() if name == "random" else optuna.samplers.TPESampler()


def build_pruner(config: SearchConfig) -> optuna.pruners.BasePruner:
    import optuna

    return {"median": lambda: optuna.pruners.MedianPruner(n_startup_trials=config.prune_after),
            "halving": optuna.pruners.SuccessiveHalvingPruner, "hyperband": optuna.pruners.HyperbandPruner,
            "none": optuna.pruners.NopPruner}[config.pruner]()


def write_reports(study: optuna.Study, config: SearchConfig, base: MultitaskConfig, space: list[Param]) -> None:
    from minbert.tuning import report

    folder = Path(config.study_dir)
    with atomic_file(folder / "trials.md") as temp:  # atomic: every worker writes it as it ends
        temp.write_text(report.trials_table(study, config.objective) + "\n", encoding="utf-8")
    fixed = fixed_values(space)
    command = report.write_best(folder, study, recipe_values(base), fixed, config.objective)
    pictures = report.write_pictures(study, folder, config.objective)
    print(f"{report.best_line(study, config.objective)}; trials in {folder / 'trials.md'}, "
          f"{len(pictures)} picture(s) in {folder}")
    if command:
        print(f"best recipe: {folder / 'best.yaml'}\n  {command}")


def main(argv: list[str] | None = None) -> optuna.Study:
    argv = sys.argv[1:] if argv is None else argv
    config, trial_argv, base = parse_flags(argv)
    import optuna

    from minbert.tuning.study import (one_at_a_time, open_storage, open_study, record_storage, storage_file,
                                      study_storage)

    space = read_checked_space(config.space, base, config.objective)
    folder = Path(config.study_dir)
    check_study_dir(config)
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # the study's progress is this command's lines
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # heartbeat, plots
    name = config.study_name or folder.resolve().name
    made, new_file = [], None
    try:
        with one_at_a_time(folder, made):  # workers started together: one creates the storage's tables and the study
            storage_name = study_storage(config.storage, folder)  # the study's own, when --storage is left out
            new_file = storage_file(storage_name, folder)
            new_file = new_file if new_file is not None and not new_file.exists() else None
            storage, where = open_storage(storage_name, folder, must_exist=config.reads_a_study())
            study = open_study(storage, name, recipe_values(base), as_dict(space),
                               config.reads_a_study() or config.join, build_sampler(config.sampler),
                               build_pruner(config), baseline(space, base), config.objective,
                               must_exist=config.reads_a_study())
            record_storage(storage_name, folder)
    except BaseException as error:
        if new_file is not None and new_file.is_file() and not new_file.stat().st_size:
            new_file.unlink()  # the storage file it began holds nothing (a full disk): not a study
        remove_empty(made)  # a refused command leaves no folder behind
        if isinstance(error, OSError):  # a storage file that cannot be written (a full disk)
            raise UsageError(f"--study-dir {folder}: cannot write the study ({error.strerror or error})") from None
        raise
    with owning(folder):  # its trials' run folders lie inside it
        if config.confirm:
            with going_on(own_command(argv), lambda: "the confirming runs stopped (those that ended are kept)"):
                confirm_best(config, study, space, trial_argv, base)
            return study
        if not config.report:
            run_trials(config, study, space, trial_argv, base, where, own_command(argv, resume=True))
        write_reports(study, config, base, space)
    return study


def own_command(argv: list[str], resume: bool = False) -> str:
    """The command that goes on where this one stopped: itself as it was given, with --resume where it runs trials
    (--confirm goes on without it), and the OMP_NUM_THREADS it had."""
    if resume:
        argv = [word for word in argv if word not in ("--resume", "--no-resume")] + ["--resume"]
    return cli.printed_command([*cli.program("search.py", "search"), *argv])


@contextmanager
def going_on(command: str, under_way: Callable[[], str]):
    """Ctrl-C or SIGTERM (kill, a batch job's time limit) in the block, in a run's training (which saves its last/
    first) or between runs: the search stops with one line saying what stopped (under_way()) and the search's own
    command that goes on, not the run's, which is refused inside the study folder."""
    try:
        with cli.sigterm_stops():  # SIGTERM outside a run's training: as Ctrl-C there
            yield
    except (KeyboardInterrupt, Interrupted) as stopped:
        number = getattr(stopped, "signal_number", signal.SIGINT)
        raise Interrupted(f"{signal.Signals(number).name}: {under_way()}; to go on: {command}", number) from None


def check_study_dir(config: SearchConfig) -> None:
    """Before anything is written: --study-dir a folder outside other commands' run, checkpoint and study folders
    (a study folder itself), and, for a command that runs trials, a study that has a limit."""
    folder = Path(config.study_dir)
    check_place(config.study_dir, "--study-dir", itself=("a study folder",))
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--study-dir {folder}: a file; give a folder for the study")
    if config.storage and "://" not in config.storage and config.storage not in ("sqlite", "journal"):
        check_place(config.storage, "--storage")  # a pipe or a device too: reading a pipe waits for ever
    check_writable(folder, "--study-dir")
    if not (config.report or config.confirm or config.trials or config.timeout):
        raise UsageError("give --trials N, --timeout SECONDS or both: how long the study runs")


def confirm_best(config: SearchConfig, study: optuna.Study, space: list[Param], trial_argv: list[str],
                 base: MultitaskConfig) -> None:
    """--confirm K: the recipe and the K best trials trained with each of --seeds, and confirm.md written."""
    import torch

    from minbert.tuning import confirm, report

    fixed = fixed_values(space)
    configs = confirm.configurations(study, config.confirm, fixed, baseline(space, base))
    folder = Path(config.study_dir) / "confirm"
    for candidate in configs[1:]:
        report.write_recipe(folder / f"{candidate.name}.yaml", report.beside(config.study_dir, candidate.name), study,
                            candidate.trial, recipe_values(base), fixed, config.objective,
                            f"Trial {candidate.trial.number}, one of the best")
    torch.set_num_threads(config.threads)
    runs = len(configs) * len(config.seed_list)
    print(f"confirming {', '.join(c.name for c in configs)} with seeds {config.seeds}: {runs} runs of "
          f"{config.threads} thread(s) in {folder}", flush=True)

    def run_one(values: dict, run: Path, seed: int) -> dict:
        started = time.time()
        try:
            metrics = train(trial_argv, values, run, seed, config.objective, f"{run.parent.name} seed {seed}",
                            overwrite=run.exists())
        except TrialFailed as error:
            raise UserError(f"{run}: {error} (its output: {run}.log)") from None
        print(f"{run.parent.name} seed {seed}: {config.objective} {best_metric(metrics, config.objective):.4f}, "
              f"{duration(time.time() - started)}", flush=True)
        return metrics

    confirm.run_all(folder, configs, config.seed_list, run_one)
    print(confirm.write_report(folder, configs, config.seed_list, config.objective))


def baseline(space: list[Param], base: MultitaskConfig) -> dict | None:
    """The recipe's own values of the searched flags, the study's first trial when they all lie in the space: the
    trial the others are measured against."""
    values = {param.name: getattr(base, param.name) for param in space if param.kind != "fixed"}
    return values if all(param.contains(values[param.name]) for param in space if param.name in values) else None


def run_trials(config: SearchConfig, study: optuna.Study, space: list[Param], trial_argv: list[str],
               base: MultitaskConfig, where: str, resume: str) -> None:
    """The trials this worker runs, until the study has --trials or --timeout passes; resume: the command that goes
    on, printed when a signal stops the worker."""
    import optuna
    import torch

    from minbert.tuning.study import fail_dead_workers, queue_again, trials_needed, worker_id

    failed = fail_dead_workers(study)
    if failed:
        print(f"trial(s) {', '.join(map(str, failed))} of a worker that is gone: failed, and queued again")
    torch.set_num_threads(config.threads)
    done = len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,
                                                        optuna.trial.TrialState.PRUNED)))
    wanted = f"of {config.trials} " if config.trials else ""
    print(f"study {study.study_name!r} in {where}: {done} {wanted}trials done; worker {worker_id()}, "
          f"{config.threads} thread(s)", flush=True)
    if config.trials and trials_needed(study, config.trials) <= 0:
        return
    worker = Worker(config, study, space, trial_argv, base)
    started = time.time()

    def stopped_trial() -> optuna.trial.FrozenTrial | None:
        """The trial a signal stopped (Worker.objective marks it), or None: the worker stopped between trials."""
        trial = study.trials[worker.current.number] if worker.current is not None else None
        return trial if trial is not None and trial.user_attrs.get("interrupted") else None

    def under_way() -> str:
        if stopped_trial() is None:
            return f"the worker stopped {'between trials' if worker.current else 'before its first trial'}"
        return (f"trial {worker.current.number} stopped, and is queued again: the study runs its configuration "
                f"first when it goes on")

    with going_on(resume, under_way):
        try:
            study.optimize(worker.objective, timeout=config.timeout or None, catch=(TrialFailed,),
                           callbacks=[worker.after_trial], gc_after_trial=True)
        except (KeyboardInterrupt, Interrupted):  # the trial under way is failed (by Optuna), and its configuration
            # runs again later
            stopped = stopped_trial()
            if stopped is not None:
                queue_again(study, stopped)
            raise
    log.info("this worker ran for %s", duration(time.time() - started))
