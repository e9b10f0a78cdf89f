"""Readers for every data file of the project: typed records out, bad rows reported, never silent.

Formats (see ../shared/data/README.md): the course's tab-separated CSVs with a leading unnamed index
column (SST, CFIMDB, Quora, STS; `*-test-student.csv` without labels), SimCSE's comma-separated NLI
triplets, one sentence a line, and the tab-separated STS evaluation sets.

Each reader returns (records, report); those of the course's files also yield their records as they read
them (sentiment_records, pair_records), for files too large to hold. A row that cannot be used (empty
sentence, missing/NaN/out-of-range label, wrong number of fields, an id a prediction file cannot hold or
an earlier row's id) is skipped and counted in the report, which is logged with the file name and line
numbers; in a file without labels, whose every row needs a prediction, it raises DataError instead. A
missing file or a wrong column set raises DataError, and so does a line that is not one row (a double
quote that opens a field running on over the next lines): every line is one row, which a count of the
lines independent of csv checks. Bytes that are not UTF-8 are replaced with U+FFFD and the lines are
reported; a byte-order mark is dropped; a NUL byte (a binary file) raises DataError.
"""
import csv
import logging
import math
import random
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from minbert.common.errors import DataError
from minbert.common.files import missing_default_data

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


def text_lines(path: Path, report: ReadReport | None = None) -> Iterator[str]:
    """A text file's lines as csv sees them (ended by \\n, \\r\\n or \\r; not str.splitlines, which also ends a
    line at characters a sentence may hold: U+2028, U+0085, form feed), endings kept, read as they are needed: UTF-8
    without the byte-order mark some editors put first. Bytes that are not UTF-8 are replaced, and their lines
    recorded in the report; a NUL byte, which no text holds, stops the reading: the file is not text."""
    if not path.is_file():
        raise DataError(missing_default_data(path) or (f"{path}: file not found" if not path.exists()
                                                       else f"{path}: not a file"))
    # surrogateescape keeps each undecodable byte as a lone surrogate, so that its line is known.
    with open(path, encoding="utf-8-sig", errors="surrogateescape", newline="") as file:
        for number, line in enumerate(file, start=1):
            if "\0" in line:
                raise DataError(f"{path}: line {number}: a NUL byte: a binary file, not text")
            try:
                line.encode("utf-8")
            except UnicodeEncodeError:
                if report is not None:
                    report.replaced_bytes_lines.append(number)
                line = line.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            yield line


def id_problem(text: str) -> str | None:
    """Why `text` cannot be the id of a row of a prediction file (whose fields are not quoted), or None."""
    if not text.strip():
        return "empty id"
    if any(c in text for c in ",\t\n\r"):
        return "id holds a comma, tab or line break"
    return None


def _rows(path: Path, delimiter: str, required: list[str], report: ReadReport, keep_every_row: bool = False):
    """Yield (line number, {column: value}) for each data row; the header must hold `required`.
    keep_every_row: a row that cannot be read stops the reading (a test file's every id needs a prediction)."""
    # csv (not pandas) because it knows each row's line number, which every message names. Quoting stays on: the
    # course's files quote fields as csv writes them ("" is a double quote inside a quoted field), and their own
    # csv.DictReader reads them so; QUOTE_NONE would keep those quotes as text. strict: a quote that closes before
    # something other than a delimiter is an error, not a guess.
    # Counted apart from csv: each line after the header that is not empty is one row, read or reported.
    data_lines = [0]

    def counted(lines):
        for number, line in enumerate(lines, start=1):
            data_lines[0] += number > 1 and bool(line.rstrip("\r\n"))
            yield line

    reader = csv.reader(counted(text_lines(path, report)), delimiter=delimiter, strict=True)
    header = [name.strip() for name in _next_row(reader, path, 1) or []]
    missing = [name for name in required if name not in header]
    if missing:
        raise DataError(f"{path}: line 1: missing column(s) {', '.join(missing)}; "
                        f"expected {', '.join(required)}, found {', '.join(repr(h) for h in header) or 'no header'}")
    while True:
        line = reader.line_num + 1
        fields = _next_row(reader, path, line)
        if fields is None:
            break
        if not fields:  # blank line
            continue
        report.rows += 1
        if len(fields) != len(header):
            if keep_every_row:
                raise DataError(f"{path}: line {line}: {len(fields)} fields, the header has {len(header)}; "
                                f"every row of a file without labels needs a prediction, so none is skipped")
            report.skip(line, f"{len(fields)} fields, header has {len(header)}")
            continue
        yield line, dict(zip(header, fields))
    if data_lines[0] != report.rows:
        raise DataError(f"{path}: {data_lines[0]:,} data lines but {report.rows:,} rows read; every line must be one "
                        f"row")


