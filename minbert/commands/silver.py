"""Silver data: new training examples labelled by a teacher, for `minbert train --silver FOLDER`.

    minbert silver --teacher runs/a,runs/b,runs/c --out runs/silver
    minbert silver --teacher runs/ensemble/ensemble.json --out runs/silver     # a mean ensemble's members

The teacher is a finished run, or several: their mean (an ensemble, which the student then distils into one model).
SST (and CFIMDB): the sentences of --bank nearest to the task's training sentences, by the cosine of their
--retriever embeddings (SentAugment), labelled by the teacher; of each class the --per-class most confident are
kept, with the teacher's probabilities, which the student learns: the most confident keep the teacher's mistakes
few, and a number a class keeps the classes as balanced as the teacher allows. Quora and STS: new pairs of the
task's training sentences, each with its nearest neighbour and with a random one (Augmented SBERT), all labelled by
the teacher's own head for the task. No dev or test sentence of any task enters them.

Writes into --out: {task}-silver.csv (the course's format, plus the soft_label column), {task}.json (what made
the file, and the counts: retrieved, removed as dev or test sentences, removed as training copies, kept) and
silver.json (all of them); a file of those names that no command of ours wrote is refused before any silver data
is made, unless --overwrite. The bank's embeddings are kept in --cache-dir, once per bank and --retriever; an
interrupted command, run again, goes on from the tasks and the bank chunks it finished.
"""
import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path

from minbert.common import cli
from minbert.common.cli import AT_LEAST_0, AT_LEAST_1, SEED, check_ranges, flag, parse_task_order
from minbert.common.errors import DataError, UsageError
from minbert.common.files import DEFAULT_DATA, check_writable, in_repository, read_json, write_json
from minbert.common.outputs import check_files, output_folder, write_output, written_by
from minbert.task_info import COURSE_TASKS, TASK_NAMES, TASKS

log = logging.getLogger(__name__)
BANK = "unlabeled-sentences.txt"  # the course's unlabeled sentences, in --data-dir
WRITER = "minbert silver"  # who wrote the files of --out, as their records say (common.outputs.write_output)


@dataclass
class SilverConfig:
    teacher: str = flag("", "the teacher (required): a finished run of `minbert train`, several comma-separated "
                            "(the mean of their outputs), or the report (--out) of a `minbert ensemble --method mean`")
    out: str = flag(in_repository("runs/silver"), "the silver folder to write; a file there is replaced only if a "
                                                  "command of ours wrote it, or with --overwrite")
    tasks: str = flag(",".join(COURSE_TASKS), "the tasks to make silver data for")
    bank: str = flag("", "sentence tasks: the unlabeled sentences to retrieve from, one a line (UTF-8) (default: "
                         f"--data-dir's {BANK})")
    bank_sample: int = flag(0, "sentence tasks: retrieve from a random sample of at most this many bank sentences "
                               "(0 = the whole bank)", range=AT_LEAST_0)
    retriever: str = flag("all-MiniLM-L6-v2", "the encoder whose sentence embeddings find neighbours")
    neighbours: int = flag(4, "sentence tasks: bank sentences retrieved for each training sentence",
                           range=AT_LEAST_1)
    per_class: int = flag(500, "sentence tasks: the examples of each class kept, the teacher's most confident (K)",
                          range=AT_LEAST_1)
    pair_sentences: int = flag(2000, "pair tasks: training sentences drawn to pair up (each gives a pair with its "
                                     "nearest neighbour and one with a random sentence)", range=AT_LEAST_1)
    cache_dir: str = flag(in_repository("runs/bank-embeddings"), "where the bank's embeddings are kept")
    data_dir: str = flag(str(DEFAULT_DATA), "folder with the course's data files")
    seed: int = flag(0, "seed of the samples (bank, pair sentences, random partners)", range=SEED)
    device: str = flag("auto", "cpu, cuda, mps or auto")
    overwrite: bool = flag(False, "replace a file in --out, of a name this command writes, that no command of ours "
                                  "wrote (never a link)")
    COMMAND_LINE_ONLY = ("overwrite",)  # typed each time, never taken from a --config file

    def __post_init__(self):
        check_ranges(self)
        if not self.teacher.strip():
            raise ValueError("--teacher: give a finished run (or several, comma-separated)")
        self.task_list = parse_task_order(self.tasks, TASK_NAMES, "--tasks")

    def settings(self, task: str) -> dict:
        """What a task's file depends on: a file made under other settings is made again."""
        shared = {"teacher": self.teacher_runs(), "seed": self.seed, "retriever": self.retriever}
        if TASKS[task].pair:
            return {**shared, "pair_sentences": self.pair_sentences}
        return {**shared, "bank": str(self.bank_file().resolve()), "bank_sample": self.bank_sample,
                "neighbours": self.neighbours, "per_class": self.per_class}

    def bank_file(self) -> Path:
        """--bank, or --data-dir's bank when it is left out."""
        return Path(self.bank) if self.bank else Path(self.data_dir) / BANK

    def check_files(self) -> None:
        """Before a teacher is loaded, for a sentence task: the bank, and a --cache-dir that can be written
        (UsageError naming the flag)."""
        if all(TASKS[task].pair for task in self.task_list):
            return
        if not self.bank_file().is_file():
            given = "" if self.bank else " (--data-dir's; no --bank was given)"
            raise UsageError(f"--bank {self.bank_file()}: no such file{given}; give --bank, a file of the unlabeled "
                             f"sentences to retrieve from")
        if Path(self.cache_dir).exists() and not Path(self.cache_dir).is_dir():
            raise UsageError(f"--cache-dir {self.cache_dir}: a file; give a folder for the bank's embeddings")
        check_writable(self.cache_dir, "--cache-dir")

    def teacher_runs(self) -> list[str]:
        """The runs of --teacher: an ensemble's report names its members."""
        if self.teacher.endswith(".json") and Path(self.teacher).is_file():
            try:
                report = json.loads(Path(self.teacher).read_text(encoding="utf-8"))
                method, members = report["method"], list(report["members"])
            except (OSError, ValueError, KeyError, TypeError):
                raise UsageError(f"--teacher {self.teacher}: not the report of `minbert ensemble`") from None
            if method != "mean":
                raise UsageError(f"--teacher {self.teacher}: an ensemble of --method {method}, whose weights differ "
                                 f"a task; the teacher is the mean of its runs: make one with --method mean")
            return members
        return [run.strip() for run in self.teacher.split(",") if run.strip()]


