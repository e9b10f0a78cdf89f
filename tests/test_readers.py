"""Every reader on the project's files (row counts of ../shared/data/README.md) and on bad input."""
import logging

import pytest

from minbert.common.errors import DataError
from minbert.data.readers import (
    read_lines, read_nli, read_quora, read_sentiment, read_sts, read_sts_eval, sample_records)

SST = lambda path, **kw: read_sentiment(path, num_classes=5, **kw)  # noqa: E731
CFIMDB = lambda path, **kw: read_sentiment(path, num_classes=2, **kw)  # noqa: E731

# (file, reader, labeled, rows in the README, records kept): quora-train has a row with an empty
# sentence2 and label, quora-dev one with an empty label; both are skipped and reported.
README_ROWS = [
    ("ids-sst-train.csv", SST, True, 8544, 8544),
    ("ids-sst-dev.csv", SST, True, 1101, 1101),
    ("ids-sst-test-student.csv", SST, False, 2210, 2210),
    ("ids-cfimdb-train.csv", CFIMDB, True, 1707, 1707),
    ("ids-cfimdb-dev.csv", CFIMDB, True, 245, 245),
    ("ids-cfimdb-test-student.csv", CFIMDB, False, 488, 488),
    ("sts-train.csv", read_sts, True, 6040, 6040),
    ("sts-dev.csv", read_sts, True, 863, 863),
    ("sts-test-student.csv", read_sts, False, 1725, 1725),
    ("quora-train.csv", read_quora, True, 27224, 27223),
    ("quora-dev.csv", read_quora, True, 6000, 5999),
    ("quora-test-student.csv", read_quora, False, 6000, 6000),
]


@pytest.mark.parametrize("name, reader, labeled, rows, kept", README_ROWS, ids=[r[0] for r in README_ROWS])
def test_course_files(data_dir, name, reader, labeled, rows, kept):
    records, report = reader(data_dir / name, labeled=labeled)
    assert (report.rows, len(records)) == (rows, kept)
    assert all((r.label is not None) == labeled for r in records)
    assert len({r.id for r in records}) == len(records)


def test_quora_skips_are_reported_with_lines(data_dir, caplog):
    with caplog.at_level(logging.WARNING):
        read_quora(data_dir / "quora-train.csv")
        read_quora(data_dir / "quora-dev.csv")
    assert "quora-train.csv: kept 27,223 of 27,224 rows; skipped 1 (empty sentence: line 15992)" in caplog.text
    assert "quora-dev.csv: kept 5,999 of 6,000 rows; skipped 1 (missing label: line 2891)" in caplog.text


def test_labels_have_the_right_types(data_dir):
    sst, _ = SST(data_dir / "ids-sst-dev.csv")
    quora, _ = read_quora(data_dir / "quora-dev.csv")
    sts, _ = read_sts(data_dir / "sts-dev.csv")
    assert {r.label for r in sst} == {0, 1, 2, 3, 4} and all(isinstance(r.label, int) for r in sst)
    assert {r.label for r in quora} == {0, 1}
    assert min(r.label for r in sts) >= 0 and max(r.label for r in sts) <= 5 and any(r.label % 1 for r in sts)


def test_nli_and_unlabeled(data_dir):
    nli, _ = read_nli(data_dir / "nli_for_simcse.csv")
    assert len(nli) == 33424
    assert nli[1].anchor == "Two sunbathers, a man and a woman, soak in the sun."  # quoted field with commas
    lines, _ = read_lines(data_dir / "unlabeled-sentences.txt")
    assert len(lines) == 273117


@pytest.mark.parametrize("name, rows", [("sts12", 2808), ("sts13", 1340), ("sts14", 3287), ("sts15", 2627),
                                        ("sts16", 1083), ("sickr", 4906)])
def test_sts_eval_sets(data_dir, name, rows):
    records, _ = read_sts_eval(data_dir / "sts-eval" / f"{name}.tsv")
    assert len(records) == rows and all(r.subset for r in records)


# ---- bad input, in small files written here ----

HEADER = "\tid\tsentence\tsentiment\n"


