"""benchmarks/summarize_sweep.py: which evaluation each run keeps, the spread over seeds, and the runs that did not
finish."""
import importlib.util
import json
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("summarize_sweep", ROOT / "benchmarks/summarize_sweep.py")
summarize_sweep = importlib.util.module_from_spec(spec)
spec.loader.exec_module(summarize_sweep)


def record(run, flags, epoch, step, sst, para, sts):
    overall = (sst + para + (sts + 1) / 2) / 3
    return {"run": run, "flags": flags, "epoch": epoch, "step": step,
            "dev": {"sst": sst, "para": para, "sts": sts, "overall": overall}}


# Run a peaks mid-epoch 2 (step 15), where it meets the targets; after each epoch it does not.
RUN_A = [record("a", "--seed 1", 1, 10, 0.40, 0.80, 0.85), record("a", "--seed 1", 2, 15, 0.49, 0.85, 0.88),
         record("a", "--seed 1", 2, 20, 0.47, 0.84, 0.88)]
RUN_B = [record("b", "--seed 2", 1, 10, 0.48, 0.84, 0.87), record("b", "--seed 2", 2, 20, 0.46, 0.83, 0.86)]
RUN_C = [record("c", "--seed 1 --loss-weights sst=2", 1, 10, 0.30, 0.70, 0.80)]


def test_a_run_keeps_its_best_epoch_end_or_its_best_evaluation():
    assert summarize_sweep.kept(RUN_A, epoch_ends_only=True) == RUN_A[2]["dev"]
    assert summarize_sweep.kept(RUN_A, epoch_ends_only=False) == RUN_A[1]["dev"]
    assert summarize_sweep.kept(RUN_B, epoch_ends_only=True) == RUN_B[0]["dev"]  # epoch 1 beats epoch 2


def test_runs_are_grouped_by_their_flags_without_the_seed():
    rows, unfinished = summarize_sweep.summarize(RUN_A + RUN_B + RUN_C, {"sst": 0.48, "para": 0.84, "sts": 0.87})
    assert unfinished == {}
    assert list(rows) == ["(documented command)", "--loss-weights sst=2"]
    documented = rows["(documented command)"]
    assert documented["runs"] == 2
    ssts = [0.47, 0.48]
    assert documented["sst"] == (f"{statistics.mean(ssts):.4f} ± {statistics.stdev(ssts):.4f} (0.470-0.480)")
    assert documented["targets met, epoch ends"] == 1  # b after epoch 1
    assert documented["targets met, every 379"] == 2  # and a mid-epoch
    assert rows["--loss-weights sst=2"]["targets met, epoch ends"] == 0


def train_line(run, flags, step):
    return {"event": "train", "step": step, "loss": {"sst": 1.2}, "lr": 5e-5, "examples_per_s": 100.0, "run": run,
            "flags": flags}


def test_training_lines_are_left_out_and_the_file_is_tabled(tmp_path, capsys):
    """seed_sweep.sh copies every line of a run's metrics.jsonl, its "train" lines (no epoch, no dev) among them."""
    evaluations = [{**r, "event": "eval"} for r in RUN_A + RUN_B]
    lines = [train_line("a", "--seed 1", 5), *evaluations[:3], train_line("b", "--seed 2", 5), *evaluations[3:]]
    results = tmp_path / "sweep.jsonl"
    results.write_text("".join(json.dumps(line) + "\n" for line in lines))
    summarize_sweep.main([str(results), "--targets", "sst=0.48,para=0.84,sts=0.87", "--precision", "bf16",
                          "--out", str(tmp_path / "sweep.json")])
    table = capsys.readouterr().out
    assert "--precision bf16" in table
    assert "| (documented command) | 2 | 2 |" in table  # two runs, both evaluated up to epoch 2
    report = json.loads((tmp_path / "sweep.json").read_text())
    assert report["precision"] == "bf16" and report["rows"]["(documented command)"]["targets met, epoch ends"] == 1


def test_runs_that_did_not_finish_say_how_they_ended():
    """seed_sweep.sh's exit line: 0 finished, 124 its time limit, anything else a failure."""
    exit_line = lambda run, flags, rc: {"run": run, "flags": flags, "event": "exit", "rc": rc,  # noqa: E731
                                        "log": f"runs/{run}.log"}
    records = (RUN_A + [exit_line("a", "--seed 1", 0)] + RUN_B[:1] + [exit_line("b", "--seed 2", 124)]
               + [exit_line("c", "--seed 1 --smart", 1)])
    rows, unfinished = summarize_sweep.summarize(records, {"sst": 0.48})
    assert unfinished == {"b": "stopped at the time limit after epoch 1",
                          "c": "failed (exit code 1) before its first evaluation: see runs/c.log"}
    assert rows["(documented command)"]["runs"] == 2 and rows["(documented command)"]["epochs"] == "1-2"
    assert rows["--smart"] == {"runs": 0}  # a row still: the group was run, and the list above says why it is empty
