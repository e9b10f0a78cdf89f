"""recipes/slurm.sbatch, without a cluster: bash accepts it, and run as sbatch would run it on a job of two machines,
with stand-ins for srun (which runs a task as SLURM does: once per task, each with its SLURM_NODEID), scontrol and
torchrun (which records how it was started), it starts one torchrun a machine, whose flags, read by torchrun's own
parser, make the job's first host the master, number the machines by SLURM_NODEID and run the project's command."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed.run

from common import cli
from training.multitask_config import MultitaskConfig

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "recipes" / "slurm.sbatch"
JOB = {"SLURM_JOB_ID": "4242", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "gpu-[07-08]"}
HOSTS = ["gpu-07", "gpu-08"]  # what scontrol expands gpu-[07-08] to

SRUN = """#!{python}
# srun inside a job: its options, then the command, run once per task of each of the job's machines.
import json, os, subprocess, sys
args = sys.argv[1:]
options = []
while args[0].startswith("-"):
    options.append(args.pop(0))
with open(os.path.join(os.environ["RECORD"], "srun.json"), "w") as record:
    json.dump(options, record)
per_node = int(next((o.split("=")[1] for o in options if o.startswith("--ntasks-per-node=")), "1"))
for node in range(int(os.environ["SLURM_NNODES"])):
    for task in range(per_node):
        env = {{**os.environ, "SLURM_NODEID": str(node), "SLURM_PROCID": str(node * per_node + task)}}
        subprocess.run(args, env=env, check=True)
"""
SCONTROL = f"""#!/bin/bash
[ "$1 $2 $3" = "show hostnames {JOB['SLURM_JOB_NODELIST']}" ] || {{ echo "unexpected: scontrol $*" >&2; exit 1; }}
printf '%s\\n' {' '.join(HOSTS)}
"""
TORCHRUN = """#!{python}
import json, os, sys
with open(os.path.join(os.environ["RECORD"], f"torchrun-{{os.environ['SLURM_PROCID']}}.json"), "w") as record:
    json.dump({{"argv": sys.argv[1:], "node": os.environ["SLURM_NODEID"]}}, record)
"""


def test_bash_accepts_it():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0


def test_it_asks_for_one_task_a_machine():
    directives = dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)", SCRIPT.read_text(), re.MULTILINE))
    assert directives["ntasks-per-node"] == "1"


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> tuple[list, list[dict]]:
    """The script run as on a job of two machines, with --epochs 5 given to sbatch: srun's options, and how each
    torchrun was started."""
    folder = tmp_path_factory.mktemp("slurm")
    stand_ins, repo, record = folder / "bin", folder / "repo", folder / "record"
    for path, text in ((stand_ins / "srun", SRUN), (stand_ins / "scontrol", SCONTROL),
                       (repo / ".venv" / "bin" / "torchrun", TORCHRUN)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.format(python=sys.executable) if path.name != "scontrol" else text)
        path.chmod(0o755)
    record.mkdir()
    env = {**os.environ, **JOB, "RECORD": str(record), "PATH": f"{stand_ins}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(["bash", str(SCRIPT), "--epochs", "5"], cwd=repo, env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    runs = [json.loads(path.read_text()) for path in sorted(record.glob("torchrun-*.json"))]
    return json.loads((record / "srun.json").read_text()), runs


def test_one_torchrun_a_machine_numbered_by_slurm_meets_at_the_first_host(launched):
    srun_options, runs = launched
    assert "--kill-on-bad-exit=1" in srun_options
    assert [run["node"] for run in runs] == ["0", "1"]  # one task a machine
    for run in runs:
        args = torch.distributed.run.get_args_parser().parse_args(run["argv"])
        assert (args.nnodes, args.node_rank, args.nproc_per_node) == ("2", int(run["node"]), "gpu")
        assert (args.rdzv_backend, args.standalone) == ("static", False)  # rank 0 on --node-rank 0's machine
        assert args.master_addr == HOSTS[0]
        assert args.master_port == 20000 + int(JOB["SLURM_JOB_ID"]) % 10000
        assert args.training_script == "multitask_classifier.py"


def test_it_runs_the_recipe_with_sbatchs_arguments(launched, monkeypatch):
    _, runs = launched
    args = torch.distributed.run.get_args_parser().parse_args(runs[0]["argv"])
    monkeypatch.chdir(ROOT)  # where the recipe's --config file is
    config = cli.parse_config(MultitaskConfig, "", args.training_script_args)
    assert (config.schedule, config.epochs, config.output_dir) == ("mtdnn", 5, f"runs/slurm-{JOB['SLURM_JOB_ID']}")