def write(tmp_path, text: str | bytes, name="bad.csv"):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def test_missing_file_is_named(tmp_path):
    with pytest.raises(DataError, match=r"nope\.csv: file not found"):
        SST(tmp_path / "nope.csv")


def test_wrong_columns_name_file_line_and_columns(tmp_path):
    path = write(tmp_path, "\tid\ttext\tlabel\n0\ta\thello\t1\n")
    with pytest.raises(DataError, match=r"bad\.csv: line 1: missing column\(s\) sentence, sentiment.*found '', 'id'"):
        SST(path)


def test_bad_rows_are_skipped_counted_and_reported(tmp_path, caplog):
    path = write(tmp_path, HEADER + "".join([
        "0\ta\tgood one\t3\n",        # line 2: kept
        "1\tb\t   \t2\n",             # line 3: empty sentence
        "2\tc\tno label\t\n",         # line 4: missing label
        "3\td\tnan label\tnan\n",     # line 5: NaN label
        "4\te\ttoo high\t5\n",        # line 6: out of range for SST-5
        "5\tf\tnot integral\t2.5\n",  # line 7: within the range, yet not a class
        "6\tg\tword label\tgood\n",   # line 8: not a number
        "7\th\ttoo\tmany\tfields\n",  # line 9: wrong number of fields
        "8\ti\tfine too\t4.0\n",      # line 10: kept, 4.0 is class 4
    ]))
    with caplog.at_level(logging.WARNING):
        records, report = SST(path)
    assert [(r.id, r.label) for r in records] == [("a", 3), ("i", 4)]
    assert dict(report.skipped) == {"empty sentence": [3], "missing label": [4, 5], "label out of range 0-4": [6],
                                    "label not a whole number (a class 0-4)": [7], "label is not a number": [8],
                                    "5 fields, header has 4": [9]}
    assert "bad.csv: kept 2 of 9 rows" in caplog.text and "missing label: lines 4, 5" in caplog.text


def test_test_student_files_keep_empty_sentences_so_every_id_is_predicted(tmp_path, caplog):
    path = write(tmp_path, "\tid\tsentence1\tsentence2\n0\ta\tx\t \n1\tb\tx\ty\n")
    with caplog.at_level(logging.WARNING):
        records, report = read_sts(path, labeled=False)
    assert [r.id for r in records] == ["a", "b"] and report.empty_kept == [2]
    assert "kept 1 empty sentences (line 2)" in caplog.text


def test_bytes_that_are_not_utf8_are_replaced_and_reported(tmp_path, caplog):
    path = write(tmp_path, HEADER.encode() + b"0\ta\tcaf\xe9 au lait\t4\n1\tb\tfine\t1\n")
    with caplog.at_level(logging.WARNING):
        records, report = SST(path)
    assert records[0].sentence == "caf\ufffd au lait" and report.replaced_bytes_lines == [2]
    assert "replaced bytes that are not UTF-8 (line 2)" in caplog.text


def test_quora_and_sts_label_ranges(tmp_path):
    quora, report = read_quora(write(tmp_path, "\tid\tsentence1\tsentence2\tis_duplicate\n"
                                                "0\ta\tx\ty\t1.0\n1\tb\tx\ty\t2\n"))
    assert [r.label for r in quora] == [1] and dict(report.skipped) == {"label out of range 0-1": [3]}
    sts, report = read_sts(write(tmp_path, "\tid\tsentence1\tsentence2\tsimilarity\n"
                                             "0\ta\tx\ty\t4.6\n1\tb\tx\ty\t-0.1\n"))
    assert [r.label for r in sts] == [4.6] and dict(report.skipped) == {"label out of range 0-5": [3]}


def test_nli_and_lines_bad_rows(tmp_path):
    with pytest.raises(DataError, match="missing column.*hard_neg"):
        read_nli(write(tmp_path, "sent0,sent1\na,b\n"))
    nli, report = read_nli(write(tmp_path, 'sent0,sent1,hard_neg\na,b,c\n"x, y",,z\n'))
    assert len(nli) == 1 and dict(report.skipped) == {"empty sentence": [3]}
    lines, report = read_lines(write(tmp_path, "one\n\n  \ntwo\n", name="lines.txt"))
    assert lines == ["one", "two"] and dict(report.skipped) == {"empty sentence": [2, 3]}


