"""minbert/recipes/slurm.sbatch, without a cluster: run as sbatch would run it on a job of two machines of one "GPU" each,
with stand-ins for srun (which runs the job's tasks at once, one a machine, each with its SLURM_NODEID, and ends
them all when one fails, as --kill-on-bad-exit=1 asks) and scontrol. The real torchrun runs twice, and the two
"machines" meet at a real rendezvous on 127.0.0.1 and train the recipe on gloo; a requeued job continues its own
folder by itself."""
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import write_course_files

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "minbert" / "recipes" / "slurm.sbatch"
JOB = {"SLURM_JOB_ID": "4242", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "gpu-[07-08]",
       "SLURM_GPUS_PER_NODE": "1", "SLURM_CPUS_PER_TASK": "1"}
HOSTS = ["127.0.0.1", "gpu-08"]  # what scontrol expands the node list to: the first machine is this one

SRUN = """#!{python}
# srun inside a job: its options (recorded), then the command, run at once on each of the job's machines.
import json, os, subprocess, sys, time
args = sys.argv[1:]
options = []
while args[0].startswith("-"):
    options.append(args.pop(0))
with open(os.path.join(os.environ["RECORD"], "srun.json"), "w") as record:
    json.dump(options, record)
tasks = [subprocess.Popen(args, env={{**os.environ, "SLURM_NODEID": str(node), "SLURM_PROCID": str(node)}})
         for node in range(int(os.environ["SLURM_NNODES"]))]
while all(task.poll() is None for task in tasks):
    time.sleep(0.2)
failed = [task.returncode for task in tasks if task.returncode]
if failed and "--kill-on-bad-exit=1" in options:
    for task in tasks:
        if task.poll() is None:
            task.kill()
sys.exit(failed[0] if failed else max(task.wait() for task in tasks))
"""
SCONTROL = f"""#!/bin/bash
[ "$1 $2 $3" = "show hostnames {JOB['SLURM_JOB_NODELIST']}" ] || {{ echo "unexpected: scontrol $*" >&2; exit 1; }}
printf '%s\\n' {' '.join(HOSTS)}
"""


def test_bash_accepts_it():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0


def test_it_asks_for_one_task_a_machine():
    directives = dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)", SCRIPT.read_text(), re.MULTILINE))
    assert directives["ntasks-per-node"] == "1"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A submission folder (the repository's files, linked; its own runs/), the stand-ins, and sbatch(*args,
    **env): the script run there as a job's batch step, with the result and what srun was asked."""
    folder = tmp_path_factory.mktemp("slurm")
    repo, stand_ins, record = folder / "repo", folder / "bin", folder / "record"
    repo.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in ("runs", "predictions", ".git"):
            (repo / entry.name).symlink_to(entry)
    for path, text in ((stand_ins / "srun", SRUN.format(python=sys.executable)), (stand_ins / "scontrol", SCONTROL)):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        path.chmod(0o755)
    record.mkdir()

    def sbatch(*args, **env):
        env = {**os.environ, "OMP_NUM_THREADS": "1", **JOB, **env, "RECORD": str(record),
               "PATH": f"{stand_ins}{os.pathsep}{os.environ['PATH']}"}
        (record / "srun.json").unlink(missing_ok=True)
        result = subprocess.run(["bash", str(SCRIPT), *args], cwd=repo, env=env, capture_output=True, text=True,
                                timeout=900)
        srun = record / "srun.json"
        return result, json.loads(srun.read_text()) if srun.exists() else None

    return repo, sbatch


@pytest.fixture(scope="module")
def trained(cluster, tiny_model, tmp_path_factory):
    """The recipe run by the job of two machines, on tiny data and a tiny model (flags given to sbatch win)."""
    repo, sbatch = cluster
    data = write_course_files(tmp_path_factory.mktemp("data"), random.Random(0), train_rows=64)
    args = ["--model", str(tiny_model), "--data-dir", str(data), "--device", "cpu", "--epochs", "1",
            "--max-eval-examples", "8", "--dist-timeout", "300"]
    result, srun = sbatch(*args)
    assert result.returncode == 0, result.stderr[-3000:]
    return repo / "runs" / f"slurm-{JOB['SLURM_JOB_ID']}", args, result, srun


