"""The flags of multi-task fine-tuning (multitask_classifier.py), which are also its saved run config: the
model's (model_config.ModelConfig), SMART's (here; training/smart.py runs it), evaluation's (here, with what
--metric-for-best means) and every trainer's (engine/config.py), and those of the schedule, the data and the
outputs, checked together before any data is read. Like every command's flags, they load no torch: --help lists
them at once, and the checks that need the task registry import it when a config is built."""
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from minbert.common.cli import (AT_LEAST_0, AT_LEAST_1, POSITIVE, Range, flag, parse_task_order, parse_task_weights,
                                task_weights_text)
from minbert.common.choices import SWITCHES
from minbert.common.files import DEFAULT_DATA, in_repository
from minbert.common.run_folder import BEST
from minbert.engine.config import TrainingConfig
from minbert.model_config import ModelConfig
from minbert.task_info import COURSE_TASKS, RECIPE_TASK_WEIGHTS, TASK_NAMES, TASKS
from minbert.training.schedules import SCHEDULES, check_plan

log = logging.getLogger(__name__)
# What --metric-for-best may name: the selection score (overall), the plain mean, or one task's metric.
BEST_METRICS = ("overall", "mean") + TASK_NAMES
TASK_METRICS_HELP = ", ".join(f"{name} ({task.metric_name})" for name, task in TASKS.items())
# How --combine combines the task gradients of a step besides their mean (training/gradient_surgery.py).
SURGERY_METHODS = ("pcgrad", "upgrad")


@dataclass
class SmartConfig:
    """SMART's flags; its defaults are the paper's."""
    smart: bool = flag(False, "SMART regularization (Jiang et al., 2020): an adversarial perturbation of the input "
                              "embeddings and a Bregman proximal point term added to each task's loss")
    smart_weight: float = flag(1.0, "SMART's lambda_s, the weight of the adversarial smoothness term", range=AT_LEAST_0)
    smart_epsilon: float = flag(1e-5, "SMART's epsilon: the l_inf radius of the perturbation", range=POSITIVE)
    smart_noise: float = flag(1e-5, "SMART's sigma: the standard deviation of the perturbation's start",
                              range=AT_LEAST_0)
    smart_step_size: float = flag(1e-3, "SMART's eta: the step of the perturbation's gradient ascent", range=POSITIVE)
    smart_steps: int = flag(1, "SMART's T_x: gradient ascent steps of the perturbation", range=AT_LEAST_1)
    bregman_weight: float = flag(1.0, "SMART's mu: the weight of the Bregman proximal point term (0 = off)",
                                 range=AT_LEAST_0)
    bregman_momentum: float = flag(0.99, "SMART's beta: the momentum of the weights the Bregman term compares with",
                                   range=Range(0, 1, high_open=True))


@dataclass
class EvaluationConfig:
    """The flags of a run scored on dev data as it trains (the engine asks the run: MultitaskRun passes them on)."""
    eval_every: int = flag(0, "also evaluate (and save) every N steps (0 = after each epoch only)", range=AT_LEAST_0)
    metric_for_best: str = flag("overall", "the dev metric that picks best/: overall, the mean of the trained tasks' "
                                           "scores on [0, 1] (with sst, para and sts the course's overall score); "
                                           f"mean, the plain mean of sst, para and sts; or one task's metric: {TASK_METRICS_HELP}",
                                choices=BEST_METRICS)
    patience: int = flag(0, "stop after this many evaluations in a row without a better --metric-for-best "
                            "(0 = never stop early)", range=AT_LEAST_0)


def best_metric(metrics: dict[str, float], name: str) -> float:
    """The value of --metric-for-best NAME in an evaluation's metrics (higher is better)."""
    from minbert.tasks import selection_score  # the registry's scores: loaded once a run is scored

    return selection_score(metrics) if name == "overall" else metrics[name]


def describe_best_metric(name: str, tasks: Sequence[str]) -> str:
    """What --metric-for-best NAME is, for the summary: "overall" is the course's only with its three tasks."""
    if name == "overall":
        return ("overall (the course's overall score)" if set(tasks) == set(COURSE_TASKS)
                else f"overall (the mean of {', '.join(tasks)} scores on [0, 1])")
    return "mean (of sst, para and sts)" if name == "mean" else f"{name} ({TASKS[name].metric_name})"


def trained_task_weights(text: str, trained: Sequence[str], option: str) -> dict[str, float]:
    """--task-weights or --loss-weights of a run that trains `trained`: {} for no text; a task it names must be one
    of those trained, and one of those must weigh more than 0."""
    values = parse_task_weights(text, TASK_NAMES, option=option, trained=trained) if text else {}
    untrained = [task for task in values if task not in trained]
    if untrained:
        raise ValueError(f"{option} {text!r}: {', '.join(untrained)} is not trained (--tasks {','.join(trained)})")
    return values


