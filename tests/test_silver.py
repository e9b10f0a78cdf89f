"""Silver data: the bank's search against a brute-force one, its cache, the soft losses by hand, the files, and
`minbert silver` then `minbert train --silver` end to end on a tiny teacher, tiny data and a tiny bank."""
import json
import logging
import random
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from minbert.commands import search
from minbert.commands import silver as silver_command
from minbert.common import cli, progress
from minbert.common.errors import UsageError
from minbert.data import retrieval
from minbert.data.retrieval import BankEmbeddings, nearest_in_chunks
from minbert.data.silver import SilverSet, normalise
from minbert.models.sentence_encoder import SentenceEncoder
from minbert.predictor import MultitaskPredictor
from minbert.tasks import REGISTRY
from minbert.training.silver import Teacher
import multitask_classifier

from tests.conftest import checkpoint_weights, killed_and_resumed, multitask_argv, rows_of, sentence


def test_normalise_sees_through_case_spacing_and_the_courses_tokenisation():
    assert normalise("It 's a -LRB- great -RRB- film , `` really ''") == normalise('it\'s a (great) film, "really"')
    assert normalise("ca n't  stop") == normalise("Can't stop")
    assert normalise("a great film") != normalise("a grate film")


def test_the_chunked_search_finds_what_a_search_of_the_whole_matrix_finds():
    generator = torch.Generator().manual_seed(0)
    bank = F.normalize(torch.randn(50, 8, generator=generator), dim=-1)
    queries = F.normalize(torch.randn(7, 8, generator=generator), dim=-1)
    chunks = [(0, bank[:13]), (13, bank[13:20]), (20, bank[20:])]
    scores, rows = nearest_in_chunks(queries, chunks, 4)
    truth = (queries @ bank.T).topk(4, dim=1)
    assert torch.equal(rows, truth.indices)
    torch.testing.assert_close(scores, truth.values)


@pytest.fixture(scope="module")
def bank_sentences():
    rng = random.Random(1)
    return [sentence(rng) for _ in range(23)]


def test_the_cache_holds_the_encoders_unit_embeddings_and_recomputes_only_a_missing_chunk(
        tiny_model, bank_sentences, tmp_path, monkeypatch, one_thread):
    monkeypatch.setattr(retrieval, "CHUNK", 5)
    encoder = SentenceEncoder.from_pretrained(tiny_model)
    cache = BankEmbeddings(encoder, str(tiny_model), bank_sentences, tmp_path)
    assert cache.missing() == [0, 1, 2, 3, 4]
    cache.build()
    stored = torch.cat([chunk for _, chunk in cache.chunks()])
    torch.testing.assert_close(stored, F.normalize(encoder.encode(bank_sentences), dim=-1), atol=1e-6, rtol=0)
    (cache.folder / "chunk-00002.safetensors").unlink()
    again = BankEmbeddings(encoder, str(tiny_model), bank_sentences, tmp_path)
    assert again.missing() == [2]
    before = {path.name: path.stat().st_mtime_ns for path in cache.folder.glob("chunk-*")}
    again.build()
    after = {path.name: path.stat().st_mtime_ns for path in cache.folder.glob("chunk-*")}
    assert {name for name in before if before[name] != after[name]} == set()  # the others untouched
    assert set(after) - set(before) == {"chunk-00002.safetensors"}
    other = BankEmbeddings(encoder, str(tiny_model), bank_sentences[:-1], tmp_path)
    assert other.folder != cache.folder  # another bank, another cache


def test_soft_losses_by_their_formulas():
    raw = torch.tensor([[1.0, -0.5, 0.2, 0.0, 2.0], [0.3, 0.3, -1.0, 1.5, 0.0]])
    target = torch.tensor([[0.1, 0.2, 0.3, 0.2, 0.2], [0.5, 0.1, 0.1, 0.2, 0.1]])
    by_hand = sum(t * (torch.log(t) - torch.log(torch.exp(r) / torch.exp(r_row).sum()))
                  for r_row, t_row in zip(raw, target) for r, t in zip(r_row, t_row)) / 2
    torch.testing.assert_close(REGISTRY["sst"].soft_loss(raw, target), by_hand)
    logit, p = torch.tensor([0.4, -1.2]), torch.tensor([0.7, 0.2])
    sigmoid = 1 / (1 + torch.exp(-logit))
    torch.testing.assert_close(REGISTRY["para"].soft_loss(logit, p),
                               -(p * torch.log(sigmoid) + (1 - p) * torch.log(1 - sigmoid)).mean())
    score, teacher = torch.tensor([1.0, 4.5]), torch.tensor([2.0, 4.0])
    torch.testing.assert_close(REGISTRY["sts"].soft_loss(score, teacher), ((score - teacher) ** 2).mean())