def sampled_bank(config: SilverConfig) -> list[str]:
    from minbert.data.retrieval import read_bank

    bank = read_bank(config.bank_file())
    if config.bank_sample and config.bank_sample < len(bank):
        keep = sorted(random.Random(config.seed).sample(range(len(bank)), config.bank_sample))
        bank = [bank[i] for i in keep]
    for flag_name, value in (("--per-class", config.per_class), ("--neighbours", config.neighbours)):
        if value > len(bank):
            raise DataError(f"{flag_name} {value}: more than the {len(bank):,} sentences of the bank "
                            f"{config.bank_file()}")
    return bank


def make(config: SilverConfig) -> dict:
    """Write the silver folder; returns silver.json's record."""
    config.check_files()
    # The work loads torch: imported once the flags are parsed, so that --help answers at once.
    from minbert.data.retrieval import BankEmbeddings
    from minbert.data.silver import INFO, file_name
    from minbert.models.sentence_encoder import SentenceEncoder
    from minbert.tasks import REGISTRY
    from minbert.training.silver import HeldOut, Teacher, pair_silver, sentence_silver

    teacher = Teacher(config.teacher_runs(), device=str(cli.resolve_device(config.device)))
    teacher.check(list(config.task_list))
    data_dir = Path(config.data_dir)
    with output_folder(config.out, "--out") as folder:
        check_files(folder, [INFO, *(name for task in config.task_list for name in (file_name(task), f"{task}.json"))],
                    "--out", config.overwrite)
        records, todo = {}, []
        for task in config.task_list:
            record_file = folder / f"{task}.json"
            # Kept only as this command wrote them: a user's files of these names are made again (with --overwrite).
            if written_by(folder / file_name(task)) == WRITER and written_by(record_file) == WRITER and \
                    read_json(record_file).get("settings") == config.settings(task):
                log.info("%s: already written with these settings (%s); kept", task, folder / file_name(task))
                records[task] = read_json(record_file)
            else:
                todo.append(task)
        if todo:
            retriever = SentenceEncoder.from_pretrained(config.retriever, device=str(cli.resolve_device(config.device)))
            held_out = HeldOut(data_dir)
            bank = cache = None
            for task in todo:
                spec = REGISTRY[task]
                train = spec.read(data_dir / spec.files[0], labeled=True)
                if spec.pair:
                    silver, counts = pair_silver(spec, train, teacher, retriever, held_out, config.pair_sentences,
                                                 config.seed)
                else:
                    if bank is None:
                        bank = sampled_bank(config)
                        cache = BankEmbeddings(retriever, config.retriever, bank, config.cache_dir)
                    silver, counts = sentence_silver(spec, train, teacher, retriever, bank, cache, held_out,
                                                     config.neighbours, config.per_class)
                if not len(silver):
                    raise DataError(f"{task}: no silver examples are left (counts: {counts})")
                with write_output(folder / file_name(task), WRITER) as temp:
                    spec.write_silver(temp, silver)
                records[task] = {"settings": config.settings(task), "counts": counts,
                                 "file": file_name(task), "examples": len(silver)}
                with write_output(folder / f"{task}.json", WRITER) as temp:
                    write_json(temp, records[task])
                log.info("%s: %s silver examples in %s; counts: %s", task, f"{len(silver):,}",
                         folder / file_name(task), json.dumps(counts))
        info = {"teacher": teacher.describe(), "retriever": config.retriever, "tasks": records}
        with write_output(folder / INFO, WRITER) as temp:
            write_json(temp, info)
    return info


def main(argv: list[str] | None = None) -> dict:
    config = cli.parse_config(SilverConfig, __doc__, argv, program=cli.program("-m minbert silver", "silver"))
    from minbert.data.silver import INFO  # loads torch, as the work does: once the flags are parsed

    info = make(config)
    for task, record in info["tasks"].items():
        print(f"{task}: {record['examples']:,} silver examples; {json.dumps(record['counts'])}")
    print(f"written: {config.out}/ ({', '.join(record['file'] for record in info['tasks'].values())}, {INFO})")
    return info