def _next_row(reader, path: Path, line: int) -> list[str] | None:
    """The fields of the row that starts at `line` (None at the end of the file), which must end on that line."""
    try:
        fields = next(reader, None)
    except csv.Error as error:
        # strict csv: "unexpected end of data" is a quoted field still open at the end of the file.
        if reader.line_num > line or "unexpected end of data" in str(error):
            raise DataError(_runs_on(path, line, reader.line_num)) from None
        raise DataError(f"{path}: line {line}: not a row ({error}); inside a quoted field a double quote is "
                        f"written \"\"") from None
    if fields is not None and reader.line_num > line:
        raise DataError(_runs_on(path, line, reader.line_num))
    return fields


def _runs_on(path: Path, line: int, last: int) -> str:
    where = f"runs on to line {last}" if last > line else "does not close on its line"
    return (f"{path}: line {line}: a double quote opens a field that {where}; every line must be one row "
            f"(inside a quoted field a double quote is written \"\")")


def _id_ok(text: str, line: int, report: ReadReport, labeled: bool, seen: dict[str, int]) -> bool:
    """Whether the row's id can name its prediction, and no earlier row's does (seen: id -> its line); a file without
    labels cannot do without one of its rows, so it stops there. In a labelled file the repeat is skipped: every
    reader of the file's ids (training, ensembles, analysis) keeps the first row of an id."""
    problem = id_problem(text)
    if problem is None and text in seen:
        if not labeled:
            raise DataError(f"{report.path}: line {line}: id {text!r} is the id of line {seen[text]} too; every row "
                            f"of a file without labels needs an id of its own for its prediction")
        report.skip(line, "an id of an earlier line")
        return False
    if problem is None:
        seen[text] = line
        return True
    if not labeled:
        raise DataError(f"{report.path}: line {line}: {problem}; every row of a file without labels needs an id "
                        f"for its prediction")
    report.skip(line, problem)
    return False


def _label(text: str, line: int, report: ReadReport, low: float, high: float, integral: bool) -> float | None:
    """The parsed label, or None after recording why the row is skipped."""
    try:
        value = float(text)
    except ValueError:
        report.skip(line, "missing label" if not text.strip() else "label is not a number")
        return None
    if math.isnan(value):
        report.skip(line, "missing label")
    elif not low <= value <= high:
        report.skip(line, f"label out of range {low:g}-{high:g}")
    elif integral and not value.is_integer():
        report.skip(line, f"label not a whole number (a class {low:g}-{high:g})")
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


def collect(records: Iterator, report: ReadReport) -> tuple[list, ReadReport]:
    """A reader's records, all of them, and its report, logged."""
    records = list(records)
    report.kept = len(records)
    report.log()
    return records, report


