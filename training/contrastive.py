"""Contrastive pretraining of the encoder: one trainer loop, one small objective per method.

Flow: --data -> tokenised sets (data/contrastive.py) -> each epoch's plan of batches -> objective (its views of
the batch, embedded by the encoder, and its loss; training/objectives.py, training/consert.py) -> backward,
plain or with gradient caching -> AdamW -> checkpoint that `multitask_classifier.py --init` starts from.
A run is one stage, except ConSERT's two-stage schedules (supervised NLI, then unsupervised --data).
"""
import itertools
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from common import distributed
from common.cli import AT_LEAST_0, AT_LEAST_1, FRACTION, POSITIVE, flag
from common.errors import DataError
from common.files import DEFAULT_DATA, atomic_files, recover_files, remove_entry, write_json
from common.tables import markdown_table
from data.batching import split_rows
from data.contrastive import (DATA_MODES, Dataset, PairSet, SentenceBatch, SentenceSet, TripletSet, as_sentences,
                              data_files, detect_format, load_data)
from evaluation.sts_benchmark import TABLE_COLUMNS, sts_benchmark
from models import POOLINGS, Tokenizer, from_pretrained
from models.checkpoint import tensor_bytes, write_encoder_folder
from models.shareable import write_shareable_files
from training.consert import AUGMENTATIONS, SCHEDULES, ConsertSupervised, ConsertUnsupervised
from training.engine import MIN_LENGTH, Engine, TrainingConfig, load_training_state
from training.grad_cache import grad_cache_backward
from training.objectives import ContrastiveTension, MultipleNegatives, Objective, SelfGuided, SentimentFusion, SimCSE
from training.precision import Precision

log = logging.getLogger(__name__)

METHODS = ("simcse", "mnrl", "ct", "sg", "sg-opt", "consert")

# Defaults per method: the papers' values, with batch sizes a CPU can run (use --batch-size and
# --grad-cache-chunk for the papers' large batches on a GPU).
METHOD_DEFAULTS = {
    # SimCSE (Gao et al. 2021, Chen's CS224N report): [CLS] + MLP in training, tau 0.05, 32 tokens, no warm-up; batch 64
    # as in unsupervised SimCSE (supervised SimCSE used 512); lr in default_lr.
    "simcse": dict(batch_size=64, max_length=32, pooling="cls", temperature=0.05, warmup=0.0),
    # MNRL (Mohammed and Sabane's CS224N report; sentence-transformers' recipe): mean pooling, scale 20, lr 2e-5, 10% warm-up.
    "mnrl": dict(batch_size=32, max_length=64, pooling="mean", lr=2e-5, warmup=0.1),
    # CT (Carlsson et al. section 4, Appendix A): batch 16 = 2 x (1 positive + K = 7 negative pairs), mean pooling,
    # 75 tokens (authors' code), step-wise lr from 1e-5 down to 2e-6 (Table 5).
    "ct": dict(batch_size=16, max_length=75, pooling="mean", lr=1e-5, warmup=0.0),
    # SG / SG-OPT (SG-BERT (Kim et al.) Table 8): batch 16, lr 5e-5, tau 0.01, [CLS] of BERT_T.
    "sg": dict(batch_size=16, max_length=64, pooling="cls", lr=5e-5, temperature=0.01, warmup=0.0),
    "sg-opt": dict(batch_size=16, max_length=64, pooling="cls", lr=5e-5, temperature=0.01, warmup=0.0),
    # ConSERT (ConSERT (Yan et al.) Implementation Details): batch 96, 64 tokens, mean pooling, tau 0.1, 10% warm-up.
    "consert": dict(batch_size=96, max_length=64, pooling="mean", temperature=0.1, warmup=0.1),
}


def default_lr(method: str, datasets: list[Dataset], stage: str) -> float:
    if method == "simcse":
        # SimCSE: 5e-5 supervised (NLI), 3e-5 unsupervised (bert-base); Chen's CS224N report Table 10: 2e-5 with Quora (all3).
        kinds = {type(d) for d in datasets}
        return 5e-5 if TripletSet in kinds else 2e-5 if PairSet in kinds else 3e-5
    if method == "consert":
        # ConSERT: 5e-7 for its unsupervised runs; its NLI runs use the reference code's default, 2e-5.
        return 5e-7 if stage == "unsup" else 2e-5
    return METHOD_DEFAULTS[method]["lr"]