def test_silver_files_round_trip_in_the_courses_format(tmp_path):
    sst = SilverSet(["bank-3", "bank-9"], [("A fine film .",), ("Dull",)],
                    torch.tensor([[0.1, 0.1, 0.1, 0.1, 0.6], [0.7, 0.1, 0.1, 0.05, 0.05]]))
    REGISTRY["sst"].write_silver(tmp_path / "sst.csv", sst)
    rows = rows_of(tmp_path / "sst.csv")
    assert [(r["id"], r["sentence"], r["sentiment"]) for r in rows] == [("bank-3", "A fine film .", "4"),
                                                                        ("bank-9", "Dull", "0")]
    back = REGISTRY["sst"].read_silver(tmp_path / "sst.csv")
    assert back.texts == sst.texts and back.ids == sst.ids
    torch.testing.assert_close(back.soft, sst.soft)
    sts = SilverSet(["pair-1"], [("a b", "c d")], torch.tensor([3.25]))
    REGISTRY["sts"].write_silver(tmp_path / "sts.csv", sts)
    assert rows_of(tmp_path / "sts.csv")[0]["similarity"] == "3.25"
    torch.testing.assert_close(REGISTRY["sts"].read_silver(tmp_path / "sts.csv").soft, sts.soft)


@pytest.fixture(scope="module")
def teacher(tiny_model, course_data, tmp_path_factory, one_thread):
    """A tiny finished run of the three course tasks."""
    out = tmp_path_factory.mktemp("teacher")
    multitask_classifier.main(multitask_argv(tiny_model, course_data, out, "--epochs", "1", "--quiet"))
    return out / "run"


@pytest.fixture(scope="module")
def bank_file(course_data, bank_sentences, tmp_path_factory):
    """The bank: random sentences, one SST training sentence, and an SST dev sentence and a Quora test sentence
    written as another tokeniser would."""
    dev = rows_of(course_data / "ids-sst-dev.csv")[0]["sentence"]
    test = rows_of(course_data / "quora-test-student.csv")[0]["sentence2"]
    train = rows_of(course_data / "ids-sst-train.csv")[0]["sentence"]
    path = tmp_path_factory.mktemp("bank") / "bank.txt"
    path.write_text("\n".join([*bank_sentences[:10], dev.upper() + " .", train, "  " + test, *bank_sentences[10:]])
                    + "\n", encoding="utf-8")
    return path


def silver_argv(teacher, bank_file, course_data, tiny_model, out, *extra):
    return cli.last_wins(["--teacher", str(teacher), "--bank", str(bank_file), "--data-dir", str(course_data),
                          "--retriever", str(tiny_model), "--out", str(out), "--cache-dir", str(out.parent / "cache"),
                          "--device", "cpu", "--neighbours", "3", "--per-class", "2", "--pair-sentences", "30",
                          *extra])


def test_silver_keeps_no_dev_or_test_sentence_and_the_teachers_mean_labels(
        teacher, bank_file, course_data, tiny_model, tmp_path, one_thread):
    out = tmp_path / "silver"
    info = silver_command.main(silver_argv(teacher, bank_file, course_data, tiny_model, out,
                                           "--teacher", f"{teacher},{teacher}"))
    held = {normalise(r[c]) for task in REGISTRY.values() for file in task.files[1:]
            if (course_data / file).is_file() for r in rows_of(course_data / file)
            for c in ("sentence", "sentence1", "sentence2") if c in r}
    counts = info["tasks"]["sst"]["counts"]
    assert counts["removed_dev_or_test"] == 2 and counts["removed_in_training"] == 1
    predictor = MultitaskPredictor.from_run(teacher, device="cpu")
    for task in ("sst", "para", "sts"):
        rows = rows_of(out / f"{task}-silver.csv")
        texts = [tuple(r[c] for c in ("sentence1", "sentence2") if c in r) or (r["sentence"],) for r in rows]
        assert rows and not any(normalise(t) in held for text in texts for t in text)
        soft = REGISTRY[task].read_silver(out / f"{task}-silver.csv").soft
        # the mean of two copies of one run is that run's soft outputs (written to 6 digits)
        expected = predictor.soft_outputs(task, [text if REGISTRY[task].pair else text[0] for text in texts])
        torch.testing.assert_close(soft, expected, atol=1e-5, rtol=1e-5)
    sst = REGISTRY["sst"].read_silver(out / "sst-silver.csv").soft
    assert all(count <= 2 for count in torch.bincount(sst.argmax(-1)).tolist())
    assert json.loads((out / "silver.json").read_text())["tasks"]["sst"]["counts"] == counts


