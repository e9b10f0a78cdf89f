"""Predictions of a finished multitask run on new text: sentiment classes, paraphrase probabilities, similarity scores.

    minbert predict runs/multitask --sst "A gorgeous, witty film." \\
        --para "How do I learn Python?" "What is the best way to learn Python?" \\
        --sts "A man plays a guitar." "Someone plays guitar."
    minbert predict runs/multitask --task sst --input my-sentences.txt --output predictions.tsv
    minbert predict runs/multitask --task sst --input ../shared/data/ids-sst-test-student.csv \\
        --output sst-test-output.csv

RUN is a run folder (its best/ checkpoint is used) or a checkpoint folder of multitask_classifier.py. --input
reads the course's CSV formats (the columns id, sentence or id, sentence1, sentence2) or plain text: one sentence
a line, or for pair tasks the two sentences of a pair on one line separated by a tab. The file is checked whole
before anything is predicted, then predicted a chunk at a time, each chunk's predictions written before the next
is read: memory stays bounded whatever the file's size. The --output file is written beside its place and takes it
once complete: an interrupted command (Ctrl-C, SIGTERM) leaves the file that was there as it was, or none, and says
so. A file that exists is replaced only if a command of ours wrote it (its record beside it says so), or with
--overwrite.
--output writes a table (tab-separated, the columns printed) or, named *.csv or with --format leaderboard, the
course's leaderboard file (the id and the prediction, as multitask_classifier.py writes them).

In Python:
    from minbert import MultitaskPredictor
    model = MultitaskPredictor.from_run("runs/multitask")
    model.sentiment(["A gorgeous, witty film."])           # [{"class": 4, "name": "positive", "probabilities": [...]}]
    model.paraphrase([("How do I ...?", "What is ...?")])  # [{"paraphrase": 1, "probability": 0.93}]
    model.similarity([("A man plays.", "Someone plays.")])  # [{"similarity": 4.1}]
"""
from __future__ import annotations

import csv
import io
import logging
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import nullcontext
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm import tqdm

from minbert.common import cli
from minbert.common.allocator import keep_large_blocks_out_of_the_heap
from minbert.common.errors import DataError, Interrupted, UsageError
from minbert.common.outputs import output_file, write_output
from minbert.common.choices import ALLOW_PARTIAL_LOAD_HELP, PRECISION_HELP, PRECISIONS, QUANTIZATIONS, QUANTIZE_HELP
from minbert.data.readers import ReadReport, text_lines
from minbert.task_info import TASKS

# The model and the tasks' code load torch: imported where a prediction is made (predict, predict_file), so that
# --help answers at once.
if TYPE_CHECKING:
    from minbert.predictor import MultitaskPredictor
    from minbert.tasks import Task

log = logging.getLogger(__name__)
WRITER = "predict.py"  # who wrote an --output file, as its record says (common.outputs.write_output)
CHUNK = 4096  # examples of an --input file predicted and written at a time
# --format: what each writes (its help).
FORMATS = {"table": "tab-separated, a header and a row an example: id, then the columns printed (sst and cfimdb: "
                    "class, name, probabilities; para: paraphrase, probability; sts: similarity)",
           "leaderboard": "the course's leaderboard file, as multitask_classifier.py writes it: the header "
                          "'id \\t Predicted_Sentiment' (para: Predicted_Is_Paraphrase, sts: Predicted_Similarity), "
                          "then 'id , prediction' rows (sst and cfimdb: the class 0-4 or 0-1; para: 0 or 1; sts: "
                          "the score 0-5); with --input only"}


