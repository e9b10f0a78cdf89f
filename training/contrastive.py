"""Contrastive pretraining of the encoder: one trainer loop, one small objective per method.

Flow: --data -> tokenised sets (data/contrastive.py) -> each epoch's plan of batches -> objective (its views of
the batch, embedded by the encoder, and its loss; training/objectives.py, training/consert.py) -> backward,
plain or with gradient caching -> AdamW -> checkpoint that `multitask_classifier.py --init` starts from.
A run is one stage, except ConSERT's two-stage schedules (supervised NLI, then unsupervised --data).
"""
import dataclasses
import itertools
import logging
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from cli import flag, resolve_device
from data.batching import split_rows
from data.contrastive import (DATA_MODES, Dataset, PairSet, SentenceBatch, SentenceSet, TripletSet, as_sentences,
                              detect_format, load_data)
from data.readers import DataError
from evaluation.sts_benchmark import DEFAULT_DATA, TABLE_COLUMNS, sts_benchmark
from evaluation.tables import markdown_table
from models import POOLINGS, AdamW, Tokenizer, from_pretrained
from training.checkpoint import save_checkpoint, write_json
from training.consert import AUGMENTATIONS, SCHEDULES, ConsertSupervised, ConsertUnsupervised
from training.grad_cache import grad_cache_backward
from training.multitask import seed_everything
from training.objectives import (ContrastiveTension, MultipleNegatives, Objective, SelfGuided, SentimentFusion,
                                 SimCSE)
from training.precision import PRECISIONS, Precision

log = logging.getLogger(__name__)

METHODS = ("simcse", "mnrl", "ct", "sg", "sg-opt", "consert")

# Defaults per method: the papers' values, with batch sizes a CPU can run (use --batch-size and
# --grad-cache-chunk for the papers' large batches on a GPU).
METHOD_DEFAULTS = {
    # SimCSE (Gao et al. 2021, seed 002): [CLS] + MLP in training, tau 0.05, 32 tokens, no warm-up; batch 64
    # as in unsupervised SimCSE (supervised SimCSE used 512); lr in default_lr.
    "simcse": dict(batch_size=64, max_length=32, pooling="cls", temperature=0.05, warmup=0.0),
    # MNRL (seed 003; sentence-transformers' recipe): mean pooling, scale 20, lr 2e-5, 10% warm-up.
    "mnrl": dict(batch_size=32, max_length=64, pooling="mean", lr=2e-5, warmup=0.1),
    # CT (seed 000 section 4, Appendix A): batch 16 = 2 x (1 positive + K = 7 negative pairs), mean pooling,
    # 75 tokens (authors' code), step-wise lr from 1e-5 down to 2e-6 (Table 5).
    "ct": dict(batch_size=16, max_length=75, pooling="mean", lr=1e-5, warmup=0.0),
    # SG / SG-OPT (seed 001 Table 8): batch 16, lr 5e-5, tau 0.01, [CLS] of BERT_T.
    "sg": dict(batch_size=16, max_length=64, pooling="cls", lr=5e-5, temperature=0.01, warmup=0.0),
    "sg-opt": dict(batch_size=16, max_length=64, pooling="cls", lr=5e-5, temperature=0.01, warmup=0.0),
    # ConSERT (seed 004 Implementation Details): batch 96, 64 tokens, mean pooling, tau 0.1, 10% warm-up.
    "consert": dict(batch_size=96, max_length=64, pooling="mean", temperature=0.1, warmup=0.1),
}


def default_lr(method: str, datasets: list[Dataset], stage: str) -> float:
    if method == "simcse":
        # SimCSE: 5e-5 supervised (NLI), 3e-5 unsupervised (bert-base); seed 002 Table 10: 2e-5 with Quora (all3).
        kinds = {type(d) for d in datasets}
        return 5e-5 if TripletSet in kinds else 2e-5 if PairSet in kinds else 3e-5
    if method == "consert":
        # ConSERT: 5e-7 for its unsupervised runs; its NLI runs use the reference code's default, 2e-5.
        return 5e-7 if stage == "unsup" else 2e-5
    return METHOD_DEFAULTS[method]["lr"]