def test_a_sample_is_random_repeatable_in_file_order_and_follows_the_labels(data_dir):
    sst, _ = SST(data_dir / "ids-sst-train.csv")
    sample = sample_records(sst, 1024)
    assert len(sample) == 1024 and sample == sample_records(sst, 1024)
    position = {id(r): i for i, r in enumerate(sst)}
    assert [position[id(r)] for r in sample] == sorted(position[id(r)] for r in sample)
    # The file's head is 80% positive; a sample has the file's label mix.
    share = lambda records, label: sum(r.label == label for r in records) / len(records)  # noqa: E731
    assert share(sst[:1024], 0) < 0.01
    for label in range(5):
        assert abs(share(sample, label) - share(sst, label)) < 0.04, label
    assert sample_records(sst, 0) is sst and sample_records(sst, len(sst) + 1) is sst


# ---- every line one row: a double quote never merges lines, and a count of lines apart from csv agrees ----

UNLABELED = "\tid\tsentence\n"
# Ten test-student rows; line 4 opens a double quote that a sentence on line 8 closes (csv alone: one row of 5 lines).
OPEN_QUOTE = UNLABELED + "".join(
    f"{i}\tid-{i}\t" + ('"opens a quote' if i == 2 else 'and " closes it' if i == 6 else f"sentence {i}") + "\n"
    for i in range(10))


@pytest.mark.parametrize("labeled", [False, True])
def test_a_quote_that_runs_over_lines_is_refused_naming_its_line(tmp_path, labeled):
    text = OPEN_QUOTE if not labeled else "".join(
        line + ("\tsentiment" if number == 0 else "\t1") + "\n" for number, line in enumerate(OPEN_QUOTE.splitlines()))
    assert text.count("\n") == 11  # a header and ten rows
    with pytest.raises(DataError, match=r"bad\.csv: line 4: a double quote opens a field that runs on to line 8"):
        SST(write(tmp_path, text), labeled=labeled)


def test_a_quote_that_does_not_close_before_the_end_is_refused(tmp_path):
    with pytest.raises(DataError, match=r"bad\.csv: line 3: a double quote opens a field that does not close"):
        SST(write(tmp_path, UNLABELED + '0\ta\tfine\n1\tb\t"never closed\n'), labeled=False)


def test_a_quote_closed_inside_a_field_is_refused_not_guessed(tmp_path):
    # csv's default would read "ab"c" as abc", a guess at what was meant; the row is refused instead.
    with pytest.raises(DataError, match=r"bad\.csv: line 2: not a row"):
        SST(write(tmp_path, UNLABELED + '0\ta\t"ab"c"\n'), labeled=False)


def test_quotes_as_the_course_writes_them_are_read_as_text(tmp_path):
    records, report = SST(write(tmp_path, UNLABELED + '0\ta\t"He said ""hi"" twice"\n1\tb\tit\'s "fine" here\n'),
                          labeled=False)
    assert [r.sentence for r in records] == ['He said "hi" twice', 'it\'s "fine" here'] and report.rows == 2


def test_rows_read_are_checked_against_a_count_of_lines_made_apart_from_csv(tmp_path, monkeypatch):
    import csv

    reader = csv.reader

    class LosingReader:
        """A csv reader that loses the row of line 3 and counts lines as rows: nothing in its rows shows the loss."""

        def __init__(self, lines, **kwargs):
            self.rows, self.line_num = reader(lines, **kwargs), 0

        def __iter__(self):
            return self

        def __next__(self):
            row = next(self.rows)
            if self.line_num == 2:
                row = next(self.rows)
            self.line_num += 1
            return row

    monkeypatch.setattr(csv, "reader", LosingReader)
    with pytest.raises(DataError, match=r"bad\.csv: 3 data lines but 2 rows read; every line must be one row"):
        SST(write(tmp_path, UNLABELED + "0\ta\tx\n1\tb\ty\n2\tc\tz\n"), labeled=False)