class InputFile:
    """The examples of an --input file, read as they are needed: once whole before anything is predicted, so that
    every problem of the file stops the command first (and the examples are counted), then a chunk at a time.
    A course CSV file (it has an id column) is read by its task's reader; in a plain text file an example is a
    line (ids are line numbers)."""

    def __init__(self, path: Path, task: Task):
        self.path, self.task = path, task
        first = next(text_lines(path), "").rstrip("\r\n")
        self.course_format = "id" in (name.strip() for name in first.split("\t"))
        if not self.course_format and "id" in (name.strip() for name in first.split(",")):
            raise DataError(f"{path}: line 1 is a header of comma-separated columns ({first}); predict.py reads the "
                            f"course's tab-separated files, or one example a line: separate the columns by tabs, or "
                            f"remove the header")
        report = ReadReport(path)
        self.count = sum(1 for _ in self.examples(report))
        if not self.count:
            raise DataError(f"{path}: no examples to predict")
        report.kept = self.count
        if not self.course_format:  # its reader counts a course file's rows
            report.rows = self.count
        report.log()

    def examples(self, report: ReadReport) -> Iterator[tuple[str, str | tuple[str, str]]]:
        """(id, example) of each example in the file, in its order; what cannot be read is counted in the report."""
        task = self.task
        if self.course_format:
            for record in task.records(self.path, False, report):
                yield record.id, (record.sentence1, record.sentence2) if task.pair else record.sentence
            return
        for number, line in enumerate(text_lines(self.path, report), start=1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            parts = line.split("\t")
            if task.pair and len(parts) != 2:
                raise DataError(f"{self.path}: line {number}: a {task.name} example is two sentences separated by a "
                                f"tab")
            yield str(number), tuple(part.strip() for part in parts) if task.pair else line.strip()

    def chunks(self, size: int) -> Iterator[tuple[list[str], list]]:
        """(ids, examples) of up to `size` examples at a time (the file was checked whole: its report is not kept)."""
        examples = self.examples(ReadReport(self.path))
        while chunk := list(islice(examples, size)):
            ids, texts = zip(*chunk)
            yield list(ids), list(texts)


def parse_args(argv: list[str] | None):
    parser = cli.Parser(program=cli.program("predict.py", "predict"), description=__doc__,
                        formatter_class=cli.HelpFormatter)
    parser.add_argument("run", help="the run folder (its best/ checkpoint is used) or a checkpoint folder of "
                                    "multitask_classifier.py")
    for name, task in TASKS.items():  # --sst SENTENCE, --para S1 S2, ...: an example of each task
        parser.add_argument(f"--{name}", nargs=2 if task.pair else None, metavar=("S1", "S2") if task.pair else None,
                            help=f"predict {task.description} of {'two sentences' if task.pair else 'a sentence'}")
    parser.add_argument("--task", choices=TASKS, help="the task of --input: " + "; ".join(
        f"{name}, {task.description}" for name, task in TASKS.items()))
    parser.add_argument("--input", help="a file of examples: the course's CSV format, or one example a line "
                                        "(a pair's two sentences separated by a tab)")
    parser.add_argument("--output", help="write the predictions here in --format's format instead of printing them; "
                                         "a file that exists is replaced only if a command of ours wrote it, or with "
                                         "--overwrite")
    parser.add_argument("--overwrite", action="store_true", help="replace an --output file that no command of ours "
                                                                 "wrote (never an input, a checkpoint's file or a "
                                                                 "link)")
    parser.add_argument("--format", choices=["auto", *FORMATS], default="auto", help="the --output file's columns. "
                        + " ".join(f"{name}: {text}." for name, text in FORMATS.items())
                        + " auto: leaderboard for an --output named *.csv with --input, else table")
    parser.add_argument("--batch-size", type=int, default=128, help="examples per batch", range=cli.AT_LEAST_1)
    parser.add_argument("--device", default="auto", help="cpu, cuda, ... (auto: cuda when present)")
    parser.add_argument("--precision", default="auto", choices=PRECISIONS, help=PRECISION_HELP)
    parser.add_argument("--quantize", default="none", choices=QUANTIZATIONS, help=QUANTIZE_HELP)
    parser.add_argument("--allow-partial-load", action="store_true", help=ALLOW_PARTIAL_LOAD_HELP)
    args = parser.parse_args(argv)
    if args.input and not args.task:
        parser.error("--input needs --task")
    if not args.input and not examples_given(args):
        parser.error(f"nothing to predict: give {', '.join(f'--{name}' for name in TASKS)}, or --input with "
                     f"--task")
    for task, example in examples_given(args).items():
        if not all(text.strip() for text in ([example] if isinstance(example, str) else example)):
            parser.error(f"--{task}: an empty sentence; give the text to predict")
    if args.format == "leaderboard" and not (args.input and args.output):
        parser.error("--format leaderboard: needs --input and --output (a leaderboard file's rows are the ids of a "
                     "file's examples)")
    if args.format == "auto":
        args.format = "leaderboard" if args.input and args.output and args.output.endswith(".csv") else "table"
    return args


def examples_given(args) -> dict:
    """The examples of the command line: task -> a sentence, or a pair's two."""
    return {task: getattr(args, task) for task in TASKS if getattr(args, task) is not None}


def main(argv: list[str] | None = None) -> list[dict] | None:
    """The predictions of the examples on the command line; an --input file's are written as they are made."""
    args = parse_args(argv)
    with output_file(args.output, "--output", {"--input": args.input}, args.overwrite) if args.output else \
            nullcontext():
        return predict(args)


def predict(args) -> list[dict] | None:
    from minbert.predictor import MultitaskPredictor
    from minbert.tasks import REGISTRY

    # What can fail on the inputs fails before anything is predicted (the tasks once the run says which it has).
    source = InputFile(Path(args.input), REGISTRY[args.task]) if args.input else None
    model = MultitaskPredictor.from_run(args.run, args.device, args.batch_size, args.precision, args.quantize,
                                       partial=args.allow_partial_load)
    for task in [args.task] if args.input else examples_given(args):
        if task not in model.tasks:
            flag = f"--task {task}" if args.input else f"--{task}"
            raise UsageError(f"{flag}: {args.run} was trained on {', '.join(model.tasks)}, not {task}")
    log.info("precision %s", model.precision.describe())
    if model.quantized_layers:
        log.info("--quantize int8: the encoder's %d Linear layers compute in int8", model.quantized_layers)
    if source:
        keep_large_blocks_out_of_the_heap()
        predict_file(model, source, args.output, args.format == "leaderboard")
        return None
    results = [{"task": task, "input": " | ".join(example) if isinstance(example, list) else example,
                **model.predictions(task, [example])[0]} for task, example in examples_given(args).items()]
    if args.output:
        with write_output(args.output, WRITER) as temp, open(temp, "w", newline="", encoding="utf-8") as f:
            write_rows(f, results, header=True)
        print(f"{len(results)} predictions in {args.output}", file=sys.stderr)
    else:
        print_rows(results)
    return results


def predict_file(model: MultitaskPredictor, source: InputFile, output: str | None, leaderboard: bool = False) -> None:
    """Every example of the file, a chunk at a time, each chunk's predictions written (or printed) before the next
    chunk is read; progress on a terminal's bar, or a log line a chunk. leaderboard: --output in the course's
    leaderboard format. Ctrl-C or SIGTERM stops it with one line saying what was kept."""
    from minbert.evaluation.predictions import header_line, row_line

    task = source.task
    started, done, existed = time.time(), 0, bool(output) and Path(output).exists()
    try:
        with cli.sigterm_stops(), \
                (write_output(output, WRITER) if output else nullcontext()) as temp, \
                (open(temp, "wb") if output else nullcontext(sys.stdout)) as out, \
                tqdm(total=source.count, unit="example", disable=not (output and sys.stderr.isatty())) as bar:
            for ids, examples in source.chunks(CHUNK):
                if leaderboard:
                    hard = task.hard(model.soft_outputs(task.name, examples)).tolist()
                    out.write(((header_line(task.name) if not done else "")
                               + "".join(row_line(task.name, i, value) for i, value in zip(ids, hard))).encode())
                else:
                    results = [{"id": i, **r} for i, r in zip(ids, model.predictions(task.name, examples))]
                    if output:
                        text = io.StringIO(newline="")
                        write_rows(text, results, header=not done)
                        out.write(text.getvalue().encode())
                    else:
                        print_rows(results)
                done += len(ids)
                bar.update(len(ids))
                if not sys.stderr.isatty():
                    log.info("predicted %s of %s examples (%.0f s)", f"{done:,}", f"{source.count:,}",
                             time.time() - started)
    except KeyboardInterrupt as stop:
        kept = ("the predictions printed above" if not output else f"--output {output} as it was before" if existed
                else f"no --output {output}")
        raise Interrupted(f"interrupted after {done:,} of {source.count:,} predictions: kept {kept}; the same "
                          f"command predicts the file again", getattr(stop, "signal_number", signal.SIGINT)) from None
    if output:
        print(f"{done} predictions in {output}", file=sys.stderr)


def write_rows(file, results: list[dict], header: bool) -> None:
    writer = csv.DictWriter(file, list(dict.fromkeys(key for result in results for key in result)), delimiter="\t",
                            lineterminator="\n")  # every line as the rows of a chunk end: LF
    if header:
        writer.writeheader()
    writer.writerows(results)


def print_rows(results: list[dict]) -> None:
    for result in results:
        print("  ".join(f"{key}: {shown(value)}" for key, value in result.items()))


def shown(value) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, list):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    return str(value)

