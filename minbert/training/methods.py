"""The contrastive methods of pretrain_contrastive.py: the command's flags, and one entry a method in METHODS.

An entry holds what is particular to a method: its papers' defaults, its default learning rate, the flags that
are its own (every other method refuses them), what else it refuses, its stages, and how its objective is
built (training/objectives.py, training/consert.py); the flags' help lists the defaults from the entries. A new
method is one entry here, its flags in ContrastiveConfig, and its objective; the pretraining run
(training/contrastive.py) knows no method by name. This module loads no torch (the objectives do, imported when a
run builds one): pretrain_contrastive.py --help, made from the entries, answers at once.

    simcse   SimCSE (Gao et al. 2021; Chen's CS224N report): dropout views, NLI hard negatives, Quora negative pairs
    mnrl     multiple negatives ranking loss (Mohammed and Sabane's CS224N report; sentence-transformers)
    ct       Contrastive Tension (Carlsson et al.): two independently updated copies of the encoder
    sg       SG-BERT (Kim et al.): BERT_F's layers guide BERT_T's [CLS] vector (L_base); sg-opt: its L_opt
    consert  ConSERT (Yan et al.): two augmented views; NLI supervision before or with it (--consert-stages)
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from minbert.common.choices import POOLINGS, contrastive_data_names
from minbert.common.cli import AT_LEAST_0, AT_LEAST_1, FRACTION, POSITIVE, as_flag, flag
from minbert.common.errors import DataError
from minbert.common.files import DEFAULT_DATA, in_repository
from minbert.engine.config import MIN_LENGTH, TrainingConfig
from minbert.task_info import CONTRASTIVE_COURSE_DATA

if TYPE_CHECKING:
    from minbert.data.contrastive import Dataset
    from minbert.models import BertModel
    from minbert.training.objectives import Objective

DATA_NAMES = contrastive_data_names(CONTRASTIVE_COURSE_DATA)
# ConSERT's views (--aug1, --aug2) and stages (--consert-stages): each choice the sequence of stages it trains
# (training/consert.py).
AUGMENTATIONS = ("none", "shuffle", "token-cutoff", "feature-cutoff", "dropout", "adversarial")
STAGES = {"unsup": ("unsup",), "joint": ("joint",), "sup-unsup": ("sup", "unsup"), "joint-unsup": ("joint", "unsup")}


def _number(value: float) -> str:
    """5e-05 as 5e-5, 0.1 as 0.1: as a flag is written."""
    return f"{value:g}".replace("e-0", "e-")


@dataclass(frozen=True)
class RateBy:
    """A default learning rate that depends on the stage: the rate of the name pick(datasets, stage) gives."""
    rates: dict[str, float]
    pick: Callable[[list[Dataset], str], str]

    def __call__(self, datasets: list[Dataset], stage: str) -> float:
        return self.rates[self.pick(datasets, stage)]

    def __str__(self) -> str:
        return ", ".join(f"{_number(rate)} {name}" for name, rate in self.rates.items())


@dataclass(frozen=True)
class Method:
    name: str
    about: str  # what it is, in a few words (--method's help)
    build: Callable[["ContrastiveConfig", BertModel, str], Objective]  # (config, encoder, stage) -> the objective
    defaults: dict  # its papers' values of the flags left to a default (None): batch_size, max_length, ...
    lr: float | RateBy  # the default --lr
    flags: tuple[str, ...] = ()  # its own flags
    stages: Callable[["ContrastiveConfig"], tuple[str, ...]] = lambda config: ("train",)
    # The data of a stage: --data, unless a stage needs another kind.
    stage_data: Callable[["ContrastiveConfig", str], str] = lambda config, stage: config.data
    check: Callable[["ContrastiveConfig"], None] = lambda config: None
    projection: bool = False  # --projection auto turns the projection MLP on
    own_scoring: str = ""  # what it scores embeddings with instead, where it refuses --projection on

    def default_lr(self, datasets: list[Dataset], stage: str) -> float:
        return self.lr(datasets, stage) if callable(self.lr) else self.lr


def _simcse_data(datasets, stage):
    from minbert.data.contrastive import PairSet, TripletSet

    kinds = {type(d) for d in datasets}
    return "NLI" if TripletSet in kinds else "Quora" if PairSet in kinds else "sentences"


def _check_ct(config: "ContrastiveConfig") -> None:
    if config.batch_size % (config.negatives_per_positive + 1):
        raise ValueError(f"ct: --batch-size {config.batch_size} is not a multiple of K + 1 = "
                         f"{config.negatives_per_positive + 1}")
    if config.fusion:
        raise ValueError("--fusion: CT trains on its own pairs of sentences, not on SST batches")


def _check_consert(config: "ContrastiveConfig") -> None:
    if "adversarial" in (config.aug1, config.aug2) and config.consert_stages != "joint":
        raise ValueError("the adversarial view needs the supervised loss: use it with --consert-stages joint")
    if config.consert_stages != "unsup" and config.grad_cache_chunk:
        raise ValueError("--grad-cache-chunk: ConSERT's NLI stages cannot be cached (FGV needs L_ce's gradient)")


def _consert_stage_data(config: "ContrastiveConfig", stage: str) -> str:
    """The NLI stages train on NLI triplets: --data when it is NLI; else, in a two-stage schedule, the NLI file
    (--data is then the unsupervised stage's)."""
    from minbert.tasks import CONTRASTIVE_DATA

    is_nli = config.data == "nli" or (config.data not in DATA_NAMES and
                                      CONTRASTIVE_DATA.detect_format(Path(config.data).expanduser()) == "nli")
    if stage == "unsup" or is_nli:
        return config.data
    if len(STAGES[config.consert_stages]) == 1:
        raise DataError(f"--consert-stages joint trains on NLI triplets only; --data {config.data} is not NLI")
    return "nli"


def _objectives():
    """training/objectives.py, the methods' objectives: imported when a run builds one (it loads torch)."""
    from minbert.training import objectives

    return objectives


def _build_consert(config: ContrastiveConfig, encoder: BertModel, stage: str) -> Objective:
    from minbert.training.consert import ConsertSupervised, ConsertUnsupervised

    if stage == "unsup":
        return ConsertUnsupervised(encoder, config.pooling, config.aug1, config.aug2, config.temperature,
                                   config.use_projection)
    return ConsertSupervised(encoder, config.pooling, contrastive=stage == "joint", aug1=config.aug1,
                             aug2=config.aug2, alpha=config.alpha, temperature=config.temperature,
                             fgv_epsilon=config.fgv_epsilon, projection=config.use_projection)


def _self_guided(name: str) -> "Method":
    # SG-BERT (Kim et al.) Table 8: batch 16, lr 5e-5, tau 0.01, [CLS] of BERT_T.
    return Method(name, f"SG-BERT's {'L_opt' if name == 'sg-opt' else 'L_base'} (Kim et al.)",
                  lambda config, encoder, stage: _objectives().SelfGuided(encoder, name == "sg-opt", config.pooling,
                                                                         config.temperature, config.sg_lambda),
                  dict(batch_size=16, max_length=64, pooling="cls", temperature=0.01, warmup=0.0), 5e-5,
                  flags=("temperature", "sg_lambda"), own_scoring="its own 4096-wide head")


# Defaults: the papers' values, with batch sizes a CPU can run (use --batch-size and --grad-cache-chunk for the
# papers' large batches on a GPU).
METHODS: dict[str, Method] = {method.name: method for method in (
    # SimCSE (Gao et al. 2021, Chen's CS224N report): [CLS] + MLP in training, tau 0.05, 32 tokens, no warm-up;
    # batch 64 as in unsupervised SimCSE (supervised SimCSE used 512); lr 5e-5 supervised (NLI), 3e-5 unsupervised
    # (bert-base), and Chen's report Table 10: 2e-5 with Quora.
    Method("simcse", "SimCSE (Gao et al.; dropout views, NLI hard negatives)",
           lambda config, encoder, stage: _objectives().SimCSE(encoder, config.pooling, config.use_projection,
                                                              config.temperature, config.negatives),
           dict(batch_size=64, max_length=32, pooling="cls", temperature=0.05, warmup=0.0),
           RateBy({"NLI": 5e-5, "Quora": 2e-5, "sentences": 3e-5}, _simcse_data),
           flags=("temperature", "negatives"), projection=True),
    # MNRL (Mohammed and Sabane's CS224N report; sentence-transformers' recipe): mean pooling, scale 20, lr 2e-5,
    # 10% warm-up.
    Method("mnrl", "multiple negatives ranking loss",
           lambda config, encoder, stage: _objectives().MultipleNegatives(encoder, config.pooling,
                                                                         config.use_projection, config.scale),
           dict(batch_size=32, max_length=64, pooling="mean", warmup=0.1), 2e-5, flags=("scale",)),
    # CT (Carlsson et al. section 4, Appendix A): batch 16 = 2 x (1 positive + K = 7 negative pairs), mean pooling,
    # 75 tokens (authors' code), step-wise lr from 1e-5 down to 2e-6 (Table 5).
    Method("ct", "Contrastive Tension (Carlsson et al.)",
           lambda config, encoder, stage: _objectives().ContrastiveTension(encoder, config.pooling,
                                                                          config.negatives_per_positive),
           dict(batch_size=16, max_length=75, pooling="mean", warmup=0.0), 1e-5,
           flags=("negatives_per_positive",), check=_check_ct, own_scoring="raw dot products"),
    _self_guided("sg"),
    _self_guided("sg-opt"),
    # ConSERT (Yan et al.) Implementation Details: batch 96, 64 tokens, mean pooling, tau 0.1, 10% warm-up; lr 5e-7
    # for its unsupervised runs, the reference code's default 2e-5 for its NLI runs.
    Method("consert", "ConSERT (Yan et al.)", _build_consert,
           dict(batch_size=96, max_length=64, pooling="mean", temperature=0.1, warmup=0.1),
           RateBy({"NLI": 2e-5, "unsup": 5e-7}, lambda datasets, stage: "unsup" if stage == "unsup" else "NLI"),
           flags=("temperature", "aug1", "aug2", "consert_stages", "alpha", "fgv_epsilon"),
           stages=lambda config: STAGES[config.consert_stages], stage_data=_consert_stage_data,
           check=_check_consert),
)}
# A method's own flag -> the methods that take it.
OWN_FLAGS = {name: [m.name for m in METHODS.values() if name in m.flags]
             for name in dict.fromkeys(name for m in METHODS.values() for name in m.flags)}


def _by_method(value: Callable[[Method], object]) -> str:
    """What `value` gives for each method, for --help: methods with the same value together, in METHODS' order
    ("simcse 64; mnrl 32; ct, sg, sg-opt 16"); methods it gives None for left out."""
    groups: dict[str, list[str]] = {}
    for method in METHODS.values():
        found = value(method)
        if found is not None:
            groups.setdefault(_number(found) if isinstance(found, float) else str(found), []).append(method.name)
    return "; ".join(f"{', '.join(names)} {text}" for text, names in groups.items())


def _defaults(name: str) -> str:
    """Each method's default of the flag `name`, for its --help."""
    return _by_method(lambda method: method.defaults.get(name))


def _methods_where(holds: Callable[[Method], bool]) -> str:
    """The methods for which `holds` is true, for --help."""
    return ", ".join(m.name for m in METHODS.values() if holds(m))


@dataclass
class ContrastiveConfig(TrainingConfig):
    method: str = flag("simcse", "contrastive method: " + "; ".join(f"{m.name}, {m.about}" for m in METHODS.values()),
                       choices=tuple(METHODS))
    data: str = flag("nli", f"training data: {', '.join(DATA_NAMES)} (all3: quora, sst, sts in each epoch, as "
                            "Chen's report), or a file in one of their formats")
    data_dir: str = flag(str(DEFAULT_DATA), "folder with the data files (and sts-eval/, sts-dev.csv for --eval)")
    pooling: str | None = flag(None, "sentence embedding: cls, the [CLS] vector; mean, the mean of the tokens; "
                                     "pooler, BERT's pooler output (default per method: "
                                     f"{_defaults('pooling')})", choices=POOLINGS)
    projection: str = flag("auto", "2-layer MLP on the embeddings in training only (SimCLR's projection head); "
                                   f"auto: on for {_methods_where(lambda m: m.projection)}, off for "
                                   f"{_methods_where(lambda m: not m.projection and not m.own_scoring)}; "
                                   f"{_methods_where(lambda m: m.own_scoring)} score in their own way and refuse on",
                           choices=("auto", "on", "off"))
    temperature: float | None = flag(None, f"tau (default per method: {_defaults('temperature')})", range=POSITIVE)
    scale: float = flag(20.0, "mnrl: scale of the cosine similarities", range=POSITIVE)
    negatives: bool = flag(True, "simcse on quora: push the non-duplicate pairs apart (Chen's report); "
                                 "--no-negatives leaves them out (its ablation)")
    negatives_per_positive: int = flag(7, "ct: K, negative pairs per positive pair (Contrastive Tension)",
                                       range=AT_LEAST_1)
    sg_lambda: float = flag(0.1, "sg, sg-opt: weight lambda of the L2 regulariser towards BERT_F (SG-BERT)",
                            range=AT_LEAST_0)
    aug1: str = flag("shuffle", "consert: augmentation of the first view (ConSERT section 3.2): none; shuffle, "
                                "the position ids shuffled; token-cutoff, 15%% of the tokens zeroed; feature-cutoff, "
                                "20%% of the embedding dimensions zeroed; dropout, 20%% dropout on the embeddings; "
                                "adversarial, an FGV perturbation (--consert-stages joint only)", choices=AUGMENTATIONS)
    aug2: str = flag("feature-cutoff", "consert: augmentation of the second view: none, shuffle, token-cutoff, "
                                       "feature-cutoff, dropout or adversarial, as for --aug1",
                     choices=AUGMENTATIONS)
    consert_stages: str = flag("unsup", "consert's stages (ConSERT section 3.3): unsup, the contrastive loss alone; "
                                        "joint, NLI classification with it; sup-unsup, NLI first, then unsup; "
                                        "joint-unsup, joint first, then unsup; the NLI stages read --data when it is "
                                        "NLI, else nli_for_simcse.csv of --data-dir", choices=tuple(STAGES))
    alpha: float = flag(0.15, "consert joint: L_ce + alpha * L_con", range=AT_LEAST_0)
    fgv_epsilon: float = flag(1.0, "consert adversarial view: norm of the FGV perturbation of each token",
                              range=AT_LEAST_0)
    fusion: bool = flag(False, "fusion training (Chen's report): each SST batch takes a sentiment cross-entropy "
                               "step, then the contrastive step")
    grad_cache_chunk: int = flag(0, "embed each batch this many rows at a time with gradient caching: the same "
                                    "gradients with the memory of a small batch (0 = off)", range=AT_LEAST_0)
    eval: bool = flag(False, "STS benchmark before and after training: table printed, "
                             "sts_benchmark.json written to --output-dir")
    max_train_examples: int = flag(0, "use a random sample of at most this many examples of each data file (0 = all)",
                                   range=AT_LEAST_0)
    eval_batch_size: int = flag(128, "batch size of --eval", range=AT_LEAST_1)
    # Defaults that differ from the multitask command's:
    epochs: int = flag(1, "passes over the data (per stage)", range=AT_LEAST_1)
    batch_size: int | None = flag(None, "batch size per process (default per method: "
                                        f"{_defaults('batch_size')})", range=AT_LEAST_1)
    lr: float | None = flag(None, f"peak learning rate (default per method and data: {_by_method(lambda m: m.lr)})",
                            range=POSITIVE)
    warmup: float | None = flag(None, "fraction of steps of linear warm-up before linear decay (default per method: "
                                      f"{_defaults('warmup')}; ct has a schedule of its own)",
                                range=FRACTION)
    weight_decay: float = flag(0.0, "AdamW decoupled weight decay", range=AT_LEAST_0)
    max_length: int | None = flag(None, "tokens per sentence (default per method: "
                                        f"{_defaults('max_length')})", range=MIN_LENGTH)
    output_dir: str = flag("", "checkpoint folder (default: the repository's runs/pretrain-METHOD); ct writes "
                               "OUT/model1, OUT/model2")

    RUNTIME_FIELDS = TrainingConfig.RUNTIME_FIELDS + ("eval", "eval_batch_size")
    FOLDER_KINDS = TrainingConfig.FOLDER_KINDS + ("a checkpoint folder",)  # its output is an encoder's folder
    OUTPUTS = TrainingConfig.OUTPUTS + ("model1", "model2", "sts_benchmark.json")
    SOURCES = TrainingConfig.SOURCES + ("data", "data_dir")
    # Old flag names (old -> new): still taken on the command line, in --config files and in saved run configs.
    RENAMED_FLAGS = {"consert_schedule": "consert_stages"}  # "schedule" is multitask_classifier.py's task sampling

    def __post_init__(self):
        super().__post_init__()  # every flag's range
        method = METHODS[self.method]
        defaults = {f.name: f.default for f in fields(self)}
        for name in OWN_FLAGS.keys() - set(method.flags):  # set away from its default, another method's flag
            if getattr(self, name) != defaults[name]:
                raise ValueError(f"{as_flag(name, getattr(self, name))}: a flag of {', '.join(OWN_FLAGS[name])}, "
                                 f"not of {self.method}")
        if method.own_scoring and self.projection == "on":
            raise ValueError(f"--projection on: {self.method} defines its own scoring ({method.own_scoring})")
        for name, value in method.defaults.items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        self.output_dir = self.output_dir or in_repository(f"runs/pretrain-{self.method}")
        if self.grad_accum != 1:
            raise ValueError("--grad-accum: a contrastive loss compares the examples of one batch, so adding up the "
                             "gradients of smaller batches is not a larger batch; use --grad-cache-chunk for that")
        method.check(self)

    @property
    def use_projection(self) -> bool:
        return self.projection == "on" or (self.projection == "auto" and METHODS[self.method].projection)