@dataclass
class ContrastiveConfig(TrainingConfig):
    method: str = flag("simcse", "contrastive method (see training/objectives.py)", choices=METHODS)
    data: str = flag("nli", f"training data: {', '.join(DATA_MODES)} (all3: quora, sst, sts in each epoch, as "
                            "Chen's report), or a file in one of their formats")
    data_dir: str = flag(str(DEFAULT_DATA), "folder with the data files (and sts-eval/, sts-dev.csv for --eval)")
    pooling: str | None = flag(None, "sentence embedding (default: cls for simcse, sg; mean otherwise)",
                               choices=POOLINGS)
    projection: str = flag("auto", "2-layer MLP on the embeddings in training only (SimCLR's projection head); "
                                   "auto: on for simcse, off for mnrl and consert", choices=("auto", "on", "off"))
    temperature: float | None = flag(None, "tau of simcse (0.05), sg (0.01), consert (0.1)", range=POSITIVE)
    scale: float = flag(20.0, "mnrl: scale of the cosine similarities", range=POSITIVE)
    negatives: bool = flag(True, "simcse on quora: push the non-duplicate pairs apart (Chen's report); "
                                 "--no-negatives leaves them out (its ablation)")
    negatives_per_positive: int = flag(7, "ct: K, negative pairs per positive pair (Contrastive Tension)",
                                       range=AT_LEAST_1)
    sg_lambda: float = flag(0.1, "sg, sg-opt: weight lambda of the L2 regulariser towards BERT_F (SG-BERT)",
                            range=AT_LEAST_0)
    aug1: str = flag("shuffle", "consert: augmentation of the first view", choices=AUGMENTATIONS)
    aug2: str = flag("feature-cutoff", "consert: augmentation of the second view", choices=AUGMENTATIONS)
    schedule: str = flag("unsup", "consert: unsup, or NLI supervision added jointly / before (ConSERT section "
                                  "3.3); the NLI stages read --data when it is NLI, else nli_for_simcse.csv of "
                                  "--data-dir", choices=tuple(SCHEDULES))
    alpha: float = flag(0.15, "consert joint: L_ce + alpha * L_con", range=AT_LEAST_0)
    fgv_epsilon: float = flag(1.0, "consert adversarial view: norm of the FGV perturbation of each token",
                              range=AT_LEAST_0)
    fusion: bool = flag(False, "fusion training (Chen's report): each SST batch takes a sentiment cross-entropy "
                               "step, then the contrastive step")
    grad_cache_chunk: int = flag(0, "embed each batch this many rows at a time with gradient caching: the same "
                                    "gradients with the memory of a small batch (0 = off)", range=AT_LEAST_0)
    eval: bool = flag(False, "STS benchmark before and after training: table printed, "
                             "sts_benchmark.json written to --output-dir")
    max_steps: int = flag(0, "stop each stage after this many batches (0 = run all epochs)", range=AT_LEAST_0)
    max_train_examples: int = flag(0, "use a random sample of at most this many examples of each data file (0 = all)",
                                   range=AT_LEAST_0)
    eval_batch_size: int = flag(128, "batch size of --eval", range=AT_LEAST_1)
    # Defaults that differ from the multitask command's:
    epochs: int = flag(1, "passes over the data (per stage)", range=AT_LEAST_1)
    batch_size: int | None = flag(None, "batch size per process (default per method: simcse 64, mnrl 32, ct 16, "
                                        "sg 16, consert 96)", range=AT_LEAST_1)
    lr: float | None = flag(None, "peak learning rate (default per method and data: simcse 5e-5 NLI, 2e-5 Quora, "
                                  "3e-5 sentences; mnrl 2e-5; ct 1e-5; sg 5e-5; consert 2e-5 NLI, 5e-7 unsup)",
                                  range=POSITIVE)
    warmup: float | None = flag(None, "fraction of steps of linear warm-up before linear decay "
                                      "(default: 0.1 for mnrl and consert, else 0; ct has its own schedule)",
                                      range=FRACTION)
    weight_decay: float = flag(0.0, "AdamW decoupled weight decay", range=AT_LEAST_0)
    max_length: int | None = flag(None, "tokens per sentence (default per method: simcse 32, ct 75, else 64)",
                                  range=MIN_LENGTH)
    output_dir: str = flag("", "checkpoint folder (default runs/pretrain-METHOD); ct writes OUT/model1, OUT/model2")

    RUNTIME_FIELDS = TrainingConfig.RUNTIME_FIELDS + ("eval", "eval_batch_size")
    PATH_FIELDS = TrainingConfig.PATH_FIELDS + ("data_dir",)
    # Beside the encoder's files at the top of --output-dir, which the final save replaces as one set.
    OUTPUTS = TrainingConfig.OUTPUTS + ("model1", "model2", "sts_benchmark.json")

    def __post_init__(self):
        defaults = METHOD_DEFAULTS[self.method]
        for name in ("batch_size", "max_length", "pooling", "temperature", "warmup"):
            if getattr(self, name) is None:
                setattr(self, name, defaults.get(name))
        self.output_dir = self.output_dir or f"runs/pretrain-{self.method}"
        self._check()

    def _check(self):
        super().__post_init__()  # every flag's range
        if self.grad_accum != 1:
            raise ValueError("--grad-accum: a contrastive loss compares the examples of one batch, so adding up the "
                             "gradients of smaller batches is not a larger batch; use --grad-cache-chunk for that")
        if not self.negatives and self.method != "simcse":
            raise ValueError("--no-negatives is the ablation of SimCSE on Quora; use it with --method simcse")
        if self.method != "consert" and self.schedule != "unsup":
            raise ValueError("--schedule is ConSERT's (--method consert)")
        if self.projection == "on" and self.method in ("ct", "sg", "sg-opt"):
            raise ValueError(f"--projection on: {self.method} defines its own scoring "
                             "(ct: raw dot products; sg: its own 4096-wide head)")
        if self.method == "ct" and self.batch_size % (self.negatives_per_positive + 1):
            raise ValueError(f"ct: --batch-size {self.batch_size} is not a multiple of K + 1 = "
                             f"{self.negatives_per_positive + 1}")
        if self.method == "consert" and "adversarial" in (self.aug1, self.aug2) and self.schedule != "joint":
            raise ValueError("the adversarial view needs the supervised loss: use it with --schedule joint")
        if self.method == "consert" and self.schedule != "unsup" and self.grad_cache_chunk:
            raise ValueError("--grad-cache-chunk: ConSERT's NLI stages cannot be cached (FGV needs L_ce's gradient)")
        if self.fusion and self.method == "ct":
            raise ValueError("--fusion: CT trains on its own pairs of sentences, not on SST batches")
        if self.fusion and self.data in DATA_MODES and self.data not in ("sst", "all3"):
            raise ValueError("--fusion needs SST sentences with labels: --data sst or all3")