def test_each_teachers_progress_lines_name_it(teacher, caplog, monkeypatch, one_thread):
    """The teacher's labelling, and its predictions within, say which run of the teacher is under way."""
    monkeypatch.setattr(progress, "INTERVAL", 0.0)  # a line at every update
    monkeypatch.setattr(progress, "start_timer", lambda tick, stop: None)  # and none between
    caplog.set_level(logging.INFO, logger=progress.log.name)
    Teacher([str(teacher), str(teacher)], device="cpu").soft("sst", ["a fine film", "a dull film"])
    assert caplog.messages and all(line.startswith(f"teacher {teacher}: ") for line in caplog.messages)
    assert {line.split(": ")[1] for line in caplog.messages} == {"labelling sst", "predicting sst"}


def test_a_second_command_keeps_the_finished_tasks_and_remakes_one_under_other_settings(
        teacher, bank_file, course_data, tiny_model, tmp_path, one_thread, caplog):
    out = tmp_path / "silver"
    silver_command.main(silver_argv(teacher, bank_file, course_data, tiny_model, out))
    first = {task: (out / f"{task}-silver.csv").stat().st_mtime_ns for task in ("sst", "para", "sts")}
    silver_command.main(silver_argv(teacher, bank_file, course_data, tiny_model, out, "--per-class", "1"))
    second = {task: (out / f"{task}-silver.csv").stat().st_mtime_ns for task in ("sst", "para", "sts")}
    assert first["para"] == second["para"] and first["sts"] == second["sts"] and first["sst"] != second["sst"]
    assert len(rows_of(out / "sst-silver.csv")) <= 5


@pytest.mark.parametrize("case", ["teacher without the task", "empty bank", "bank not UTF-8", "K above the bank"])
def test_bad_inputs_get_one_line_and_exit_code_2(case, teacher, bank_file, course_data, tiny_model, tmp_path,
                                                 capsys, one_thread, tmp_path_factory):
    bank, extra, message = bank_file, [], ""
    if case == "teacher without the task":
        extra, message = ["--tasks", "cfimdb"], "not on cfimdb"
    elif case == "empty bank":
        bank, message = tmp_path / "empty.txt", "an empty bank"
        bank.write_text("\n\n")
    elif case == "bank not UTF-8":
        bank, message = tmp_path / "latin1.txt", "not UTF-8"
        bank.write_bytes("un film très beau\n".encode("latin-1"))
    else:
        extra, message = ["--per-class", "1000"], "--per-class 1000: more than the"
    out = tmp_path / "silver"
    with pytest.raises(SystemExit) as exit_:
        cli.run(lambda: silver_command.main(silver_argv(teacher, bank, course_data, tiny_model, out, "--tasks", "sst",
                                                        *extra)))
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert "Traceback" not in error and message in error.strip().splitlines()[-1]
    assert not (out / "sst-silver.csv").exists()


@pytest.fixture(scope="module")
def silver_folder(teacher, bank_file, course_data, tiny_model, tmp_path_factory):
    silver = tmp_path_factory.mktemp("made") / "silver"
    silver_command.main(silver_argv(teacher, bank_file, course_data, tiny_model, silver))
    return silver