def test_two_machines_meet_and_train_the_recipe_with_its_global_batch(trained):
    run, _, _, srun = trained
    assert "--kill-on-bad-exit=1" in srun and "--cpus-per-task=1" in srun  # one core a task, as SLURM gave
    config = json.loads((run / "run_config.json").read_text())
    # The recipe (mtdnn-minilm) on 2 machines x 1 GPU: 32 / 2 examples a process.
    assert (config["schedule"], config["batch_size"]) == ("mtdnn", 16)
    assert config["provenance"]["torchrun_job"]  # torchrun started it
    assert (run / "last" / "training_state.pt").exists() and config.get("finished")
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    # 64 rows a task in batches of 32 = 2 processes x 16: 2 steps a task, one task a step (mtdnn).
    assert [r["step"] for r in records if r["event"] == "eval"] == [6]
    # Its leaderboard files in its own folder: the repository's predictions/ is any other run's (the next job's).
    assert Path(config["predictions_dir"]).resolve() == (run / "predictions").resolve()  # recorded absolute
    assert (run / "predictions" / "sst-test-output.csv").is_file()


def test_a_requeued_job_continues_its_own_folder_by_itself(cluster, trained):
    """SLURM requeues a job with its id (SLURM_RESTART_COUNT 1): the script resumes runs/slurm-JOBID from last/."""
    repo, sbatch = cluster
    run, args, _, _ = trained
    config_file = run / "run_config.json"
    # As a job killed after its last checkpoint leaves it: the command did not end, so there is a run to resume.
    config = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({k: v for k, v in config.items() if k != "finished"}))
    result, _ = sbatch(*args, SLURM_RESTART_COUNT="1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resuming at step 6" in result.stderr + result.stdout
    assert json.loads(config_file.read_text()).get("finished")


def test_a_batch_that_does_not_split_over_the_gpus_is_refused_in_one_line(cluster):
    _, sbatch = cluster
    result, srun = sbatch("--epochs", "1", SLURM_GPUS_PER_NODE="3")
    assert result.returncode == 2 and srun is None
    assert result.stderr == "error: the recipe's batch of 32 does not split over 6 GPUs; give --batch-size\n"


# srun that waits for its job's end, as a long training does; what signal it got, it records, and ends as killed by it.
WAITING_SRUN = """#!{python}
import os, signal, sys, time
def end(number, frame):
    open(os.path.join(os.environ["RECORD"], "signal"), "w").write(signal.Signals(number).name)
    sys.exit(128 + number)
for number in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
    signal.signal(number, end)
open(os.path.join(os.environ["RECORD"], "started"), "w").close()
time.sleep(300)
"""


def test_the_time_limits_signal_reaches_the_training_as_sigterm(tmp_path):
    """--signal=B:USR1@300: SLURM signals the batch script, which passes SIGTERM to srun (then torchrun, then the
    training, which saves last/: tests/test_timed_save.py); the job ends with srun's exit code."""
    directives = dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)", SCRIPT.read_text(), re.MULTILINE))
    assert directives["signal"] == "B:USR1@300"
    stand_ins, record = tmp_path / "bin", tmp_path / "record"
    stand_ins.mkdir(), record.mkdir()
    for path, text in ((stand_ins / "srun", WAITING_SRUN.format(python=sys.executable)),
                       (stand_ins / "scontrol", SCONTROL)):
        path.write_text(text)
        path.chmod(0o755)
    env = {**os.environ, **JOB, "RECORD": str(record), "PATH": f"{stand_ins}{os.pathsep}{os.environ['PATH']}"}
    job = subprocess.Popen(["bash", str(SCRIPT)], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    for _ in range(600):  # srun started (a step of a test, not a timing)
        if (record / "started").exists() or job.poll() is not None:
            break
        time.sleep(0.1)
    job.send_signal(signal.SIGUSR1)
    assert job.wait(timeout=60) == 128 + signal.SIGTERM, job.stderr.read()
    assert (record / "signal").read_text() == "SIGTERM"