def sentiment_records(path: Path, num_classes: int, labeled: bool, report: ReadReport,
                      label_column: str = "sentiment") -> Iterator[SentenceExample]:
    """SST-5 (num_classes=5) or CFIMDB (2): columns id, sentence[, sentiment]; read as they are needed."""
    seen = {}
    for line, row in _rows(path, "\t", ["id", "sentence"] + ([label_column] if labeled else []), report,
                           keep_every_row=not labeled):
        sentence = row["sentence"].strip()
        if not _id_ok(row["id"].strip(), line, report, labeled, seen) or not _sentences_ok([sentence], line, report,
                                                                                           labeled):
            continue
        label = None
        if labeled:
            label = _label(row[label_column], line, report, 0, num_classes - 1, integral=True)
            if label is None:
                continue
        yield SentenceExample(row["id"].strip(), sentence, None if label is None else int(label))


def pair_records(path: Path, labeled: bool, report: ReadReport, label_column: str, low: float, high: float,
                 integral: bool) -> Iterator[PairExample]:
    """Columns id, sentence1, sentence2[, label_column in [low, high]]; read as they are needed."""
    seen = {}
    for line, row in _rows(path, "\t", ["id", "sentence1", "sentence2"] + ([label_column] if labeled else []),
                           report, keep_every_row=not labeled):
        s1, s2 = row["sentence1"].strip(), row["sentence2"].strip()
        if not _id_ok(row["id"].strip(), line, report, labeled, seen) or not _sentences_ok([s1, s2], line, report,
                                                                                           labeled):
            continue
        label = None
        if labeled:
            label = _label(row[label_column], line, report, low, high, integral)
            if label is None:
                continue
        yield PairExample(row["id"].strip(), s1, s2, label if not integral or label is None else int(label))


QUORA = ("is_duplicate", 0, 1, True)  # pair_records' label column, range and whether it is integral
STS = ("similarity", 0, 5, False)


def read_sentiment(path: str | Path, num_classes: int, labeled: bool = True, label_column: str = "sentiment"):
    """SST-5 (num_classes=5) or CFIMDB (2): columns id, sentence[, sentiment]."""
    report = ReadReport(Path(path))
    return collect(sentiment_records(Path(path), num_classes, labeled, report, label_column), report)


def read_quora(path: str | Path, labeled: bool = True):
    """Quora question pairs: columns id, sentence1, sentence2[, is_duplicate (0/1)]."""
    report = ReadReport(Path(path))
    return collect(pair_records(Path(path), labeled, report, *QUORA), report)


def read_sts(path: str | Path, labeled: bool = True):
    """STS-B (course split): columns id, sentence1, sentence2[, similarity (0-5)]."""
    report = ReadReport(Path(path))
    return collect(pair_records(Path(path), labeled, report, *STS), report)


def read_nli(path: str | Path):
    """SimCSE's NLI triplets: comma-separated sent0 (premise), sent1 (entailment), hard_neg (contradiction)."""
    path, report = Path(path), ReadReport(Path(path))
    records = []
    for line, row in _rows(path, ",", ["sent0", "sent1", "hard_neg"], report):
        triplet = [row["sent0"].strip(), row["sent1"].strip(), row["hard_neg"].strip()]
        if _sentences_ok(triplet, line, report, labeled=True):
            records.append(TripletExample(*triplet))
    return collect(records, report)


def read_lines(path: str | Path):
    """One sentence a line (unsupervised data); blank lines are skipped and reported."""
    path, report = Path(path), ReadReport(Path(path))
    records = []
    for line, text in enumerate(text_lines(path, report), start=1):
        report.rows += 1
        if text.strip():
            records.append(text.strip())
        else:
            report.skip(line, "empty sentence")
    return collect(records, report)


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
    return collect(records, report)


def sample_records(records: list, max_examples: int, seed: int = 0) -> list:
    """At most max_examples records, drawn at random (the same ones for the same seed), kept in file order.

    Not the first N: files are often sorted (the head of ids-sst-train.csv is 80% positive), and a
    short run on a file's head learns that file's order, not the task.
    """
    if not max_examples or max_examples >= len(records):
        return records
    keep = sorted(random.Random(seed).sample(range(len(records)), max_examples))
    return [records[i] for i in keep]