def test_training_with_silver_learns_from_it_from_the_base_model_or_the_teacher(
        teacher, silver_folder, course_data, tiny_model, tmp_path, one_thread):
    silver = silver_folder
    plain = multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path / "plain", "--quiet"))
    common = ("--silver", str(silver), "--silver-ratio", "0.5", "--quiet")
    mixed = multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path / "mixed", *common))
    assert plain and mixed
    config = json.loads((tmp_path / "mixed" / "run" / "last" / "run_config.json").read_text())
    assert config["silver"] == str(silver) and set(config["provenance"]["data_sha256"]) >= {
        str(silver / f"{task}-silver.csv") for task in ("sst", "para", "sts")}
    a = checkpoint_weights(tmp_path / "plain" / "run" / "last")
    b = checkpoint_weights(tmp_path / "mixed" / "run" / "last")
    assert any(not torch.equal(a[name], b[name]) for name in a)  # the silver loss changed the training
    # From the teacher, on SST's silver only: the student starts from the teacher's weights
    only = multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path / "student", *common,
                                                    "--init", str(teacher / "best"), "--silver-tasks", "sst"))
    assert only


def test_a_resumed_run_with_silver_ends_with_the_uninterrupted_runs_weights(
        silver_folder, course_data, tiny_model, tmp_path, monkeypatch, one_thread):
    flags = ["--silver", str(silver_folder), "--eval-every", "2", "--quiet"]
    killed_and_resumed(monkeypatch, lambda out: multitask_argv(tiny_model, course_data, out, *flags), tmp_path, 6,
                       lambda killed: ["--output-dir", str(tmp_path / "resumed" / "run"), "--resume", "--quiet"])


def test_silver_flags_without_a_folder_or_with_a_task_it_lacks_are_refused(tiny_model, course_data, tmp_path,
                                                                          capsys):
    for extra, message in ((["--silver-tasks", "sst"], "give the silver folder"),
                           (["--silver", str(tmp_path / "none")], "not found")):
        with pytest.raises(SystemExit) as exit_:
            cli.run(lambda: multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path, *extra)))
        assert exit_.value.code == 2 and message in capsys.readouterr().err.strip().splitlines()[-1]


def test_a_search_space_may_vary_how_a_run_uses_silver_data(silver_folder, course_data, tiny_model, tmp_path):
    recipe, space = tmp_path / "recipe.yaml", tmp_path / "space.yaml"
    recipe.write_text(f"model: {tiny_model}\ndata-dir: {course_data}\ndevice: cpu\nsilver: {silver_folder}\n")
    space.write_text("silver-ratio: {low: 0.25, high: 1.0}\nsilver-weight: [0.5, 1.0]\n")
    config, _, base = search.parse_flags(["--config", str(recipe), "--space", str(space)])
    params = {param.name: param for param in search.read_checked_space(config.space, base, config.objective)}
    assert (params["silver_ratio"].low, params["silver_ratio"].high) == (0.25, 1.0)
    assert params["silver_weight"].choices == (0.5, 1.0)
    space.write_text("silver-ratio: {low: 0.0, high: 1.0}\n")
    with pytest.raises(UsageError, match=r":1: silver-ratio: --silver-ratio must be > 0"):
        search.read_checked_space(config.space, base, config.objective)


def test_the_teacher_may_be_a_mean_ensembles_report_and_not_one_whose_weights_differ_a_task(tmp_path):
    report = tmp_path / "ensemble.json"
    report.write_text(json.dumps({"method": "mean", "members": {"runs/a": {}, "runs/b": {}}, "ensemble": {},
                                  "weights": {}}))
    assert silver_command.SilverConfig(teacher=str(report)).teacher_runs() == ["runs/a", "runs/b"]
    assert silver_command.SilverConfig(teacher="runs/a, runs/b").teacher_runs() == ["runs/a", "runs/b"]
    report.write_text(json.dumps({"method": "best", "members": {"runs/a": {}}, "ensemble": {}, "weights": {}}))
    with pytest.raises(UsageError, match="--method best"):
        silver_command.SilverConfig(teacher=str(report)).teacher_runs()


def test_a_silver_folder_another_command_writes_is_refused(teacher, bank_file, course_data, tiny_model, tmp_path,
                                                           one_thread):
    out = tmp_path / "silver"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'a+'); "
                               "fcntl.flock(f, fcntl.LOCK_EX); f.write('4242'); f.flush(); print('held', flush=True); "
                               "time.sleep(120)", str(out / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UsageError, match=r"--out .* is in use by another command \(pid 4242\)"):
            silver_command.main(silver_argv(teacher, bank_file, course_data, tiny_model, out))
    finally:
        holder.kill()
        holder.wait()
    assert not (out / "sst-silver.csv").exists()


