"""Predictions of a finished multitask run on new text: sentiment classes, paraphrase probabilities, similarity scores.

    python predict.py runs/multitask --sst "A gorgeous, witty film." --para "How do I learn Python?" "What is
        the best way to learn Python?" --sts "A man plays a guitar." "Someone plays guitar."
    python predict.py runs/multitask --task sst --input my-sentences.txt --output predictions.tsv

RUN is a run folder (its best/ checkpoint is used) or a checkpoint folder of multitask_classifier.py. --input
reads the course's CSV formats (the columns id, sentence or id, sentence1, sentence2) or plain text: one sentence
a line, or for pair tasks the two sentences of a pair on one line separated by a tab.

In Python:
    from predict import MultitaskPredictor
    model = MultitaskPredictor.from_run("runs/multitask")
    model.sentiment(["A gorgeous, witty film."])           # [{"class": 4, "name": "positive", "probabilities": [...]}]
    model.paraphrase([("How do I ...?", "What is ...?")])  # [{"paraphrase": 1, "probability": 0.93}]
    model.similarity([("A man plays.", "Someone plays.")])  # [{"similarity": 4.1}]
"""
import csv
import dataclasses
import sys
from pathlib import Path

import torch

from common import cli
from common.errors import CheckpointError, DataError, UsageError
from common.files import atomic_file, check_writable_file, read_json
from data.readers import read_text, text_lines
from data.splits import TaskSplit, encode_views
from evaluation.inference import soft_outputs
from model import ModelConfig, build_model
from models import Tokenizer
from models.checkpoint import load_heads
from tasks import PARAPHRASE, REGISTRY, SENTIMENT, SIMILARITY, Task


class MultitaskPredictor:
    """A trained multitask model that takes text. Every method takes a list and returns one dict an example."""

    def __init__(self, model, tokenizer: Tokenizer, config: ModelConfig, max_length: int, batch_size: int = 128):
        self.model, self.tokenizer, self.config, self.batch_size = model.eval(), tokenizer, config, batch_size
        self.max_length = max_length

    @classmethod
    def from_run(cls, run: str | Path, device: str = "auto", batch_size: int = 128) -> "MultitaskPredictor":
        folder = Path(run)
        if (folder / "best" / "run_config.json").is_file():
            folder = folder / "best"
        if not (folder / "run_config.json").is_file():
            raise CheckpointError(f"{run}: not a run of multitask_classifier.py (no best/run_config.json or "
                                  f"run_config.json)")
        if not (folder / "heads.safetensors").is_file():
            raise CheckpointError(f"{folder}: an encoder-only checkpoint (no heads.safetensors; "
                                  f"pretrain_contrastive.py writes these): it has no task heads to predict with; "
                                  f"fine-tune it first with multitask_classifier.py --init {folder}")
        run_config = read_json(folder / "run_config.json")
        fields = {f.name for f in dataclasses.fields(ModelConfig)}
        try:
            config = ModelConfig(**{name: value for name, value in run_config.items() if name in fields})
            max_length = int(run_config["max_length"])
        except (TypeError, ValueError, KeyError) as error:
            raise CheckpointError(f"{folder / 'run_config.json'}: not a multitask run's configuration ({error})") from None
        model = build_model(config, folder)
        load_heads(model, folder)
        return cls(model.to(cli.resolve_device(device)), Tokenizer.from_pretrained(folder), config, max_length,
                   batch_size)

    @property
    def tasks(self) -> list[str]:
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
        return soft_outputs(self.model, split, self.tokenizer.pad_id, self.batch_size)

    def predictions(self, task: str, examples: list) -> list[dict]:
        """One dict an example, in words (tasks.Task.describe)."""
        return REGISTRY[task].describe(self.soft_outputs(task, examples))

    def sentiment(self, sentences: list[str], task: str = SENTIMENT) -> list[dict]:
        return self.predictions(task, sentences)

    def paraphrase(self, pairs: list[tuple[str, str]], task: str = PARAPHRASE) -> list[dict]:
        return self.predictions(task, pairs)

    def similarity(self, pairs: list[tuple[str, str]], task: str = SIMILARITY) -> list[dict]:
        return self.predictions(task, pairs)


