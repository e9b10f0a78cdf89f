"""benchmarks/gpu_base_recipe.sh, the base recipe's GPU calls, rehearsed on the CPU at tiny sizes (SCALE=tiny: a tiny
random MPNet as all-mpnet-base-v2, a tiny BERT with MiniLM's vocabulary as all-MiniLM-L6-v2, the first rows of the
course's files): each call's bundle is complete and within what the device tool brings back, its leaderboard files
score what its runs logged, and the student call learns from the base call's silver data. --help, list and bad
settings start nothing."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_base_recipe.sh"
sys.path.insert(0, str(ROOT))
from benchmarks import gpu_base_report  # noqa: E402


def call(tmp_path, *args, **env):
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=tmp_path, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
                               "PLAN_DIR": str(tmp_path / "plan"), **env})


@pytest.fixture(scope="module")
def rehearsed(tmp_path_factory, tiny_mpnet, tiny_model, data_dir):
    """The base call, then the student call with the base call's silver data unpacked as the committed folder
    would be: (the folder, the base call's OUT, the unpacked folder, the student call's OUT)."""
    folder = tmp_path_factory.mktemp("gpu-base")
    machine = {"SCALE": "tiny", "MODEL_BASE": str(tiny_mpnet), "MODEL": str(tiny_model), "DATA": str(data_dir)}
    base = call(folder, "base", OUT=str(folder / "out-base"), **machine)
    assert base.returncode == 0, base.stdout[-3000:] + base.stderr[-3000:]
    gpu_base_report.unpack(folder / "out-base", folder / "committed")
    student = call(folder, "student", OUT=str(folder / "out-student"), SEEDS="1",
                   SILVER=str(folder / "committed" / "silver"), **machine)
    assert student.returncode == 0, student.stdout[-3000:] + student.stderr[-3000:]
    return folder, folder / "out-base", folder / "committed", folder / "out-student"


def test_the_base_call_returns_its_seeds_ensemble_and_silver_data_within_the_tools_limits(rehearsed):
    folder, out, _, _ = rehearsed
    assert gpu_base_report.check(out, "base", ["base-s1", "base-s2", "base-s3"], silver=True) == []
    assert sorted(path.name for path in out.iterdir()) == ["base.json", "base.log", "base.md", "runs.tar.gz",
                                                          "silver.tar.gz"]
    report = json.loads((out / "base.json").read_text())
    assert [line["step"] for line in report["steps"]] == ["machine", "train", "ensemble", "silver"]
    # The mean ± sd over the three seeds, as statistics would compute it from each run's row.
    group = report["groups"]["--config mtdnn-mpnet-gpu"]
    overall = [report["runs"][f"base-s{seed}"]["overall"] for seed in (1, 2, 3)]
    mean = sum(overall) / 3
    assert group["runs"] == 3 and group["overall"]["mean"] == pytest.approx(mean)
    assert group["overall"]["sd"] == pytest.approx((sum((x - mean) ** 2 for x in overall) / 2) ** 0.5)
    assert report["ensemble"]["members"] == [str(folder / "plan/base/runs" / f"base-s{seed}") for seed in (1, 2, 3)]
    assert all(row["training s"] > 0 for row in report["runs"].values())


def test_the_committed_leaderboard_files_score_what_the_runs_logged(rehearsed, data_dir):
    """score reads the leaderboard files and the dev labels alone: its numbers equal the runs' own logs and the
    ensemble's report."""
    folder, out, committed, _ = rehearsed
    report = json.loads((committed / "base.json").read_text())
    _, rows = gpu_base_report.score(committed, folder / "plan" / "data")
    assert sorted(rows) == ["base-s1", "base-s2", "base-s3", "ensemble"]
    for run in ("base-s1", "base-s2", "base-s3"):
        for metric in ("sst", "para", "sts", "overall"):
            assert rows[run][metric] == pytest.approx(report["runs"][run][metric], abs=1e-6), (run, metric)
    assert rows["ensemble"]["overall"] == pytest.approx(report["ensemble"]["dev"]["overall"], abs=1e-6)
    silver = committed / "silver"
    assert all((silver / f"{task}-silver.csv").stat().st_size > 0 for task in ("sst", "para", "sts"))


