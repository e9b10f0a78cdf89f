"""--patience under torchrun: rank 0 alone evaluates and judges, and every process stops at the same step; the job
ends with exit code 0 and the run is recorded as stopped early."""
import json
import os
import random
import subprocess
import sys
from pathlib import Path

from minbert.common.files import read_json
from tests.conftest import multitask_argv, write_course_files

ROOT = Path(__file__).resolve().parents[1]

# Rank 0's dev scores, in turn; each process writes the step its loop ended at.
SCRIPTED = """
import os, sys
sys.path.insert(0, {root!r})
from minbert.common import cli
from minbert.training import multitask
import multitask_classifier
scores = iter([0.5, 0.4, 0.9, 0.95])
evaluate = multitask.MultitaskRun.evaluate
def scripted(self):
    evaluate(self)  # the real dev pass: its soft outputs go into best/, from which the run's leaderboard files come
    return {{"sst": next(scores)}}
multitask.MultitaskRun.evaluate = scripted
finish = multitask.MultitaskRun.finish
def ended(self):
    with open(os.path.join({out!r}, "ended-" + os.environ["RANK"]), "w") as file:
        file.write(str(self.engine.state.step))
    return finish(self)
multitask.MultitaskRun.finish = ended
cli.run(lambda: multitask_classifier.main(sys.argv[1:]))
"""


def test_patience_under_torchrun_stops_every_process_at_the_same_step_and_exits_0(tiny_model, tmp_path):
    """48 SST rows, batches of 8 a process on 2 processes: 3 steps, each evaluated. Scores 0.5, then 0.4: with
    --patience 1 the run stops after step 2 (step 3's 0.9 would have been better), on both processes."""
    (tmp_path / "data").mkdir()
    data = write_course_files(tmp_path / "data", random.Random(0), train_rows=48)
    script = tmp_path / "scripted.py"
    script.write_text(SCRIPTED.format(root=str(ROOT), out=str(tmp_path)))
    args = multitask_argv(tiny_model, data, tmp_path, "--tasks", "sst", "--metric-for-best", "sst", "--epochs", "1",
                          "--eval-every", "1", "--patience", "1", "--dist-timeout", "60")
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                             str(script), *args], cwd=ROOT, capture_output=True, text=True, timeout=600,
                            env={"OMP_NUM_THREADS": "1", **os.environ})
    assert result.returncode == 0, result.stderr[-3000:]
    assert [(tmp_path / f"ended-{rank}").read_text() for rank in ("0", "1")] == ["2", "2"]
    assert read_json(tmp_path / "run/run_config.json")["finished"] == {"step": 2, "stopped_early": True}
    lines = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert [(line["event"], line["step"]) for line in lines if line["event"] != "train"] == [
        ("eval", 1), ("eval", 2), ("finish", 2)]
    assert "early stop at step 2" in result.stderr