def test_a_users_file_of_a_name_silver_writes_is_replaced_only_with_overwrite(teacher, bank_file, course_data,
                                                                              tiny_model, tmp_path, one_thread):
    """Refused before any work, the file unchanged and nothing written; with --overwrite, made anew; and then a
    second command keeps its own files without --overwrite."""
    out = tmp_path / "silver"
    out.mkdir()
    (out / "sts-silver.csv").write_text("id\tsentence1\tsentence2\tsimilarity\nmine\ta\tb\t5\n")
    argv = silver_argv(teacher, bank_file, course_data, tiny_model, out, "--tasks", "sts")
    with pytest.raises(UsageError, match=r"--out .*sts-silver.csv: a file no command of ours wrote .*--overwrite"):
        silver_command.main(argv)
    assert rows_of(out / "sts-silver.csv") == [{"id": "mine", "sentence1": "a", "sentence2": "b", "similarity": "5"}]
    assert sorted(path.name for path in out.iterdir()) == ["sts-silver.csv"]
    silver_command.main([*argv, "--overwrite"])
    made = (out / "sts-silver.csv").stat().st_mtime_ns
    assert len(rows_of(out / "sts-silver.csv")) > 1
    silver_command.main(argv)
    assert (out / "sts-silver.csv").stat().st_mtime_ns == made  # its own file, kept as it is


# ---- what silver data keeps, against a teacher whose every answer the test sets ----

class ScriptedTeacher:
    """A teacher whose soft output for each sentence (or pair) the test gives: what it keeps is then known."""

    def __init__(self, outputs: dict):
        self.outputs = outputs

    def soft(self, task: str, examples: list) -> torch.Tensor:
        return torch.tensor([self.outputs[example] for example in examples], dtype=torch.float).reshape(
            len(examples), *REGISTRY[task].soft_shape)


def sure_of(label: int, probability: float) -> list[float]:
    """SST-5 probabilities: `probability` on the class `label`, the rest spread evenly."""
    return [probability if c == label else (1 - probability) / 4 for c in range(5)]


# Sentences of words no course sentence of the tiny data has (tests/conftest.py's WORDS): none is held out.
NEW_WORDS = "alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega iota".split()