def test_the_student_call_trains_gold_and_silver_runs_of_the_small_models_recipe(rehearsed):
    _, _, committed, out = rehearsed
    assert gpu_base_report.check(out, "student", ["gold-s1", "silver-s1"], silver=False) == []
    report = json.loads((out / "student.json").read_text())
    assert sorted(report["groups"]) == ["--config mtdnn-minilm", f"--config mtdnn-minilm --silver {committed}/silver"]
    assert "ensemble" not in report and "silver" not in report


def test_help_and_list_start_nothing(tmp_path):
    result = call(tmp_path, "--help")
    assert result.returncode == 0 and "usage: bash benchmarks/gpu_base_recipe.sh base|grid|student|list CALL" in \
        result.stdout
    assert not any(line.startswith("#") for line in result.stdout.splitlines())
    assert call(tmp_path, "list", "base").stdout.splitlines() == ["base-s1|--seed 1", "base-s2|--seed 2",
                                                                  "base-s3|--seed 3"]
    assert call(tmp_path, "list", "grid", GRID="recipe smart").stdout.splitlines() == ["recipe|--seed 1",
                                                                                       "smart|--seed 1 --smart"]
    assert call(tmp_path, "list", "student", SEEDS="1", SILVER="s").stdout.splitlines() == [
        "gold-s1|--seed 1", "silver-s1|--seed 1 --silver s"]
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("args, env, message", [
    (["call"], {}, "gpu_base_recipe.sh: give base, grid, student or list CALL (got 'call'; see --help)"),
    (["list", "all"], {}, "gpu_base_recipe.sh: list base, grid or student (got 'all')"),
    (["grid"], {"GRID": "recipe lr1"},
     "gpu_base_recipe.sh: GRID: no run named lr1 (recipe, lr2e-5, para1, lld, smart)"),
    (["base"], {"MODEL_BASE": "", "MODEL": "m", "DATA": "d"},
     "gpu_base_recipe.sh: MODEL_BASE is not set: begin with  source .device/setup.sh && (MODEL_BASE: after the calls "
     "that send all-mpnet-base-v2's chunks)"),
    (["base"], {"MODEL_BASE": "b", "MODEL": "m", "DATA": "d", "BANK": "nowhere.txt"},
     "gpu_base_recipe.sh: BANK=nowhere.txt: no such file (the bank of unlabeled sentences, for the silver data)"),
    (["student"], {"MODEL_BASE": "b", "MODEL": "m", "DATA": "d", "SILVER": "nowhere"},
     "gpu_base_recipe.sh: SILVER=nowhere holds no silver data (silver.json): the base call makes it"),
])
def test_bad_calls_are_one_line_and_exit_code_2(tmp_path, args, env, message):
    result = call(tmp_path, *args, **env)
    assert result.returncode == 2 and result.stderr.strip() == message
    assert not any(tmp_path.iterdir())


def test_check_names_what_a_bundle_lacks(tmp_path):
    """An empty OUT, and one with more files than the device tool brings back."""
    assert gpu_base_report.check(tmp_path, "base", ["base-s1"], silver=True) == ["base.json or runs.tar.gz missing"]
    for i in range(9):
        (tmp_path / f"f{i}.txt").write_text("x")
    assert gpu_base_report.check(tmp_path, "base", ["base-s1"], silver=True)[0] == "9 files, more than 8"


def test_unpack_refuses_a_folder_that_is_no_calls_bundle(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        gpu_base_report.main(["unpack", str(tmp_path)])
    assert stopped.value.code == 2
    assert capsys.readouterr().err == (f"gpu_base_report.py: {tmp_path}: not the files of one call of "
                                       "gpu_base_recipe.sh (no base.json, grid.json or student.json, or several)\n")
    assert not any(tmp_path.iterdir())