@dataclass
class ContrastiveConfig:
    model: str = flag("bert-base-uncased", "starting weights: hub id, checkpoint folder, or all-MiniLM-L6-v2")
    method: str = flag("simcse", "contrastive method (see training/objectives.py)", choices=METHODS)
    data: str = flag("nli", f"training data: {', '.join(DATA_MODES)} (seed 002: quora, sst, sts in each epoch), "
                            "or a file in one of their formats")
    data_dir: str = flag(str(DEFAULT_DATA), "folder with the data files (and sts-eval/, sts-dev.csv for --eval)")
    pooling: str | None = flag(None, "sentence embedding (default: cls for simcse, sg; mean otherwise)",
                               choices=POOLINGS)
    projection: str = flag("auto", "2-layer MLP on the embeddings in training only (seed 002, after SimCLR); "
                                   "auto: on for simcse, off for mnrl and consert", choices=("auto", "on", "off"))
    temperature: float | None = flag(None, "tau of simcse (0.05), sg (0.01), consert (0.1)")
    scale: float = flag(20.0, "mnrl: scale of the cosine similarities")
    negatives: bool = flag(True, "simcse on quora: push the non-duplicate pairs apart (seed 002); --no-negatives "
                                 "leaves them out (its Table 4 ablation)")
    negatives_per_positive: int = flag(7, "ct: K, negative pairs per positive pair (seed 000)")
    sg_lambda: float = flag(0.1, "sg, sg-opt: weight lambda of the L2 regulariser towards BERT_F (seed 001)")
    aug1: str = flag("shuffle", "consert: augmentation of the first view", choices=AUGMENTATIONS)
    aug2: str = flag("feature-cutoff", "consert: augmentation of the second view", choices=AUGMENTATIONS)
    schedule: str = flag("unsup", "consert: unsup, or NLI supervision added jointly / before (seed 004 section 3.3); "
                                  "the NLI stages read --data when it is NLI, else nli_for_simcse.csv of --data-dir",
                         choices=tuple(SCHEDULES))
    alpha: float = flag(0.15, "consert joint: L_ce + alpha * L_con")
    fgv_epsilon: float = flag(1.0, "consert adversarial view: norm of the FGV perturbation of each token")
    fusion: bool = flag(False, "seed 002 fusion: each SST batch takes a sentiment cross-entropy step, "
                               "then the contrastive step")
    grad_cache_chunk: int = flag(0, "embed each batch this many rows at a time with gradient caching: the same "
                                    "gradients with the memory of a small batch (0 = off)")
    eval: bool = flag(False, "STS benchmark before and after training: table printed, "
                             "sts_benchmark.json written to --output-dir")
    epochs: int = flag(1, "passes over the data (per stage)")
    max_steps: int = flag(0, "stop each stage after this many batches (0 = run all epochs)")
    max_train_examples: int = flag(0, "use a random sample of at most this many examples of each data file (0 = all)")
    batch_size: int | None = flag(None, "batch size (default per method: simcse 64, mnrl 32, ct 16, sg 16, "
                                        "consert 96)")
    lr: float | None = flag(None, "peak learning rate (default per method and data: simcse 5e-5 NLI, 2e-5 Quora, "
                                  "3e-5 sentences; mnrl 2e-5; ct 1e-5; sg 5e-5; consert 2e-5 NLI, 5e-7 unsup)")
    warmup: float | None = flag(None, "fraction of steps of linear warm-up before linear decay "
                                      "(default: 0.1 for mnrl and consert, else 0; ct has its own schedule)")
    weight_decay: float = flag(0.0, "AdamW decoupled weight decay")
    max_grad_norm: float = flag(1.0, "gradient clipping norm (0 = off)")
    max_length: int | None = flag(None, "tokens per sentence (default per method: simcse 32, ct 75, else 64)")
    eval_batch_size: int = flag(128, "batch size of --eval")
    seed: int = flag(11711, "random seed; the same seed gives the same run")
    output_dir: str = flag("", "checkpoint folder (default runs/pretrain-METHOD); ct writes OUT/model1, OUT/model2")
    device: str = flag("auto", "cpu, cuda, cuda:1, ... (auto: cuda when present)")
    precision: str = flag("auto", "auto: bf16 (or fp16) autocast on GPUs, fp32 on CPU", choices=PRECISIONS)

    def __post_init__(self):
        defaults = METHOD_DEFAULTS[self.method]
        for name in ("batch_size", "max_length", "pooling", "temperature", "warmup"):
            if getattr(self, name) is None:
                setattr(self, name, defaults.get(name))
        self.output_dir = self.output_dir or f"runs/pretrain-{self.method}"
        self._check()

    def _check(self):
        for name in ("epochs", "batch_size", "max_length", "eval_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
        if self.grad_cache_chunk < 0 or self.max_steps < 0:
            raise ValueError("--grad-cache-chunk and --max-steps must be at least 0")
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

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def backward(objective: Objective, batch, precision: Precision, grad_cache_chunk: int = 0) -> float:
    """Backpropagate the objective's loss on `batch` into .grad; returns the loss.

    With grad_cache_chunk, every view is embedded grad_cache_chunk rows at a time (training/grad_cache.py): the
    gradients of the whole batch, in-batch negatives included, with the activation memory of one chunk.
    """
    if not grad_cache_chunk:
        with precision.autocast():
            loss = objective(batch)
        precision.scale(loss).backward()
        return loss.item()
    views, losses = objective.views(batch), []

    def scaled_loss(*embeddings):
        loss = objective.loss_fp32(batch, *embeddings)
        losses.append(loss.detach())
        return precision.scale(loss)

    with precision.autocast():
        grad_cache_backward([v.embed for v in views], [split_rows(v.inputs, grad_cache_chunk) for v in views],
                            scaled_loss)
    return losses[0].item()


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
        self.device = resolve_device(config.device)
        self.precision = Precision(config.precision, self.device)
        self.output_dir = Path(config.output_dir)
        seed_everything(config.seed)
        self.tokenizer = Tokenizer.from_pretrained(config.model)
        self.encoder = from_pretrained(config.model)
        stage_names = SCHEDULES[config.schedule] if config.method == "consert" else ("train",)
        self.stages = [self._stage(name) for name in stage_names]
        self.fusion = None
        if config.fusion:
            if not any(isinstance(d, SentenceSet) and d.labels for stage in self.stages for d in stage.datasets):
                raise DataError(f"--fusion needs SST sentences with sentiment labels; --data {config.data} has none")
            self.fusion = SentimentFusion(self.stages[-1].objective.encoder, config.pooling).to(self.device)
        for stage in self.stages:
            stage.objective.to(self.device)

    def _stage(self, name: str) -> Stage:
        config = self.config
        objective = make_objective(config, self.encoder, name)
        data = config.data
        if name in ("sup", "joint") and not self._is_nli(config.data):
            if len(SCHEDULES[config.schedule]) == 1:
                raise DataError(f"--schedule joint trains on NLI triplets only; --data {config.data} is not NLI")
            data = "nli"  # the supervised stage of a two-stage schedule; --data is for the unsupervised one
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
        config, results = self.config, {}
        if config.eval:
            results["before"] = self._benchmark(self.encoder)
        metrics = {"stages": {stage.name: self._run_stage(stage) for stage in self.stages}}
        encoders = self.stages[-1].objective.encoders_to_save()
        if config.eval:
            for name, encoder in encoders.items():
                results[f"after {name}".strip()] = self._benchmark(encoder)
            print(markdown_table(results, TABLE_COLUMNS))
            metrics["sts_benchmark"] = results
        for name, encoder in encoders.items():
            save_checkpoint(self.output_dir / name, encoder, self.tokenizer, config.to_dict(), metrics)
        if config.eval:
            write_json(self.output_dir / "sts_benchmark.json",
                       {"model": config.model, "method": config.method, "pooling": config.pooling, "results": results})
        log.info("saved %s", ", ".join(str(self.output_dir / name) for name in encoders))
        return metrics

    def _run_stage(self, stage: Stage) -> dict:
        config, objective = self.config, stage.objective
        objective.train()
        trained = [objective] + ([self.fusion.train()] if self.fusion else [])
        parameters = list(dict.fromkeys(p for module in trained for p in module.parameters() if p.requires_grad))
        optimizer = AdamW(parameters, lr=stage.lr, betas=objective.adam_betas, weight_decay=config.weight_decay)
        plan = list(itertools.chain.from_iterable(objective.plan_epoch(stage.datasets, config.batch_size, config.seed,
                                                                       epoch) for epoch in range(config.epochs)))
        plan = plan[:config.max_steps] if config.max_steps else plan
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: objective.lr_multiplier(step, len(plan), config.warmup))
        chunk = config.grad_cache_chunk if objective.supports_grad_cache else 0
        log.info("%s %s: %d steps on %s, lr %.2g, batch %d", config.method, stage.name, len(plan),
                 " + ".join(f"{d.name} ({len(d):,})" for d in stage.datasets), stage.lr, config.batch_size)

        def update(module, batch, grad_cache_chunk=0) -> float:
            loss = backward(module, batch, self.precision, grad_cache_chunk)
            self.precision.step(optimizer, parameters, config.max_grad_norm)
            optimizer.zero_grad(set_to_none=True)
            return loss

        recent, updates = deque(maxlen=50), 0
        progress = tqdm(plan, desc=f"{config.method} {stage.name}", dynamic_ncols=True)
        for planned in progress:
            batch = planned.build(self.tokenizer.pad_id).to(self.device)
            if self.fusion and isinstance(batch, SentenceBatch) and batch.labels is not None:
                update(self.fusion, batch)  # fusion (seed 002): the sentiment step first, then the contrastive one
                updates += 1
            recent.append(update(objective, batch, chunk))
            updates += 1
            scheduler.step()
            progress.set_postfix(loss=f"{sum(recent) / len(recent):.4f}", source=planned.source)
        return {"steps": len(plan), "updates": updates, "lr": stage.lr,
                "final_loss": sum(recent) / max(1, len(recent))}

    def _benchmark(self, encoder) -> dict:
        return sts_benchmark(encoder, self.tokenizer, self.config.data_dir, self.config.pooling,
                             batch_size=self.config.eval_batch_size)