def new_sentences(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    found = []
    while len(found) < count:
        text = " ".join(rng.sample(NEW_WORDS, 4))
        if text not in found:
            found.append(text)
    return found


def sst_silver(bank, teacher, course_data, tiny_model, tmp_path, per_class):
    """SST's silver data from the bank with every bank sentence retrieved (as many neighbours as the bank has)."""
    from minbert.training.silver import HeldOut, sentence_silver

    sst = REGISTRY["sst"]
    train = sst.read(course_data / sst.files[0], labeled=True)
    retriever = SentenceEncoder.from_pretrained(tiny_model)
    cache = BankEmbeddings(retriever, str(tiny_model), bank, tmp_path / "cache")
    return sentence_silver(sst, train, teacher, retriever, bank, cache, HeldOut(course_data), len(bank), per_class)


def test_sst_silver_keeps_each_classs_most_confident_teacher_labels(course_data, tiny_model, tmp_path, one_thread):
    """Of each class the teacher predicts, the --per-class sentences it is surest of: here 3 a class, at
    probabilities 0.4, 0.6 and 0.8 in an order of their own, and the 2 kept those at 0.8 and 0.6."""
    bank, outputs, surest = new_sentences(15), {}, set()
    rng = random.Random(1)
    for label in range(5):
        probabilities = rng.sample([0.4, 0.6, 0.8], 3)
        for sentence, probability in zip(bank[label * 3:label * 3 + 3], probabilities):
            outputs[sentence] = sure_of(label, probability)
            if probability > 0.5:
                surest.add(sentence)
    silver, counts = sst_silver(bank, ScriptedTeacher(outputs), course_data, tiny_model, tmp_path, per_class=2)
    assert {text for (text,) in silver.texts} == surest and counts["kept"] == 10
    for (text,), soft in zip(silver.texts, silver.soft):
        torch.testing.assert_close(soft, torch.tensor(outputs[text]))


def test_no_dev_or_test_sentence_of_the_bank_reaches_sst_silver_and_the_counts_say_so(
        course_data, tiny_model, tmp_path, one_thread):
    """A bank holding an SST dev sentence and a Quora test sentence, written as another tokeniser would: with room
    for every bank sentence (--per-class as large as the bank), all the others are kept, those two are not, and the
    counts report the two removed."""
    dev = rows_of(course_data / "ids-sst-dev.csv")[0]["sentence"]
    test = rows_of(course_data / "quora-test-student.csv")[0]["sentence2"]
    others = new_sentences(10)
    bank = [*others[:5], dev.upper() + " .", *others[5:], "  " + test]
    outputs = {sentence: sure_of(number % 5, 0.6) for number, sentence in enumerate(bank)}
    silver, counts = sst_silver(bank, ScriptedTeacher(outputs), course_data, tiny_model, tmp_path,
                                per_class=len(bank))
    assert sorted(text for (text,) in silver.texts) == sorted(others)
    assert counts["removed_dev_or_test"] == 2 and counts["kept"] == len(others)


def pair_silver_of(train, course_data, tiny_model, seed):
    """STS's silver pairs of `train`, every training sentence drawn, a teacher that scores every pair 2.5."""
    from minbert.training.silver import HeldOut, pair_silver

    class Halfway:
        def soft(self, task, examples):
            return torch.full((len(examples),), 2.5)

    retriever = SentenceEncoder.from_pretrained(tiny_model)
    return pair_silver(REGISTRY["sts"], train, Halfway(), retriever, HeldOut(course_data), 1000, seed)


def test_no_silver_pair_holds_a_dev_or_test_sentence_first_or_second(course_data, tiny_model, one_thread):
    """A training pair whose first sentence is an SST dev sentence (the course's files share sentences): paired
    with the others, that sentence falls first in some pairs and second in others, over ten seeds; no pair that
    holds it is kept, and each is counted."""
    from minbert.data.readers import PairExample

    held = rows_of(course_data / "ids-sst-dev.csv")[0]["sentence"]
    sentences = new_sentences(8)
    train = [PairExample("0", held, sentences[0], 1.0)] + [
        PairExample(str(i), sentences[i], sentences[i + 1], 3.0) for i in range(1, 7, 2)]
    removed = 0
    for seed in range(10):
        silver, counts = pair_silver_of(train, course_data, tiny_model, seed)
        assert silver.texts and not any(normalise(held) in map(normalise, pair) for pair in silver.texts)
        removed += counts["removed_dev_or_test"]
    assert removed >= 10  # each seed's nearest pairs alone hold it twice: first, and as another's neighbour


def test_silver_pairs_never_repeat_the_tasks_own_training_pairs(course_data, tiny_model, one_thread):
    """Training pairs of every two of four sentences: every pair of them is a gold pair, so no silver pair is left,
    and the counts say they were removed as training pairs."""
    from minbert.data.readers import PairExample

    sentences = new_sentences(4)
    train = [PairExample(f"{i}-{j}", sentences[i], sentences[j], 2.0) for i in range(4) for j in range(i + 1, 4)]
    gold = {frozenset(map(normalise, (record.sentence1, record.sentence2))) for record in train}
    for seed in range(3):
        silver, counts = pair_silver_of(train, course_data, tiny_model, seed)
        assert not any(frozenset(map(normalise, pair)) in gold for pair in silver.texts)
        assert counts["kept"] == 0 and counts["removed_in_training"] >= 4  # each sentence's nearest: a gold pair


def test_the_silver_loss_joins_the_gold_loss_weighted_by_silver_weight(silver_folder, course_data, tiny_model,
                                                                       tmp_path, one_thread):
    """The first step's logged loss of each task, at the same starting weights and batches: gold + w x silver, so
    that going from w = 1 to w = 3 adds twice what going to w = 2 adds (the silver loss itself is not 0)."""
    def first_losses(weight: str) -> dict[str, float]:
        out = tmp_path / f"weight-{weight}"
        multitask_classifier.main(multitask_argv(tiny_model, course_data, out, "--silver", str(silver_folder),
                                                 "--silver-weight", weight, "--max-steps", "1", "--log-every", "1",
                                                 "--no-predict-test", "--quiet"))
        records = [json.loads(line) for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
        return next(record["loss"] for record in records if record.get("step") == 1 and "loss" in record)

    once, twice, thrice = first_losses("1"), first_losses("2"), first_losses("3")
    assert once and once.keys() == twice.keys() == thrice.keys()  # the step's task(s): the same in each run
    for task in once:
        silver = twice[task] - once[task]
        assert abs(silver) > 1e-4, task
        assert thrice[task] - once[task] == pytest.approx(2 * silver, rel=1e-3, abs=1e-6), task