def backward(objective: Objective, batch, precision: Precision, grad_cache_chunk: int = 0) -> torch.Tensor:
    """Backpropagate the objective's loss on `batch` into .grad; returns the loss (detached, on the device).

    With grad_cache_chunk, every view is embedded grad_cache_chunk rows at a time (training/grad_cache.py): the
    gradients of the whole batch, in-batch negatives included, with the activation memory of one chunk.
    """
    if not grad_cache_chunk:
        with precision.autocast():
            loss = objective(batch)
        precision.scale(loss).backward()
        return loss.detach()
    views, losses = objective.views(batch), []

    def scaled_loss(*embeddings):
        loss = objective.loss_fp32(batch, *embeddings)
        losses.append(loss.detach())
        return precision.scale(loss)

    with precision.autocast():
        grad_cache_backward([v.embed for v in views], [split_rows(v.inputs, grad_cache_chunk) for v in views],
                            scaled_loss)
    return losses[0]


def make_objective(config: ContrastiveConfig, encoder, stage: str) -> Objective:
    projection = config.projection == "on" or (config.projection == "auto" and config.method == "simcse")
    if config.method == "simcse":
        return SimCSE(encoder, config.pooling, projection, config.temperature, config.negatives)
    if config.method == "mnrl":
        return MultipleNegatives(encoder, config.pooling, projection, config.scale)
    if config.method == "ct":
        return ContrastiveTension(encoder, config.pooling, config.negatives_per_positive)
    if config.method in ("sg", "sg-opt"):
        return SelfGuided(encoder, config.method == "sg-opt", config.pooling, config.temperature, config.sg_lambda)
    if stage == "unsup":
        return ConsertUnsupervised(encoder, config.pooling, config.aug1, config.aug2, config.temperature, projection)
    return ConsertSupervised(encoder, config.pooling, contrastive=stage == "joint", aug1=config.aug1,
                             aug2=config.aug2, alpha=config.alpha, temperature=config.temperature,
                             fgv_epsilon=config.fgv_epsilon, projection=projection)


