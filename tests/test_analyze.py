"""analyze.py and the analysis package: every number against a direct computation (transformers, scipy, sklearn,
by hand) on tiny inputs; every subcommand's files; pictures that stay legible with several models (each its own
look or panel, integer ticks, titles that count what is plotted); bad inputs as one line and exit code 2."""
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
import sklearn.metrics
import torch
import transformers
from matplotlib.container import BarContainer, ErrorbarContainer

from minbert.commands import analyze
from minbert.analysis import curves, embeddings, errors, layers, spread
from minbert.analysis.curves import read_metrics, run_curves
from minbert.analysis.figures import model_style
from minbert.analysis.report import short_names
from minbert.analysis.spread import bucket_statistics
from minbert.common.errors import UsageError
from minbert.common.outputs import written_by
from minbert.data.readers import PairExample, SentenceExample
from minbert.heads.similarity import lowest_bucket_mean_cosine
from minbert.tasks import REGISTRY
from tests.conftest import sentence

ROOT = Path(__file__).resolve().parents[1]


# ---- each kind of task's dev errors (analysis/errors.py) ----

SST, PARA, STS = (REGISTRY[name] for name in ("sst", "para", "sts"))


def test_classification_errors_against_sklearn_and_confidence_by_hand():
    rng = np.random.default_rng(0)
    probabilities = torch.tensor(rng.dirichlet(np.ones(5), size=40), dtype=torch.float)
    gold = rng.integers(0, 5, 40)
    gold[gold == 4] = 3  # a class with no gold example: its row of fractions stays zero
    records = [SentenceExample(f"s{i}", f"sentence {i}", int(g)) for i, g in enumerate(gold)]
    result = errors.task_errors(SST, records, probabilities, tolerance=1.0)
    predicted = probabilities.argmax(-1).numpy()
    assert result["accuracy"] == pytest.approx(sklearn.metrics.accuracy_score(gold, predicted))
    assert result["confusion"] == sklearn.metrics.confusion_matrix(gold, predicted, labels=range(5)).tolist()
    with np.errstate(invalid="ignore"):
        fractions = np.nan_to_num(sklearn.metrics.confusion_matrix(gold, predicted, labels=range(5), normalize="true"))
    assert np.allclose(result["confusion_normalised"], fractions)
    wrong = [i for i in range(40) if gold[i] != predicted[i]]
    assert result["wrong"] == [gold[i] != predicted[i] for i in range(40)]
    confidences = [e["confidence"] for e in result["misclassified"]]
    assert sorted(e["id"] for e in result["misclassified"]) == sorted(f"s{i}" for i in wrong)
    assert confidences == sorted(confidences, reverse=True)
    assert confidences[0] == pytest.approx(max(probabilities[i].max().item() for i in wrong))


def test_paraphrase_errors_split_false_positives_and_negatives_by_hand():
    p = torch.tensor([0.9, 0.6, 0.4, 0.1, 0.8, 0.3])
    gold = [0, 0, 1, 1, 1, 0]  # false positives: 0 (0.9), 1 (0.6); false negatives: 2 (0.4), 3 (0.1)
    records = [PairExample(f"q{i}", f"a{i}", f"b{i}", float(g)) for i, g in enumerate(gold)]
    result = errors.task_errors(PARA, records, p, tolerance=1.0)
    assert result["accuracy"] == pytest.approx(2 / 6)
    assert [e["id"] for e in result["false_positives"]] == ["q0", "q1"]
    assert [e["id"] for e in result["false_negatives"]] == ["q3", "q2"]  # the most confident first: 1 - 0.1
    assert [e["confidence"] for e in result["false_negatives"]] == pytest.approx([0.9, 0.6])
    assert result["wrong"] == [True, True, True, True, False, False]


def test_similarity_errors_against_scipy_and_the_tolerance():
    scores = torch.tensor([4.0, 1.0, 2.5, 0.0])
    gold = [3.5, 2.5, 2.5, 0.2]
    records = [PairExample(f"p{i}", f"a{i}", f"b{i}", g) for i, g in enumerate(gold)]
    result = errors.task_errors(STS, records, scores, tolerance=1.0)
    assert result["pearson"] == pytest.approx(scipy.stats.pearsonr(scores.numpy(), gold).statistic)
    assert [e["id"] for e in result["largest_errors"]] == ["p1", "p0", "p3", "p2"]
    assert [e["error"] for e in result["largest_errors"]] == pytest.approx([1.5, 0.5, 0.2, 0.0])
    assert result["wrong"] == [False, True, False, False]
    assert errors.task_errors(STS, records, scores, tolerance=0.4)["wrong"] == [True, True, False, False]


