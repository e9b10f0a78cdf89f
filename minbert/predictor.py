"""A trained multitask model that takes text: `MultitaskPredictor.from_run(folder)`, then its sentiment, paraphrase
and similarity predictions, one dict an example (what `minbert predict` prints).

    from minbert import MultitaskPredictor
    model = MultitaskPredictor.from_run("runs/multitask")
    model.sentiment(["A gorgeous, witty film."])           # [{"class": 4, "name": "positive", "probabilities": [...]}]
    model.paraphrase([("How do I ...?", "What is ...?")])  # [{"paraphrase": 1, "probability": 0.93}]
    model.similarity([("A man plays.", "Someone plays.")])  # [{"similarity": 4.1}]
"""
from pathlib import Path

import torch

from minbert import checkpoint
from minbert.common import cli, run_folder
from minbert.common.errors import CheckpointError
from minbert.common.precision import Precision
from minbert.common.run_folder import RunFolder
from minbert.data.splits import TaskSplit, encode_views
from minbert.evaluation.inference import soft_outputs
from minbert.model_config import ModelConfig
from minbert.models import Tokenizer
from minbert.models.quantize import inference_precision, quantize_encoder
from minbert.task_info import PARAPHRASE, SENTIMENT, SIMILARITY
from minbert.tasks import REGISTRY


class MultitaskPredictor:
    """A trained multitask model that takes text. Every method takes a list and returns one dict an example."""

    def __init__(self, model, tokenizer: Tokenizer, config: ModelConfig, max_length: int, batch_size: int = 128,
                 precision: str = "auto", quantize: str = "none"):
        """precision: common/precision.py's PRECISIONS (auto: bf16 autocast where the device computes bf16);
        quantize: common/choices.py's QUANTIZATIONS (int8: the encoder's Linear layers quantized in place)."""
        self.model, self.tokenizer, self.config, self.batch_size = model.eval(), tokenizer, config, batch_size
        self.max_length, self.quantize = max_length, quantize
        device = next(model.parameters()).device
        self.precision = Precision(inference_precision(quantize, device, precision), device)
        self.quantized_layers = quantize_encoder(model.encoder, quantize)

    @classmethod
    def from_run(cls, run: str | Path, device: str = "auto", batch_size: int = 128,
                 precision: str = "auto", quantize: str = "none", partial: bool = False) -> "MultitaskPredictor":
        """The model of a finished run of `minbert train` (its best/ checkpoint), or of one of its checkpoint folders;
        a folder that is none of these (an encoder alone, a run with no checkpoint yet) is a CheckpointError saying
        why. device: cpu, cuda, ... (auto: cuda when present); quantize: "int8" runs the encoder's Linear layers in
        int8 on a CPU (dynamic quantization), "none" in the precision given; partial: --allow-partial-load."""
        device = cli.resolve_device(device)
        inference_precision(quantize, device, precision)  # FlagError before any loading
        folder = RunFolder(run).checkpoint()
        if not Path(run).exists():
            raise CheckpointError(f"{run}: not found")
        if not run_folder.has_config(folder) and run_folder.has_config(run):  # the run's own, but not its best/'s
            raise CheckpointError(f"{folder}: no {run_folder.RUN_CONFIG}, the flags its model was trained with; put it "
                                  f"back ({run_folder.config_file(run)} is the run's, not the checkpoint's)")
        if not run_folder.has_config(folder):
            raise CheckpointError(f"{run}: not a run of multitask_classifier.py (no {run_folder.RUN_CONFIG} in it or "
                                  f"in its {run_folder.BEST}/)")
        if folder == Path(run) and (Path(run) / f".{run_folder.BEST}.old").is_dir():  # between a save's renames
            raise CheckpointError(f"{run}: its {run_folder.BEST}/ is being replaced by a save this moment; try again "
                                  f"once the save ends")
        if folder == Path(run) and RunFolder(run).is_run():
            raise CheckpointError(f"{run}: a run with no checkpoint yet (no {run_folder.BEST}/): it saves one at its "
                                  f"first evaluation; predict once it has")
        if not checkpoint.has_heads(folder):
            inits = " or ".join(f"--init {encoder}" for encoder in RunFolder(folder).encoders())
            raise CheckpointError(f"{folder}: an encoder-only checkpoint (no {checkpoint.HEADS}; "
                                  f"pretrain_contrastive.py writes these): it has no task heads to predict with; "
                                  f"fine-tune it first: "
                                  f"{cli.printed_command(cli.program('multitask_classifier.py', 'train'))} {inits}")
        config = checkpoint.model_config(folder)
        try:
            max_length = int(run_folder.read_config(folder)["max_length"])
        except (TypeError, ValueError, KeyError) as error:
            raise CheckpointError(f"{run_folder.config_file(folder)}: not a multitask run's configuration "
                                  f"({error})") from None
        model = checkpoint.load(folder, config, device=device, partial=partial)
        return cls(model, Tokenizer.from_pretrained(folder), config, max_length, batch_size, precision, quantize)

    @property
    def tasks(self) -> list[str]:
        """The tasks the model was trained on, e.g. ["sst", "para", "sts"]."""
        return self.config.task_list

    def soft_outputs(self, task: str, examples: list) -> torch.Tensor:
        """The task's soft outputs (tasks.Task.soft) for sentences, or (sentence1, sentence2) pairs."""
        if task not in self.tasks:
            raise ValueError(f"this model was trained on {', '.join(self.tasks)}, not {task}")
        spec = REGISTRY[task]
        texts = [tuple(example) if spec.pair else (example,) for example in examples]
        if any(len(text) != (2 if spec.pair else 1) for text in texts):
            raise ValueError(f"{task} takes {'(sentence1, sentence2) pairs' if spec.pair else 'sentences'}")
        views = encode_views(self.tokenizer, texts, self.config.head_options.encoding(spec), self.max_length,
                             source=f"{task} input")
        split = TaskSplit(task, [str(i) for i in range(len(texts))], views, None)
        return soft_outputs(self.model, split, self.tokenizer.pad_id, self.batch_size, self.precision.autocast)

    def predictions(self, task: str, examples: list) -> list[dict]:
        """One dict an example, in words (tasks.Task.describe)."""
        return REGISTRY[task].describe(self.soft_outputs(task, examples))

    def sentiment(self, sentences: list[str], task: str = SENTIMENT) -> list[dict]:
        """Each sentence's class: {"class": 0-4, "name": "negative" ... "positive", "probabilities": [5 floats]}
        (task="cfimdb": the course's fourth task, 2 classes)."""
        return self.predictions(task, sentences)

    def paraphrase(self, pairs: list[tuple[str, str]], task: str = PARAPHRASE) -> list[dict]:
        """Whether each (sentence1, sentence2) pair is a paraphrase: {"paraphrase": 0 or 1, "probability": P}."""
        return self.predictions(task, pairs)

    def similarity(self, pairs: list[tuple[str, str]], task: str = SIMILARITY) -> list[dict]:
        """How similar each (sentence1, sentence2) pair is: {"similarity": 0 to 5}."""
        return self.predictions(task, pairs)