@dataclass
class Stage:
    name: str  # "train", or ConSERT's "sup" / "joint" / "unsup"
    objective: Objective
    datasets: list[Dataset]
    lr: float


class ContrastiveTrainer:
    def __init__(self, config: ContrastiveConfig):
        self.config = config
        if distributed.is_main():
            recover_files(config.output_dir)  # a final save that died half-way: its files all in, or none
        self.engine = Engine(config)
        self.output_dir = Path(config.output_dir)
        self.resume_from = self.engine.check_resumable(config.RUNTIME_FIELDS) if config.resume else None
        self.encoder = from_pretrained(config.model)  # before the tokenizer: a broken config.json is named as such
        self.engine.check_max_length(self.encoder)
        self.tokenizer = Tokenizer.from_pretrained(config.model)
        stage_names = SCHEDULES[config.schedule] if config.method == "consert" else ("train",)
        self.data_files = []
        self.stages = [self._stage(name) for name in stage_names]
        self.run_config = self.engine.describe_run(self.data_files, lr={stage.name: stage.lr for stage in self.stages})
        self.fusion = None
        if config.fusion:
            if not any(isinstance(d, SentenceSet) and d.labels for stage in self.stages for d in stage.datasets):
                raise DataError(f"--fusion needs SST sentences with sentiment labels; --data {config.data} has none")
            self.fusion = SentimentFusion(self.stages[-1].objective.encoder, config.pooling).to(self.engine.device)
        for stage in self.stages:
            stage.objective.to(self.engine.device)
        self.stage_index, self.results = 0, {}

    def _stage(self, name: str) -> Stage:
        config = self.config
        objective = make_objective(config, self.encoder, name)
        data = config.data
        if name in ("sup", "joint") and not self._is_nli(config.data):
            if len(SCHEDULES[config.schedule]) == 1:
                raise DataError(f"--schedule joint trains on NLI triplets only; --data {config.data} is not NLI")
            data = "nli"  # the supervised stage of a two-stage schedule; --data is for the unsupervised one
        self.data_files += [path for _, path in data_files(data, config.data_dir)]
        datasets = load_data(data, config.data_dir, self.tokenizer, config.max_length, config.max_train_examples)
        if objective.input_kind == "sentences":
            datasets = [as_sentences(d, self.tokenizer, config.max_length) for d in datasets]
        lr = config.lr if config.lr is not None else default_lr(config.method, datasets, name)
        return Stage(name, objective, datasets, lr)

    @staticmethod
    def _is_nli(data: str) -> bool:
        return data == "nli" or (data not in DATA_MODES and detect_format(Path(data).expanduser()) == "nli")

    # ---- training ----

    def train(self) -> dict:
        config, engine = self.config, self.engine
        state = load_training_state(self.resume_from) if self.resume_from else None
        if state:
            self.load_state_dict(state["trainer"])
        elif config.eval and engine.is_main:
            self.results["before"] = self._benchmark(self.encoder)
        metrics = {"stages": {}}
        # A resumed run skips the stages it finished: their weights came with the training state.
        for index, stage in enumerate(self.stages[self.stage_index:], start=self.stage_index):
            self.stage_index = index
            metrics["stages"][stage.name] = self._run_stage(stage, state)
            state = None  # a later stage starts with a fresh optimizer and schedule
        encoders = self.stages[-1].objective.encoders_to_save()
        if config.eval and engine.is_main:
            for name, encoder in encoders.items():
                self.results[f"after {name}".strip()] = self._benchmark(encoder)
            print(markdown_table(self.results, TABLE_COLUMNS))
            metrics["sts_benchmark"] = self.results
        if engine.is_main:
            self._save_final(encoders, metrics)
        distributed.barrier()
        return metrics

    def _save_final(self, encoders: dict, metrics: dict) -> None:
        """The encoder folder(s), written into the output folder as one set (its other files stay); last/ goes: the
        run is complete."""
        size = tensor_bytes(tensor for encoder in encoders.values() for tensor in encoder.state_dict().values())
        with atomic_files(self.output_dir, expected=size) as temp:
            config = self.config
            for name, encoder in encoders.items():
                (temp / name).mkdir(exist_ok=True)
                write_encoder_folder(temp / name, encoder, self.tokenizer, self.run_config, metrics)
                write_shareable_files(temp / name, pooling=config.pooling, max_length=config.max_length,
                                      base_model=config.model, command=getattr(config, "command", ""),
                                      metrics=metrics.get("sts_benchmark", metrics["stages"]),
                                      data_files=[str(path) for path in self.data_files])
            if self.config.eval:
                write_json(temp / "sts_benchmark.json", {"model": self.config.model, "method": self.config.method,
                                                         "pooling": self.config.pooling, "results": self.results})
        remove_entry(self.output_dir / "last")
        log.info("saved %s", ", ".join(str(self.output_dir / name) for name in encoders))

    def _run_stage(self, stage: Stage, resume_state: dict | None) -> dict:
        config, objective, engine = self.config, stage.objective, self.engine
        objective.train()
        self.trained = [objective] + ([self.fusion.train()] if self.fusion else [])
        parameters = list(dict.fromkeys(p for module in self.trained for p in module.parameters() if p.requires_grad))
        plan = list(itertools.chain.from_iterable(
            objective.plan_epoch(stage.datasets, config.batch_size, config.seed, epoch, distributed.world_size())
            for epoch in range(config.epochs)))
        plan = plan[:config.max_steps] if config.max_steps else plan
        engine.prepare(parameters, parameters, stage.lr, len(plan),
                       lambda step: objective.lr_multiplier(step, len(plan), config.warmup), objective.adam_betas)
        if resume_state:
            engine.restore(resume_state)
        self.stage, self.chunk = stage, config.grad_cache_chunk if objective.supports_grad_cache else 0
        self.updates = engine.step  # a resumed stage counts the updates before the interruption as one each
        log.info("%s %s: %d steps on %s, lr %.2g, batch %d", config.method, stage.name, len(plan),
                 " + ".join(f"{d.name} ({len(d):,})" for d in stage.datasets), stage.lr, config.batch_size)
        engine.run(plan, self, f"{config.method} {stage.name}")
        return {"steps": len(plan), "updates": self.updates, "lr": stage.lr,
                "final_loss": engine.losses.period_means().get("loss")}

    def train_step(self, planned) -> tuple[dict[str, torch.Tensor], int]:
        engine = self.engine
        batch = planned.build(self.tokenizer.pad_id, distributed.rank(), distributed.world_size()).to(engine.device)
        if self.fusion and isinstance(batch, SentenceBatch) and batch.labels is not None:
            # Fusion: the sentiment step first, an update of its own, then the contrastive step on the same batch.
            backward(self.fusion, batch, engine.precision)
            engine.optimizer_step(advance_schedule=False)
            self.updates += 1
        loss = backward(self.stage.objective, batch, engine.precision, self.chunk)
        self.updates += 1  # the engine's optimizer step that follows
        return {"loss": loss}, len(batch)

    def after_step(self, planned) -> None:
        pass

    def write_checkpoint(self, folder: Path) -> None:
        pass  # everything --resume needs is in the training state

    def state_dict(self) -> dict:
        return {"stage": self.stage_index, "results": self.results,
                "modules": [module.state_dict() for module in self.trained]}

    def load_state_dict(self, state: dict) -> None:
        self.stage_index, self.results = state["stage"], state["results"]
        modules = [self.stages[self.stage_index].objective] + ([self.fusion] if self.fusion else [])
        for module, saved in zip(modules, state["modules"]):
            module.load_state_dict(saved)

    def _benchmark(self, encoder) -> dict:
        return sts_benchmark(encoder, self.tokenizer, self.config.data_dir, self.config.pooling,
                             batch_size=self.config.eval_batch_size)