def check_best_metric(name: str, tasks: Sequence[str]) -> None:
    """ValueError unless the trained tasks give --metric-for-best NAME."""
    needed = COURSE_TASKS if name == "mean" else () if name == "overall" else (name,)
    missing = [task for task in needed if task not in tasks]
    if missing:
        raise ValueError(f"--metric-for-best {name}: needs {', '.join(missing)} in --tasks ({','.join(tasks)})")


@dataclass
class MultitaskConfig(ModelConfig, SmartConfig, EvaluationConfig, TrainingConfig):
    init: str = flag("", "a checkpoint of ours to start from (e.g. from pretrain_contrastive.py); "
                           "overrides --model; its heads are loaded too when it has matching ones")
    option: str = flag("finetune", "finetune: train encoder and heads; pretrain: heads on a frozen encoder",
                         choices=("finetune", "pretrain"))
    schedule: str = flag("mtdnn", "which task's batch each step takes: " + "; ".join(
        f"{name}, {about}" for name, about in SCHEDULES.items()) + " (pcgrad: the old spelling of --schedule avg "
                                   "--combine pcgrad)", choices=(*SCHEDULES, "pcgrad"))
    combine: str = flag("mean", "how the task gradients of a step of --schedule avg combine: mean, the gradient of "
                                "the tasks' mean loss; pcgrad, gradient surgery projecting conflicting task gradients "
                                "(PCGrad, Yu et al.); upgrad, torchjd's UPGrad (pip install "
                                "\"torchjd[quadprog-projector]\")", choices=("mean", *SURGERY_METHODS))
    task_order: str = flag("", "task order of the rr-batch, rr-epoch and sequential schedules "
                                 "(empty: the order of --tasks)")
    task_weights: str = flag("auto", "mtdnn sampling weights, e.g. para=2 (tasks left out weigh 1); auto: the "
                                     f"recipe's {task_weights_text(RECIPE_TASK_WEIGHTS)} under mtdnn, else none")
    lr: float = flag(5e-5, "peak learning rate of the encoder", range=POSITIVE)
    loss_weights: str = flag("", "task loss multipliers, e.g. sst=2 (tasks left out weigh 1)")
    layer_lr_decay: float = flag(1.0, "layer-wise LR decay: each encoder layer below the top one, and the "
                                      "embeddings below them, get this factor times the LR above (1 = off)",
                                 range=Range(0, 1, low_open=True))
    head_lr: float = flag(1e-3, "peak learning rate of the heads (new, randomly initialised layers)", range=POSITIVE)
    max_train_examples: int = flag(0, "use a random sample of at most this many training examples per task (0 = all)",
                                   range=AT_LEAST_0)
    max_eval_examples: int = flag(0, "use a random sample of at most this many dev/test examples per task (0 = all)",
                                  range=AT_LEAST_0)
    eval_batch_size: int = flag(128, "batch size for evaluation", range=AT_LEAST_1)
    max_tokens: int = flag(0, "batches by token budget: each training batch up to N real tokens (per task, per "
                              "process; length-grouped), evaluation batches up to N * --eval-batch-size / "
                              "--batch-size, in order of length (0 = off: --batch-size rows)", range=AT_LEAST_0)
    length_buckets: str = flag("auto", "pad each batch's length up to a multiple of 32 tokens (at most "
                                       "--max-length) and its rows up to --batch-size (padding rows weigh nothing; "
                                       "with --max-tokens or --smart the rows stay as they are), evaluation's too, "
                                       "so that a GPU meets a few shapes instead of one a length; it changes nothing "
                                       "computed beyond rounding; auto: on on a GPU, off on a CPU", choices=SWITCHES)
    cuda_graphs: str = flag("auto", "on a GPU, capture the encoder's forward and backward passes once a batch "
                                    "shape and replay them (needs --length-buckets; torch.compile's CUDA graphs); "
                                    "a setting that cannot be captured (a CPU, --combine pcgrad or upgrad, --smart, "
                                    "--max-tokens, --silver, packed attention, --gradient-checkpointing, torchrun) "
                                    "trains without, saying why; auto and on: where it can; off: never",
                            choices=SWITCHES)
    data_dir: str = flag(str(DEFAULT_DATA), "folder with the course's data files")
    predictions_dir: str = flag(in_repository("predictions"), "leaderboard CSVs of the best checkpoint go here; "
                                                               "a --config file's relative one is inside --output-dir "
                                                               "(the quick start's: OUTPUT_DIR/predictions)")
    silver: str = flag("", "a silver folder (`minbert silver`): its teacher-labelled examples of the trained tasks "
                           "join each of their batches, learnt from the teacher's soft labels (empty: none)")
    silver_tasks: str = flag("", "with --silver: the tasks that take silver examples, e.g. sst,para (empty: every "
                                 "trained task the folder has)")
    silver_ratio: float = flag(0.5, "with --silver: silver examples in a task's batch per gold example",
                               range=POSITIVE)
    silver_weight: float = flag(1.0, "with --silver: the weight of the silver loss, added to the gold loss",
                                range=POSITIVE)
    predict_test: bool = flag(True, "end with the best checkpoint's test predictions (--no-predict-test: only its "
                                    "dev ones, as search.py's trials do: a run scored on dev needs no test pass)")

    # --length-buckets and --cuda-graphs change no number a run computes beyond rounding: --resume may change them.
    RUNTIME_FIELDS = TrainingConfig.RUNTIME_FIELDS + ("predictions_dir", "eval_batch_size", "predict_test",
                                                      "length_buckets", "cuda_graphs")
    OUTPUTS = TrainingConfig.OUTPUTS + (BEST,)
    SOURCES = TrainingConfig.SOURCES + ("init", "data_dir", "silver")
    OUTPUT_FOLDERS = TrainingConfig.OUTPUT_FOLDERS + ("predictions_dir",)
    # A recipe's leaderboard folder lies in its run's folder: `--config quick-start --output-dir X` writes X/predictions,
    # not the recipe's own runs/quick-start/predictions, which a second run would find another run's.
    IN_OUTPUT_DIR = ("predictions_dir",)

    def __post_init__(self):
        super().__post_init__()  # ModelConfig's (the tasks, the head flags), then TrainingConfig's (every range)
        if self.schedule == "pcgrad":  # PCGrad was a schedule before it was a way to combine gradients
            log.warning("--schedule pcgrad: now --schedule avg --combine pcgrad (avg's steps, PCGrad's gradients)")
            self.schedule, self.combine = "avg", "pcgrad" if self.combine == "mean" else self.combine
        if self.combine != "mean" and self.schedule != "avg":
            raise ValueError(f"--combine {self.combine}: combines the gradients of the tasks of a step, and --schedule "
                             f"{self.schedule} takes one task a step; use --schedule avg")
        self.order = parse_task_order(self.task_order, TASK_NAMES) if self.task_order else self.task_list
        if set(self.order) != set(self.task_list):
            raise ValueError(f"--task-order {self.task_order!r} must name each task of --tasks {self.tasks!r}, "
                             f"and only those")
        if self.task_weights == "auto":  # the recipe's weights of the tasks trained (saved resolved)
            recipe = {task: weight for task, weight in RECIPE_TASK_WEIGHTS.items() if task in self.task_list}
            self.task_weights = task_weights_text(recipe) if self.schedule == "mtdnn" else ""
        self.weights = trained_task_weights(self.task_weights, self.task_list, "--task-weights") or None
        never = [task for task, weight in (self.weights or {}).items() if weight == 0]
        if never:
            raise ValueError(f"--task-weights {self.task_weights!r}: {', '.join(never)} would never be trained, yet "
                             f"scored and predicted; leave it out of --tasks instead")
        self.loss_scale = trained_task_weights(self.loss_weights, self.task_list, "--loss-weights")
        check_plan(self.schedule, self.task_list, self.epochs, self.order, self.weights)
        check_best_metric(self.metric_for_best, self.task_list)
        self.silver_task_list = self._silver_tasks()

    def _silver_tasks(self) -> tuple[str, ...]:
        """The tasks that train on silver examples: those of --silver-tasks, or the trained tasks the folder has."""
        if not self.silver:
            if self.silver_tasks:
                raise ValueError(f"--silver-tasks {self.silver_tasks}: give the silver folder (--silver)")
            return ()
        from minbert.data.silver import file_name as silver_file  # loads torch: built only for a run with --silver

        folder = Path(self.silver)
        if not folder.is_dir():
            raise ValueError(f"--silver {self.silver}: " + ("not found" if not folder.exists() else "not a folder")
                             + "; give a folder written by `minbert silver`")
        present = [task for task in self.task_list if (folder / silver_file(task)).is_file()]
        if not self.silver_tasks:
            if not present:
                raise ValueError(f"--silver {self.silver}: no silver file of a trained task ("
                                 f"{', '.join(silver_file(t) for t in self.task_list)})")
            return tuple(present)
        named = parse_task_order(self.silver_tasks, TASK_NAMES, "--silver-tasks")
        missing = [task for task in named if task not in present]
        if missing:
            raise ValueError(f"--silver-tasks {self.silver_tasks}: {', '.join(missing)} "
                             f"{'is' if len(missing) == 1 else 'are'} not trained or has no silver file in "
                             f"{self.silver}")
        return named
