"""Readers for every data file of the project: typed records out, bad rows reported, never silent.

Formats (see ../shared/data/README.md): the course's tab-separated CSVs with a leading unnamed index
column (SST, CFIMDB, Quora, STS; `*-test-student.csv` without labels), SimCSE's comma-separated NLI
triplets, one sentence a line, and the tab-separated STS evaluation sets.

Each reader returns (records, report). A row that cannot be used (empty sentence, missing/NaN/
out-of-range label, wrong number of fields) is skipped and counted in the report, which is logged
with the file name and line numbers. A missing file or a wrong column set raises DataError.
Bytes that are not UTF-8 are replaced with U+FFFD and the lines are reported.
"""
import csv
import io
import logging
import math
import random
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from common.errors import DataError

log = logging.getLogger(__name__)
csv.field_size_limit(10_000_000)  # CFIMDB reviews are long


@dataclass
class SentenceExample:
    id: str
    sentence: str
    label: int | None  # None in test-student files


@dataclass
class PairExample:
    id: str
    sentence1: str
    sentence2: str
    label: float | None  # Quora: 0/1; STS: similarity 0-5; None in test-student files
    subset: str | None = None  # STS evaluation sets: the source subset (MSRpar, headlines, ...)


@dataclass
class TripletExample:
    anchor: str
    positive: str  # NLI entailment
    hard_negative: str  # NLI contradiction


@dataclass
class ReadReport:
    path: Path
    rows: int = 0
    kept: int = 0
    skipped: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))  # reason -> line numbers
    replaced_bytes_lines: list[int] = field(default_factory=list)
    empty_kept: list[int] = field(default_factory=list)  # unlabelled rows kept so every id gets a prediction

    def skip(self, line: int, reason: str):
        self.skipped[reason].append(line)

    def summary(self) -> str:
        parts = [f"{self.path.name}: kept {self.kept:,} of {self.rows:,} rows"]
        for reason, lines in self.skipped.items():
            parts.append(f"skipped {len(lines)} ({reason}: {_lines(lines)})")
        if self.empty_kept:
            parts.append(f"kept {len(self.empty_kept)} empty sentences ({_lines(self.empty_kept)})")
        if self.replaced_bytes_lines:
            parts.append(f"replaced bytes that are not UTF-8 ({_lines(self.replaced_bytes_lines)})")
        return "; ".join(parts)

    def log(self):
        problems = self.skipped or self.empty_kept or self.replaced_bytes_lines
        (log.warning if problems else log.info)(self.summary())


def _lines(numbers: list[int], shown: int = 5) -> str:
    text = ", ".join(str(n) for n in numbers[:shown])
    word = "line" if len(numbers) == 1 else "lines"
    return f"{word} {text}" + (f" and {len(numbers) - shown} more" if len(numbers) > shown else "")