# ---- the command ----

def read_examples(path: Path, task: Task) -> tuple[list[str], list]:
    """(ids, examples) of a course CSV file (it has an id column) or a plain text file (ids are line numbers)."""
    lines = text_lines(read_text(path))
    header = [name.strip() for name in lines[0].split("\t")] if lines else []
    if "id" in header:
        records = task.read(path, labeled=False)
        ids, examples = [r.id for r in records], [(r.sentence1, r.sentence2) if task.pair else r.sentence
                                                  for r in records]
    else:
        ids, examples = [], []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            parts = line.split("\t")
            if task.pair and len(parts) != 2:
                raise DataError(f"{path}: line {number}: a {task.name} example is two sentences separated by a tab")
            ids.append(str(number))
            examples.append(tuple(part.strip() for part in parts) if task.pair else line.strip())
    if not examples:
        raise DataError(f"{path}: no examples to predict")
    return ids, examples


def parse_args(argv: list[str] | None):
    parser = cli.Parser(prog="predict.py", description=__doc__, formatter_class=cli.HelpFormatter)
    parser.add_argument("run", help="the run folder (its best/ checkpoint is used) or a checkpoint folder of "
                                    "multitask_classifier.py")
    for name, task in REGISTRY.items():  # --sst SENTENCE, --para S1 S2, ...: an example of each task
        parser.add_argument(f"--{name}", nargs=2 if task.pair else None, metavar=("S1", "S2") if task.pair else None,
                            help=f"predict {task.description} of {'two sentences' if task.pair else 'a sentence'}")
    parser.add_argument("--task", choices=REGISTRY, help="the task of --input: " + "; ".join(
        f"{name}, {task.description}" for name, task in REGISTRY.items()))
    parser.add_argument("--input", help="a file of examples: the course's CSV format, or one example a line "
                                        "(a pair's two sentences separated by a tab)")
    parser.add_argument("--output", help="write the predictions here (tab-separated) instead of printing them")
    parser.add_argument("--batch-size", type=int, default=128, help="examples per batch")
    parser.add_argument("--device", default="auto", help="cpu, cuda, ... (auto: cuda when present)")
    args = parser.parse_args(argv)
    if args.input and not args.task:
        parser.error("--input needs --task")
    if not args.input and not any(getattr(args, task, None) for task in REGISTRY):
        parser.error(f"nothing to predict: give {', '.join(f'--{name}' for name in REGISTRY)}, or --input with "
                     f"--task")
    if args.batch_size < 1:
        parser.error("--batch-size must be at least 1")
    return args


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    # What can fail on the inputs fails before anything is predicted (the tasks once the run says which it has).
    if args.output:
        check_writable_file(args.output, "--output")
    if args.input:
        ids, examples = read_examples(Path(args.input), REGISTRY[args.task])
    model = MultitaskPredictor.from_run(args.run, args.device, args.batch_size)
    for task in [args.task] if args.input else [task for task in REGISTRY if getattr(args, task, None)]:
        if task not in model.tasks:
            flag = f"--task {task}" if args.input else f"--{task}"
            raise UsageError(f"{flag}: {args.run} was trained on {', '.join(model.tasks)}, not {task}")
    if args.input:
        results = [{"id": i, **r} for i, r in zip(ids, model.predictions(args.task, examples))]
    else:
        results = [{"task": task, "input": " | ".join(example) if isinstance(example, list) else example,
                    **model.predictions(task, [example])[0]}
                   for task in REGISTRY if (example := getattr(args, task, None))]
    write_results(results, args.output)
    return results


def write_results(results: list[dict], output: str) -> None:
    columns = list(dict.fromkeys(key for result in results for key in result))
    if output:
        with atomic_file(output) as temp, open(temp, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, columns, delimiter="\t")
            writer.writeheader()
            writer.writerows(results)
        print(f"{len(results)} predictions in {output}", file=sys.stderr)
        return
    for result in results:
        print("  ".join(f"{key}: {shown(value)}" for key, value in result.items()))


def shown(value) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, list):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    return str(value)


if __name__ == "__main__":
    cli.run(main)