@pytest.mark.parametrize("separator", ["\u2028", "\u0085", "\x0c"])
def test_a_sentence_holding_a_unicode_line_separator_is_one_line(tmp_path, separator):
    lines, report = read_lines(write(tmp_path, f"one{separator}sentence\ntwo\n", name="lines.txt"))
    assert lines == [f"one{separator}sentence", "two"] and report.rows == 2


def test_an_id_a_prediction_file_cannot_hold_stops_a_file_without_labels(tmp_path):
    with pytest.raises(DataError, match=r"bad\.csv: line 3: empty id; every row of a file without labels needs an id"):
        SST(write(tmp_path, UNLABELED + "0\ta\tx\n1\t \ty\n"), labeled=False)
    with pytest.raises(DataError, match=r"bad\.csv: line 2: id holds a comma"):
        read_sts(write(tmp_path, "\tid\tsentence1\tsentence2\n0\ta,b\tx\ty\n"), labeled=False)


def test_an_id_a_prediction_file_cannot_hold_is_a_skipped_row_of_a_labeled_file(tmp_path):
    records, report = SST(write(tmp_path, HEADER + "0\ta\tx\t1\n1\t\ty\t2\n2\tc,d\tz\t3\n"))
    assert [r.id for r in records] == ["a"]
    assert dict(report.skipped) == {"empty id": [3], "id holds a comma, tab or line break": [4]}


def test_a_byte_order_mark_before_the_header_is_not_part_of_it(tmp_path):
    records, _ = SST(write(tmp_path, b"\xef\xbb\xbfid\tsentence\tsentiment\n1\ta cat\t1\n"))
    assert [(r.id, r.sentence, r.label) for r in records] == [("1", "a cat", 1)]
    nli, _ = read_nli(write(tmp_path, b"\xef\xbb\xbfsent0,sent1,hard_neg\na,b,c\n"))
    assert [(t.anchor, t.positive, t.hard_negative) for t in nli] == [("a", "b", "c")]


def test_contrastive_data_with_a_byte_order_mark_is_recognised(tmp_path):
    from minbert.tasks import CONTRASTIVE_DATA

    assert CONTRASTIVE_DATA.detect_format(write(tmp_path, b"\xef\xbb\xbfsent0,sent1,hard_neg\na,b,c\n")) == "nli"


def test_an_id_repeated_in_a_labeled_file_is_skipped_and_counted_so_every_reader_keeps_the_first(tmp_path, caplog):
    from minbert.evaluation.outputs import dev_labels, dev_records

    write(tmp_path, HEADER + "0\ta\tx\t1\n1\tb\ty\t2\n2\ta\tz\t4\n", name="ids-sst-dev.csv")
    with caplog.at_level(logging.WARNING):
        records, report = SST(tmp_path / "ids-sst-dev.csv")
    assert [(r.id, r.label) for r in records] == [("a", 1), ("b", 2)]
    assert dict(report.skipped) == {"an id of an earlier line": [4]}
    assert "skipped 1 (an id of an earlier line: line 4)" in caplog.text
    # What ensembles and the error analysis score an id with: the same row, once.
    assert [r.sentence for r in dev_records(tmp_path, "sst", ["a", "b"])] == ["x", "y"]
    assert dev_labels(tmp_path, "sst", ["a"]).tolist() == [1.0]


def test_an_id_repeated_in_a_file_without_labels_stops_it_naming_both_lines(tmp_path):
    with pytest.raises(DataError, match=r"bad\.csv: line 4: id 'a' is the id of line 2 too; every row of a file "
                                        r"without labels needs an id of its own"):
        SST(write(tmp_path, UNLABELED + "0\ta\tx\n1\tb\ty\n2\ta\tz\n"), labeled=False)


def test_a_file_holding_a_nul_byte_is_refused_as_not_text(tmp_path):
    with pytest.raises(DataError, match=r"bad\.txt: line 2: a NUL byte: a binary file, not text"):
        read_lines(write(tmp_path, b"a line\nPK\x03\x04\x00\x00\n", name="bad.txt"))
