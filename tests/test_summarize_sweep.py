"""benchmarks/summarize_sweep.py: which evaluation each run keeps, and the spread over seeds."""
import importlib.util
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
    rows = summarize_sweep.summarize(RUN_A + RUN_B + RUN_C, {"sst": 0.48, "para": 0.84, "sts": 0.87})
    assert list(rows) == ["(documented command)", "--loss-weights sst=2"]
    documented = rows["(documented command)"]
    assert documented["runs"] == 2
    ssts = [0.47, 0.48]
    assert documented["sst"] == (f"{statistics.mean(ssts):.4f} ± {statistics.stdev(ssts):.4f} (0.470-0.480)")
    assert documented["targets met, epoch ends"] == 1  # b after epoch 1
    assert documented["targets met, every 379"] == 2  # and a mid-epoch
    assert rows["--loss-weights sst=2"]["targets met, epoch ends"] == 0
