"""benchmarks/ensemble_study.py: ensembles scored on all of dev and on held-out halves, against sklearn; a run
stopped before its test predictions is left out, named."""
import json
import sys
from pathlib import Path

import torch
from sklearn.metrics import accuracy_score

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import ensemble_study  # noqa: E402
from minbert.tasks import REGISTRY  # noqa: E402


def test_halves_split_every_row_once_and_depend_on_the_seed():
    first, second = ensemble_study.halves(11, seed=0)
    assert sorted(first.tolist() + second.tolist()) == list(range(11)) and len(first) == 5
    assert ensemble_study.halves(11, seed=1)[0].tolist() != first.tolist()


def save_member(folder: Path, ids: list[str], dev: torch.Tensor) -> None:
    (folder / "best").mkdir(parents=True)
    for split, outputs in (("dev", dev), ("test", dev[:3])):
        torch.save({"ids": ids if split == "dev" else ids[:3], "outputs": outputs},
                   folder / "best" / f"outputs-sst-{split}.pt")


def test_a_member_right_on_one_half_only_is_no_better_than_chance_held_out(tmp_path, data_dir):
    """Member a is right on the first half of dev and wrong on the second, member b the other way round: chosen
    on dev, the better of them looks half right; chosen on one half and scored on the other, it is never right."""
    records = REGISTRY["sst"].read(data_dir / "ids-sst-dev.csv", labeled=True)
    ids, labels = [r.id for r in records], torch.tensor([int(r.label) for r in records])
    first, second = ensemble_study.halves(len(ids), seed=0)
    wrong = (labels + 1) % 5
    right_on_first, right_on_second = wrong.clone(), wrong.clone()
    right_on_first[first], right_on_second[second] = labels[first], labels[second]
    a = torch.full((len(ids), 5), 0.025).scatter_(1, right_on_first[:, None], 0.9)
    b = torch.full((len(ids), 5), 0.05).scatter_(1, right_on_second[:, None], 0.8)
    save_member(tmp_path / "a", ids, a)
    save_member(tmp_path / "b", ids, b)
    report = ensemble_study.study({"a": ensemble_study.load_member(tmp_path / "a"),
                                   "b": ensemble_study.load_member(tmp_path / "b")}, data_dir, rounds=5, seed=0)
    best_on_dev = max(accuracy_score(labels, a.argmax(1)), accuracy_score(labels, b.argmax(1)))
    assert report["best member, chosen on dev"]["sst"] == best_on_dev
    assert report["best member, chosen on the other half"]["sst"] == 0.0
    assert report["mean, chosen on dev"]["sst"] == accuracy_score(labels, (a + b).argmax(1))
    mean_held_out = [accuracy_score(labels[rows], (a + b)[rows].argmax(1)) for rows in (second, first)]
    assert abs(report["mean, chosen on the other half"]["sst"] - sum(mean_held_out) / 2) < 1e-12


def test_a_run_without_its_test_outputs_is_left_out_and_named(tmp_path, data_dir, capsys):
    """A run stopped at a time limit after an evaluation has its dev outputs and no test ones."""
    records = REGISTRY["sst"].read(data_dir / "ids-sst-dev.csv", labeled=True)
    ids = [r.id for r in records]
    for name, seed in (("a-s1", 0), ("a-s2", 1), ("stopped-s1", 2)):
        save_member(tmp_path / name, ids, torch.rand(len(ids), 5, generator=torch.Generator().manual_seed(seed)))
    (tmp_path / "stopped-s1" / "best" / "outputs-sst-test.pt").unlink()
    ensemble_study.main(["--runs", str(tmp_path), "--data-dir", str(data_dir), "--rounds", "2",
                         "--out", str(tmp_path / "ensembles.json")])
    printed = capsys.readouterr().out
    assert "- stopped-s1: " in printed and "outputs-sst-test.pt is missing" in printed
    report = json.loads((tmp_path / "ensembles.json").read_text())
    assert list(report["left_out"]) == ["stopped-s1"]
    assert list(report["groups"]) == ["all runs", "a"]  # the two complete runs, and their seeds' group