@pytest.mark.parametrize("name", REGISTRY)
def test_every_kind_of_task_reports_its_errors_and_draws_its_panel(name):
    task, rng = REGISTRY[name], random.Random(0)
    if task.pair:
        records = [PairExample(f"x{i}", f"a | {i}", f"b {i}", float(rng.randint(0, 1))) for i in range(6)]
        soft = torch.rand(6, generator=torch.Generator().manual_seed(0)) * (5 if task.metric_name == "pearson" else 1)
    else:
        records = [SentenceExample(f"x{i}", f"a | {i}", rng.randrange(task.num_classes)) for i in range(6)]
        soft = torch.softmax(torch.randn(6, task.num_classes, generator=torch.Generator().manual_seed(0)), -1)
    result = errors.task_errors(task, records, soft, tolerance=1.0)
    report = "\n".join(errors.error_report(task, result, top=2))
    assert report.startswith(f"## {task.title}") and "a \\| " in report  # a | in a sentence cannot end its cell
    [panel] = errors.draw_errors("errors", [errors.error_panel(task, result, records, soft)]).axes[:1]
    assert panel.get_title().startswith(f"{task.title} dev, 6 ")



def write_course_file(path: Path, columns: list[str], rows: list[list]) -> None:
    """The course's format: tab-separated, a leading unnamed index column."""
    lines = ["\t" + "\t".join(columns)] + [f"{i}\t" + "\t".join(map(str, row)) for i, row in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def varied_model(make_tiny_model) -> Path:
    """A tiny random BERT whose every layer tells sentences apart. With BERT's initialisation (std 0.02) a random
    model's [CLS] cosines agree to 1e-5, so float32 rounding, not the model, would rank them; std 0.5 spreads
    them (gaps of 2e-4 or more between any two pairs' cosines here)."""
    return make_tiny_model(initializer_range=0.5)


@pytest.fixture(scope="module")
def sts_data(tmp_path_factory) -> Path:
    """sts-train.csv, sts-dev.csv and sts-eval/sts12.tsv of a few random pairs; gold scores in every range."""
    folder, rng = tmp_path_factory.mktemp("sts"), random.Random(0)
    for name, rows in (("sts-train", 24), ("sts-dev", 16)):
        scores = [0.0, 0.2, 0.25, 4.5, 5.0] + [round(rng.uniform(0, 5), 1) for _ in range(rows - 5)]
        write_course_file(folder / f"{name}.csv", ["id", "sentence1", "sentence2", "similarity"],
                          [[f"{name}-{i}", sentence(rng), sentence(rng), score] for i, score in enumerate(scores)])
    (folder / "sts-eval").mkdir()
    rows = [f"part\t{sentence(rng)}\t{sentence(rng)}\t{rng.uniform(0, 5):.2f}" for _ in range(12)]
    (folder / "sts-eval" / "sts12.tsv").write_text("subset\tsentence1\tsentence2\tscore\n" + "\n".join(rows) + "\n")
    return folder


def pairs_of(path: Path) -> list[tuple[str, str, float]]:
    lines = [line.split("\t") for line in path.read_text().splitlines()[1:]]
    return [(f[-3], f[-2], float(f[-1])) for f in lines]


def transformers_layers(model_dir: Path, sentences: list[str]) -> list[torch.Tensor]:
    """Each sentence alone (no padding) through transformers.BertModel: its hidden states, [layers + 1, T, H]."""
    model = transformers.BertModel.from_pretrained(model_dir).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    with torch.no_grad():
        return [torch.stack(model(**tokenizer([s], return_tensors="pt"), output_hidden_states=True).hidden_states)[:, 0]
                for s in sentences]


POOL = {"mean": lambda h: h.mean(-2), "cls": lambda h: h[..., 0, :], "max": lambda h: h.max(-2).values}


def cosines(model_dir: Path, pairs, pooling: str) -> np.ndarray:
    """[layers + 1, pairs] cosine similarities, by transformers and numpy."""
    first = [POOL[pooling](h).numpy() for h in transformers_layers(model_dir, [p[0] for p in pairs])]
    second = [POOL[pooling](h).numpy() for h in transformers_layers(model_dir, [p[1] for p in pairs])]
    return np.stack([(a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)
                     for a, b in zip(first, second)], axis=1)


def run(*argv) -> list[Path]:
    return analyze.main([*argv])


def assert_writes_picture_table_and_json(written: list[Path], stem: str) -> dict:
    pictures = [path for path in written if path.suffix == ".png"]
    assert pictures and all(path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for path in pictures)
    folder = written[0].parent
    assert (folder / f"{stem}.md").read_text().startswith("# ")
    return json.loads((folder / f"{stem}.json").read_text())


def test_layers_match_transformers_hidden_states_and_scipy(varied_model, sts_data, tmp_path):
    written = run("layers", "--models", str(varied_model), "--data-dir", str(sts_data), "--sets", "sts12,sts-dev",
                  "--device", "cpu", "--precision", "fp32", "--batch-size", "5", "--out", str(tmp_path))
    saved = assert_writes_picture_table_and_json(written, "layers")
    results = saved["results"][varied_model.name]
    assert set(results) == {"mean", "cls", "max"} and all(len(rows) == 3 for rows in results.values())
    sets = {"sts12": pairs_of(sts_data / "sts-eval" / "sts12.tsv"), "sts-dev": pairs_of(sts_data / "sts-dev.csv")}
    for pooling, rows in results.items():
        per_set = {name: cosines(varied_model, pairs, pooling) for name, pairs in sets.items()}
        for layer, row in enumerate(rows):
            for name, pairs in sets.items():
                if pooling == "cls" and layer == 0:  # the same [CLS] vector for every sentence: no ranking
                    assert np.ptp(per_set[name][0]) == 0 and row[name] is None and row["mean"] is None
                    continue
                expected = 100 * scipy.stats.spearmanr(per_set[name][layer], [p[2] for p in pairs]).statistic
                assert row[name] == pytest.approx(expected, abs=1e-4), (pooling, layer, name)
            if row["mean"] is not None:
                assert row["mean"] == pytest.approx((row["sts12"] + row["sts-dev"]) / 2)


def test_bucket_means_by_hand():
    gold = torch.tensor([0.0, 0.25, 0.3, 0.5, 4.9, 5.0, 2.5])
    cos = torch.tensor([0.1, 0.3, 0.2, 0.4, 0.9, 0.7, 0.5])
    buckets = bucket_statistics(cos, gold)
    assert len(buckets) == 20 and [b["low"] for b in buckets[:2]] == [0.0, 0.25] and buckets[-1]["high"] == 5.0
    filled = {i: b for i, b in enumerate(buckets) if b["count"]}
    # 0.25 is in [0, 0.25], 2.5 in (2.25, 2.5], 5.0 in (4.75, 5]
    assert {i: b["count"] for i, b in filled.items()} == {0: 2, 1: 2, 9: 1, 19: 2}
    assert filled[0]["mean"] == pytest.approx(0.2) and filled[0]["std"] == pytest.approx(0.1)
    assert filled[1]["mean"] == pytest.approx(0.3) and filled[19]["mean"] == pytest.approx(0.8)
    assert filled[9] == {**filled[9], "mean": pytest.approx(0.5), "std": pytest.approx(0.0)}
    assert buckets[5]["mean"] is None and buckets[5]["std"] is None
    assert lowest_bucket_mean_cosine(cos, gold) == pytest.approx(filled[0]["mean"])  # M is bucket 0's mean


def test_spread_command_gives_the_bucket_means_and_m_of_transformers_cosines(varied_model, sts_data, tmp_path):
    saved = assert_writes_picture_table_and_json(
        run("spread", "--models", str(varied_model), "--data-dir", str(sts_data), "--device", "cpu",
            "--precision", "fp32", "--out", str(tmp_path)), "spread")
    pairs = pairs_of(sts_data / "sts-train.csv")
    expected = cosines(varied_model, pairs, "mean")[-1]
    gold = np.array([p[2] for p in pairs])
    assert saved["M"][varied_model.name] == pytest.approx(expected[gold <= 0.25].mean(), abs=1e-5)
    buckets = saved["buckets"][varied_model.name]
    assert sum(b["count"] for b in buckets) == len(pairs)
    top = (gold > 4.75) & (gold <= 5)
    assert buckets[-1]["mean"] == pytest.approx(expected[top].mean(), abs=1e-5)
    assert buckets[-1]["std"] == pytest.approx(expected[top].std(), abs=1e-5)


def test_embeddings_alignment_and_uniformity_by_their_formula(varied_model, sts_data, tmp_path):
    saved = assert_writes_picture_table_and_json(
        run("embeddings", "--models", str(varied_model), "--data-dir", str(sts_data), "--poolings", "mean,cls",
            "--device", "cpu", "--precision", "fp32", "--out", str(tmp_path)), "embeddings")
    pairs = pairs_of(sts_data / "sts-dev.csv")
    for pooling in ("mean", "cls"):
        first = [POOL[pooling](h[-1]) for h in transformers_layers(varied_model, [p[0] for p in pairs])]
        second = [POOL[pooling](h[-1]) for h in transformers_layers(varied_model, [p[1] for p in pairs])]
        first, second = ([x / x.norm() for x in side] for side in (first, second))
        positives = [i for i, p in enumerate(pairs) if p[2] >= 4]
        alignment = sum(float((first[i] - second[i]).norm() ** 2) for i in positives) / len(positives)
        every = first + second
        kernel = [float(torch.exp(-2 * (every[i] - every[j]).norm() ** 2))
                  for i in range(len(every)) for j in range(i + 1, len(every))]
        point = saved["points"][varied_model.name][pooling]
        assert point["alignment"] == pytest.approx(alignment, abs=1e-5)
        assert point["uniformity"] == pytest.approx(np.log(np.mean(kernel)), abs=1e-5)
        cosines_ = [float(a @ b) for a, b in zip(first, second)]
        assert point["sts-dev"] == pytest.approx(100 * scipy.stats.spearmanr(cosines_, [p[2] for p in pairs]).statistic,
                                                 abs=1e-4)


@pytest.fixture
def finished_run(tmp_path):
    """A run folder whose best/ holds fabricated dev (and test) outputs, and the dev files they score; the SST
    sentence "a shared sentence" is also the first sentence of STS pair 0."""
    data, best = tmp_path / "data", tmp_path / "run" / "best"
    data.mkdir(), best.mkdir(parents=True)
    sst_gold, para_gold, sts_gold = [0, 1, 2, 3, 4, 2, 1, 0], [1, 0, 1, 0, 1, 0], [0.5, 1.0, 2.0, 3.5, 4.0, 5.0]
    sst_sentences = ["a shared sentence"] + [f"review {i}" for i in range(1, 8)]
    write_course_file(data / "ids-sst-dev.csv", ["id", "sentence", "sentiment"],
                      [[f"s{i}", text, label] for i, (text, label) in enumerate(zip(sst_sentences, sst_gold))])
    write_course_file(data / "quora-dev.csv", ["id", "sentence1", "sentence2", "is_duplicate"],
                      [[f"q{i}", f"question {i}?", f"other {i}?", label] for i, label in enumerate(para_gold)])
    write_course_file(data / "sts-dev.csv", ["id", "sentence1", "sentence2", "similarity"],
                      [[f"t{i}", "A  Shared sentence" if i == 0 else f"one {i}", f"two {i}", label]
                       for i, label in enumerate(sts_gold)])
    generator = torch.Generator().manual_seed(0)
    outputs = {"sst": torch.randn(8, 5, generator=generator).softmax(-1), "para": torch.rand(6, generator=generator),
               "sts": torch.tensor([3.0, 1.2, 2.1, 3.0, 4.1, 2.0])}
    for task, prefix in (("sst", "s"), ("para", "q"), ("sts", "t")):
        ids = [f"{prefix}{i}" for i in range(len(outputs[task]))]
        for split in ("dev", "test"):
            torch.save({"ids": ids, "outputs": outputs[task]}, best / f"outputs-{task}-{split}.pt")
    return tmp_path / "run", data, outputs, {"sst": sst_gold, "para": para_gold, "sts": sts_gold}


def test_errors_command_against_sklearn_scipy_and_by_hand(finished_run, tmp_path):
    folder, data, outputs, gold = finished_run
    saved = assert_writes_picture_table_and_json(
        run("errors", "--run", str(folder), "--data-dir", str(data), "--out", str(tmp_path / "out")), "errors")
    sst, para, sts = (saved["results"][task] for task in ("sst", "para", "sts"))

    predicted = outputs["sst"].argmax(-1).numpy()
    assert sst["confusion"] == sklearn.metrics.confusion_matrix(gold["sst"], predicted, labels=range(5)).tolist()
    wrong = [i for i in range(8) if predicted[i] != gold["sst"][i]]
    assert sorted(e["id"] for e in sst["misclassified"]) == sorted(f"s{i}" for i in wrong)
    confidences = [e["confidence"] for e in sst["misclassified"]]
    assert confidences == sorted(confidences, reverse=True)
    assert confidences[0] == pytest.approx(max(outputs["sst"][i].max().item() for i in wrong))

    p = outputs["para"].numpy()
    assert [e["id"] for e in para["false_positives"]] == [f"q{i}" for i in np.argsort(-p) if p[i] > 0.5
                                                          and gold["para"][i] == 0]
    assert [e["id"] for e in para["false_negatives"]] == [f"q{i}" for i in np.argsort(p) if p[i] <= 0.5
                                                          and gold["para"][i] == 1]

    assert sts["pearson"] == pytest.approx(scipy.stats.pearsonr(outputs["sts"].numpy(), gold["sts"]).statistic)
    errors = [abs(a - b) for a, b in zip(outputs["sts"].tolist(), gold["sts"])]
    assert [e["error"] for e in sts["largest_errors"]] == pytest.approx(sorted(errors, reverse=True))
    assert [e["id"] for e in sts["largest_errors"][:2]] == ["t5", "t0"]  # off by 3.0 and 2.5
    # The one shared sentence: SST and STS both wrong on it exactly when SST misclassifies s0 (STS t0 is off by 2.5).
    shared = {row["tasks"]: row for row in saved["cross_task"]}
    assert shared["sst & sts"]["shared"] == 1 and shared["sst & para"]["shared"] == 0
    assert shared["sst & sts"]["both_wrong"] == int(0 in wrong)
    assert "too few to say whether errors coincide" in (tmp_path / "out" / "errors.md").read_text()


EVAL_LINE = {"epoch": 1, "step": 10, "train_loss": {"sst": 1.5, "para": 0.7}, "dev": {"sst": 0.3, "overall": 0.5},
             "seconds": 1.0}


def test_curves_read_old_eval_lines_and_new_train_lines(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir(), new.mkdir()
    (old / "metrics.jsonl").write_text("\n".join(json.dumps(line) for line in (
        EVAL_LINE, {**EVAL_LINE, "step": 20, "train_loss": {"sst": 1.2, "para": 0.6}, "dev": {"sst": 0.4}})) + "\n")
    (new / "metrics.jsonl").write_text("\n".join([
        json.dumps({"event": "train", "step": 5, "epoch": 1, "loss": {"sst": 1.6}, "lr": 1e-5, "examples_per_s": 9.0}),
        json.dumps({"event": "train", "step": 10, "epoch": 1, "loss": {"sst": 1.4, "para": 0.5}, "lr": 2e-5}),
        json.dumps({**EVAL_LINE, "event": "eval"}),
        '{"event": "train", "step": 15, "lo']) + "\n")  # a run killed while writing its last line

    old_curves = run_curves(*read_metrics(old / "metrics.jsonl"))
    new_curves = run_curves(*read_metrics(new / "metrics.jsonl"))
    assert old_curves.train_loss_from == "eval lines"
    assert old_curves.train_loss == {"sst": [(10, 1.5), (20, 1.2)], "para": [(10, 0.7), (20, 0.6)]}
    assert old_curves.dev == {"sst": [(10, 0.3), (20, 0.4)], "overall": [(10, 0.5)]}
    assert new_curves.train_loss_from == "train lines" and (new_curves.train_lines, new_curves.eval_lines) == (2, 1)
    assert new_curves.train_loss == {"sst": [(5, 1.6), (10, 1.4)], "para": [(10, 0.5)]}
    assert new_curves.dev == {"sst": [(10, 0.3)], "overall": [(10, 0.5)]}

    saved = assert_writes_picture_table_and_json(
        run("curves", "--runs", f"{old},{new / 'metrics.jsonl'}", "--out", str(tmp_path / "out")), "curves")
    assert sorted(saved["pictures"]) == ["curves-dev-overall.png", "curves-dev-sst.png", "curves-train-loss-para.png",
                                         "curves-train-loss-sst.png"]
    assert saved["runs"]["new"]["train_loss"]["sst"] == [[5, 1.6], [10, 1.4]]


def test_curves_read_a_trainers_metrics_without_a_warning(tiny_model, course_data, tmp_path, caplog, one_thread):
    import multitask_classifier
    from tests.conftest import multitask_argv

    multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path, "--max-steps", "2", "--epochs", "1",
                                             "--log-every", "1"))
    events = [json.loads(line)["event"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    caplog.clear()
    train, evals = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert events == ["train", "train", "eval", "finish"] and (len(train), len(evals)) == (2, 1)
    assert [record.message for record in caplog.records if record.levelname == "WARNING"] == []


# ---- pictures legible whatever runs they are given ----

@pytest.fixture(scope="module")
def four_models(varied_model, tiny_model, make_tiny_model) -> list[Path]:
    """Four tiny random BERTs, two of them the same weights at other scales: models that score alike."""
    return [varied_model, tiny_model, make_tiny_model(initializer_range=0.3), make_tiny_model(initializer_range=0.1)]


def drawn_lines(axes) -> list:
    """The lines a legend names (matplotlib's own start with an underscore)."""
    return [line for line in axes.get_lines() if not line.get_label().startswith("_")]


def visible_ticks(axis) -> list[tuple[float, str]]:
    """(position, label) of the major ticks inside the view, as the canvas draws them."""
    axis.get_figure(root=True).canvas.draw()
    low, high = sorted(axis.get_view_interval())
    return [(position, label.get_text()) for position, label in zip(axis.get_majorticklocs(), axis.get_ticklabels())
            if low <= position <= high]


def assert_integer_ticks(axis) -> None:
    ticks = visible_ticks(axis)
    assert ticks, "no tick in view"
    for position, text in ticks:
        assert float(position).is_integer() and re.fullmatch(r"[−-]?[\d,]+", text), ticks


def test_model_style_tells_any_two_models_apart():
    styles = [model_style(number) for number in range(70)]
    assert len({(repr(style["linestyle"]), style["marker"]) for style in styles}) == 70
    assert len({repr(style["linestyle"]) for style in styles[:7]}) == 7
    assert len({style["marker"] for style in styles[:10]}) == len({style["color"] for style in styles[:10]}) == 10
    assert model_style(3) == model_style(3)  # the same model, the same look, in every picture


def test_layers_picture_gives_every_model_its_own_line_style_and_marker(four_models, sts_data, one_thread):
    figure = layers.build(layers.LayersConfig(models=",".join(map(str, four_models)), data_dir=str(sts_data),
                                              sets="sts-dev", poolings="mean,cls", device="cpu")).figures["layers.png"]
    names = short_names([str(model) for model in four_models])
    panels = [axes for axes in figure.axes if drawn_lines(axes)]
    assert [panel.get_title() for panel in panels] == ["mean pooling", "[CLS]"]
    looks = []
    for panel in panels:
        lines = drawn_lines(panel)
        assert [line.get_label() for line in lines] == names
        look = [(line.get_linestyle(), line.get_marker(), line.get_color()) for line in lines]
        # no two lines of a panel share a line style, a marker or a colour, so none hides another
        assert all(len({item[part] for item in look}) == 4 for part in range(3)), look
        looks.append(look)
        assert_integer_ticks(panel.xaxis)
    assert looks[0] == looks[1]  # a model looks the same in each panel
    assert [text.get_text() for text in figure.legends[0].get_texts()] == names


def test_spread_picture_gives_every_model_and_pooling_its_own_panel(four_models, sts_data, one_thread):
    models = four_models[:3]
    report = spread.build(spread.SpreadConfig(models=",".join(map(str, models)), data_dir=str(sts_data),
                                              poolings="mean,cls", device="cpu"))
    figure = report.figures["spread.png"]
    panels = [axes for axes in figure.axes if any(isinstance(c, ErrorbarContainer) for c in axes.containers)]
    assert len(panels) == 6 and all(len(panel.containers) == 1 for panel in panels)  # one series a panel
    titles = {panel.get_title() for panel in panels}
    for name in short_names([str(model) for model in models]):
        for pooling in ("mean pooling", "[CLS]"):
            m = report.numbers["M"][f"{name}, {pooling}"]
            assert f"{name}, {pooling}: M = {m:.3f}" in titles
    assert all(panel.get_shared_y_axes().joined(panels[0], panel) for panel in panels)  # comparable at a glance
    counts = [axes for axes in figure.axes if any(isinstance(c, BarContainer) for c in axes.containers)]
    assert counts and all(sum(bar.get_height() for bar in axes.containers[0]) == 24 for axes in counts)
    for axes in counts:
        assert_integer_ticks(axes.yaxis)  # a few pairs a bucket: no half pairs
    assert "24 STS training pairs" in figure.get_suptitle()


def test_embeddings_title_counts_the_pairs_and_sentences_each_measure_uses(four_models, sts_data, one_thread):
    models = four_models[:2]
    figure = embeddings.build(embeddings.EmbeddingsConfig(
        models=",".join(map(str, models)), data_dir=str(sts_data), poolings="mean,cls",
        device="cpu")).figures["embeddings.png"]
    pairs = pairs_of(sts_data / "sts-dev.csv")
    positives = sum(score >= 4 for _, _, score in pairs)
    assert 0 < positives < len(pairs)  # the two counts differ here, as on the real STS dev (219 of 863)
    counts = re.search(r"alignment over the ([\d,]+) pairs scored ≥ 4; uniformity over the ([\d,]+) sentences "
                       r"of all ([\d,]+) pairs", figure.get_suptitle())
    assert counts, figure.get_suptitle()
    assert [int(count.replace(",", "")) for count in counts.groups()] == [positives, 2 * len(pairs), len(pairs)]
    for panel in (axes for axes in figure.axes if drawn_lines(axes)):
        assert len({line.get_marker() for line in drawn_lines(panel)}) == 2


def test_curves_of_a_single_evaluation_tick_whole_steps(tmp_path):
    few, one = tmp_path / "few", tmp_path / "one"
    few.mkdir(), one.mkdir()
    (few / "metrics.jsonl").write_text("\n".join(json.dumps({**EVAL_LINE, "step": step, "dev": {"para": value}})
                                                 for step, value in ((3, 0.2), (4, 0.3))) + "\n")
    (one / "metrics.jsonl").write_text(json.dumps(EVAL_LINE) + "\n")  # one evaluation, at step 10
    report = curves.build(curves.CurvesConfig(runs=f"{few},{one}"))
    assert set(report.figures) >= {"curves-dev-sst.png", "curves-dev-overall.png"}
    for figure in report.figures.values():
        assert_integer_ticks(figure.axes[0].xaxis)
    sst, overall = (drawn_lines(report.figures[f"curves-dev-{metric}.png"].axes[0]) for metric in ("sst", "overall"))
    assert [line.get_label() for line in overall] == ["few (2 evaluations)", "one (1 evaluation)"]
    assert [line.get_label() for line in sst] == ["one (1 evaluation)"]  # few trained para alone
    look = [(line.get_linestyle(), line.get_marker(), line.get_color()) for line in (*overall, *sst)]
    assert look[0][:2] != look[1][:2] and look[2] == look[1]  # "one" keeps its look where "few" has no line


def test_errors_picture_counts_what_each_panel_plots(finished_run):
    folder, data, outputs, gold = finished_run
    figure = errors.build(errors.ErrorsConfig(run=str(folder), data_dir=str(data))).figures["errors.png"]
    sst, para, sts = (axes for axes in figure.axes if axes.get_title())  # the colour bar has none
    assert sst.get_title().startswith(f"SST-5 dev, {len(gold['sst'])} sentences:")
    assert para.get_title().startswith(f"Quora dev, {len(gold['para'])} pairs:")
    assert sts.get_title().startswith(f"STS dev, {len(gold['sts'])} pairs:")
    assert_integer_ticks(para.yaxis)  # dev pairs per bin: 6 pairs give counts of 0 to 3
    not_paraphrase, paraphrase = (c for c in para.containers if isinstance(c, BarContainer))
    assert {bar.get_hatch() for bar in not_paraphrase} != {bar.get_hatch() for bar in paraphrase}


@pytest.mark.parametrize("argv, named", [
    (["errors", "--run", "no/such/run"], "no/such/run: run folder not found"),
    (["curves", "--runs", "no/such/run"], "no/such/run/metrics.jsonl: file not found"),
    (["layers", "--data-dir", "no/such/data"], "no/such/data/sts-eval/sts12.tsv: file not found"),
])
def test_a_missing_input_is_one_line_and_exit_code_2(tmp_path, argv, named):
    result = subprocess.run([sys.executable, "analyze.py", *argv, "--out", str(tmp_path)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"error: {named}"]


@pytest.mark.parametrize("subcommand", list(analyze.SUBCOMMANDS))
def test_every_subcommand_explains_itself(subcommand, capsys):
    with pytest.raises(SystemExit) as exit_info:
        analyze.main([subcommand, "--help"])
    text = capsys.readouterr().out
    assert exit_info.value.code == 0 and "--out" in text
    assert f"usage: analyze.py {subcommand} [-h]" in text  # the usage line names the subcommand


def test_a_bad_flag_value_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        analyze.main(["layers", "--poolings", "mean,pooler"])
    assert exit_info.value.code == 2 and "'pooler' is not one of cls, mean, max" in capsys.readouterr().err


def test_curves_table_of_a_single_task_run_shows_the_overall_score_its_trainer_picked_best_by(tmp_path):
    """A single-task run's eval lines hold its task's metric only; its trainer's overall score is the mean of its
    tasks' scores on [0, 1]: for SST alone, its accuracy (0.3), at that line's step; never None."""
    single = tmp_path / "single"
    single.mkdir()
    (single / "metrics.jsonl").write_text(json.dumps({**EVAL_LINE, "dev": {"sst": 0.3}}) + "\n")  # no overall
    markdown = curves.build(curves.CurvesConfig(runs=str(single))).markdown
    row = next(line for line in markdown.splitlines() if line.startswith("| single"))
    assert "None" not in row and row.rstrip(" |").endswith(f"| 0.3000 | {EVAL_LINE['step']}")


# ---- the files of --out: a user's own file of a name analyze writes is replaced only with --overwrite ----

def one_run(tmp_path: Path) -> Path:
    """A run folder whose metrics.jsonl holds one evaluation line: curves draws curves-dev-sst.png among others."""
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "metrics.jsonl").write_text(json.dumps(EVAL_LINE) + "\n")
    return folder


@pytest.mark.parametrize("name", ["curves.json", "curves-dev-sst.png"])  # known before the work; once drawn
def test_a_users_file_of_a_name_analyze_writes_is_replaced_only_with_overwrite(tmp_path, name):
    out = tmp_path / "out"
    out.mkdir()
    (out / name).write_text("my own notes\n")
    argv = ["curves", "--runs", str(one_run(tmp_path)), "--out", str(out)]
    with pytest.raises(UsageError, match=rf"--out {re.escape(str(out / name))}: a file no command of ours wrote .*"
                                         r"--overwrite"):
        run(*argv)
    assert (out / name).read_text() == "my own notes\n"
    assert sorted(path.name for path in out.iterdir()) == [name]  # nothing written
    written = run(*argv, "--overwrite")
    assert out / name in written and (out / name).read_bytes() != b"my own notes\n"


def test_a_link_of_a_name_analyze_writes_is_refused_even_with_overwrite(tmp_path):
    out, target = tmp_path / "out", tmp_path / "notes.json"
    out.mkdir()
    target.write_text("{}\n")
    (out / "curves.json").symlink_to(target)
    with pytest.raises(UsageError, match="a symbolic link"):
        run("curves", "--runs", str(one_run(tmp_path)), "--out", str(out), "--overwrite")
    assert (out / "curves.json").is_symlink() and target.read_text() == "{}\n"


def test_analyze_replaces_its_own_files_without_overwrite_but_not_once_they_are_edited(tmp_path):
    argv = ["curves", "--runs", str(one_run(tmp_path)), "--out", str(tmp_path / "out")]
    first = run(*argv)
    assert all(written_by(path) == "minbert analyze" for path in first)  # each file's record, made at the write
    assert run(*argv) == first
    (tmp_path / "out" / "curves.md").write_text("my edits\n")  # no longer as the command wrote it
    with pytest.raises(UsageError, match="curves.md: a file no command of ours wrote"):
        run(*argv)