def _read_text(path: Path, report: ReadReport) -> str:
    if not path.is_file():
        raise DataError(f"{path}: file not found" if not path.exists() else f"{path}: not a file")
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        for number, line in enumerate(raw.split(b"\n"), start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                report.replaced_bytes_lines.append(number)
        return raw.decode("utf-8", errors="replace")


def _rows(path: Path, delimiter: str, required: list[str], report: ReadReport, keep_every_row: bool = False):
    """Yield (line number, {column: value}) for each data row; the header must hold `required`.
    keep_every_row: a row that cannot be read stops the reading (a test file's every id needs a prediction)."""
    # csv (not pandas) because it knows each row's line number, which every message names;
    # its quoting rules are those of the course's own csv.DictReader.
    reader = csv.reader(io.StringIO(_read_text(path, report), newline=""), delimiter=delimiter)
    header = [name.strip() for name in next(reader, [])]
    missing = [name for name in required if name not in header]
    if missing:
        raise DataError(f"{path}: line 1: missing column(s) {', '.join(missing)}; "
                        f"expected {', '.join(required)}, found {', '.join(repr(h) for h in header) or 'no header'}")
    for fields in reader:
        if not fields:  # blank line
            continue
        report.rows += 1
        if len(fields) != len(header):
            if keep_every_row:
                raise DataError(f"{path}: line {reader.line_num}: {len(fields)} fields, the header has {len(header)}; "
                                f"every row of a file without labels needs a prediction, so none is skipped")
            report.skip(reader.line_num, f"{len(fields)} fields, header has {len(header)}")
            continue
        yield reader.line_num, dict(zip(header, fields))


def _label(text: str, line: int, report: ReadReport, low: float, high: float, integral: bool) -> float | None:
    """The parsed label, or None after recording why the row is skipped."""
    try:
        value = float(text)
    except ValueError:
        report.skip(line, "missing label" if not text.strip() else "label is not a number")
        return None
    if math.isnan(value):
        report.skip(line, "missing label")
    elif not low <= value <= high or (integral and not value.is_integer()):
        report.skip(line, f"label out of range {low:g}-{high:g}")
    else:
        return value
    return None


def _sentences_ok(texts: list[str], line: int, report: ReadReport, labeled: bool) -> bool:
    if all(t.strip() for t in texts):
        return True
    if labeled:
        report.skip(line, "empty sentence")
        return False
    report.empty_kept.append(line)
    return True


def _finish(records: list, report: ReadReport) -> tuple[list, ReadReport]:
    report.kept = len(records)
    report.log()
    return records, report


def read_sentiment(path: str | Path, num_classes: int, labeled: bool = True, label_column: str = "sentiment"):
    """SST-5 (num_classes=5) or CFIMDB (2): columns id, sentence[, sentiment]."""
    path, report = Path(path), ReadReport(Path(path))
    records = []
    for line, row in _rows(path, "\t", ["id", "sentence"] + ([label_column] if labeled else []), report,
                           keep_every_row=not labeled):
        sentence = row["sentence"].strip()
        if not _sentences_ok([sentence], line, report, labeled):
            continue
        label = None
        if labeled:
            label = _label(row[label_column], line, report, 0, num_classes - 1, integral=True)
            if label is None:
                continue
        records.append(SentenceExample(row["id"].strip(), sentence, None if label is None else int(label)))
    return _finish(records, report)


def _read_pairs(path, labeled, label_column, low, high, integral):
    path, report = Path(path), ReadReport(Path(path))
    records = []
    for line, row in _rows(path, "\t", ["id", "sentence1", "sentence2"] + ([label_column] if labeled else []),
                           report, keep_every_row=not labeled):
        s1, s2 = row["sentence1"].strip(), row["sentence2"].strip()
        if not _sentences_ok([s1, s2], line, report, labeled):
            continue
        label = None
        if labeled:
            label = _label(row[label_column], line, report, low, high, integral)
            if label is None:
                continue
        records.append(PairExample(row["id"].strip(), s1, s2, label if not integral or label is None else int(label)))
    return _finish(records, report)


def read_quora(path: str | Path, labeled: bool = True):
    """Quora question pairs: columns id, sentence1, sentence2[, is_duplicate (0/1)]."""
    return _read_pairs(path, labeled, "is_duplicate", 0, 1, integral=True)


def read_sts(path: str | Path, labeled: bool = True):
    """STS-B (course split): columns id, sentence1, sentence2[, similarity (0-5)]."""
    return _read_pairs(path, labeled, "similarity", 0, 5, integral=False)


def read_nli(path: str | Path):
    """SimCSE's NLI triplets: comma-separated sent0 (premise), sent1 (entailment), hard_neg (contradiction)."""
    path, report = Path(path), ReadReport(Path(path))
    records = []
    for line, row in _rows(path, ",", ["sent0", "sent1", "hard_neg"], report):
        triplet = [row["sent0"].strip(), row["sent1"].strip(), row["hard_neg"].strip()]
        if _sentences_ok(triplet, line, report, labeled=True):
            records.append(TripletExample(*triplet))
    return _finish(records, report)


def read_lines(path: str | Path):
    """One sentence a line (unsupervised data); blank lines are skipped and reported."""
    path, report = Path(path), ReadReport(Path(path))
    records = []
    for line, text in enumerate(_read_text(path, report).splitlines(), start=1):
        report.rows += 1
        if text.strip():
            records.append(text.strip())
        else:
            report.skip(line, "empty sentence")
    return _finish(records, report)


def read_sts_eval(path: str | Path):
    """STS12-16 / SICK-R evaluation sets: tab-separated subset, sentence1, sentence2, score (0-5)."""
    path, report = Path(path), ReadReport(Path(path))
    records = []
    for line, row in _rows(path, "\t", ["subset", "sentence1", "sentence2", "score"], report):
        s1, s2 = row["sentence1"].strip(), row["sentence2"].strip()
        if not _sentences_ok([s1, s2], line, report, labeled=True):
            continue
        score = _label(row["score"], line, report, 0, 5, integral=False)
        if score is not None:
            records.append(PairExample(f"{path.stem}-{line}", s1, s2, score, subset=row["subset"].strip()))
    return _finish(records, report)


def sample_records(records: list, max_examples: int, seed: int = 0) -> list:
    """At most max_examples records, drawn at random (the same ones for the same seed), kept in file order.

    Not the first N: files are often sorted (the head of ids-sst-train.csv is 80% positive), and a
    short run on a file's head learns that file's order, not the task.
    """
    if not max_examples or max_examples >= len(records):
        return records
    keep = sorted(random.Random(seed).sample(range(len(records)), max_examples))
    return [records[i] for i in keep]
