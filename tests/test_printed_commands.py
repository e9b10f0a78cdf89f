"""Every command the toolkit prints for the user to run next runs as printed. Tiny runs are started as a user starts
them (`python -m minbert ...` in a folder of their own) and stopped as a user stops them (Ctrl-C, kill -9); every
command their output names ("to go on: ...", "start it again: ...", "fine-tune it: ...", the search's closing
"best recipe" command, a refusal's "see ... --help") is harvested, run by the shell as printed, and harvested in
turn. Each must exit 0. (best.yaml's "# Train it:" line: tests/test_search.py; the tutorial's commands and the
hints they print: tests/readme_commands.py.)"""
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# What a line says before a command to run, and the command: to the end of the line (or of "(see ... --help)").
PRINTED = re.compile(r"(?:to go on|start it again|fine-tune it[^:\n]*): (.+)$|^best recipe: .*\n  (.+)$"
                     r"|\(see (.+ --help)\)$", re.MULTILINE)


def harvested(output: str) -> list[str]:
    return [next(group for group in match if group) for match in PRINTED.findall(output)]


def test_the_harvest_finds_each_kind_of_printed_command():
    output = ("SIGINT: stopped after step 3 of 90, saved in run/last; to go on: python -m minbert train --resume\n"
              "error: --resume: the run in run stopped before it saved a checkpoint to resume from; start it again: "
              "python -m minbert train --overwrite\n"
              "fine-tune it (model1): python -m minbert train --config quick-start --init ct/model1\n"
              "best recipe: study/best.yaml\n  python -m minbert train --lr 0.001\n"
              "minbert train: error: unrecognized arguments: --epoch 1; did you mean --epochs? (see python -m minbert "
              "train --help)\n")
    assert harvested(output) == ["python -m minbert train --resume", "python -m minbert train --overwrite",
                                 "python -m minbert train --config quick-start --init ct/model1",
                                 "python -m minbert train --lr 0.001", "python -m minbert train --help"]


class World:
    """A user's folder (the current folder of every command) with a tiny recipe, tiny sentences, and the tiny course
    data as the default data folder (MINBERT_DATA_DIR: the printed commands name none, as the user's would not)."""

    def __init__(self, folder: Path, model: Path, data: Path):
        self.folder = folder
        self.environment = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
                            "MINBERT_DATA_DIR": str(data)}
        self.recipe = folder / "tiny.yaml"
        self.recipe.write_text(f"model: {model}\ndevice: cpu\nprecision: fp32\nbatch-size: 8\nlr: 1.0e-3\n"
                               f"max-length: 64\nlog-every: 1\npredictions-dir: predictions\n")  # in each run's folder
        (folder / "space.yaml").write_text("head-dropout: {low: 0.0, high: 0.3}\n")
        (folder / "sentences.txt").write_text("".join(f"sentence number {i} is here\n" for i in range(24)))

    def start(self, *words: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "minbert", *words], cwd=self.folder, env=self.environment,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def stopped(self, words: list[str], when: Path, how: signal.Signals) -> str:
        """The output of a command stopped by the signal `how` once the file `when` exists."""
        command = self.start(*words)
        while not when.exists():
            assert command.poll() is None, f"ended before {when} was written: {command.stdout.read()[-3000:]}"
            time.sleep(0.02)
        command.send_signal(how)
        output = command.communicate(timeout=600)[0]
        assert command.returncode != 0, output[-3000:]
        return output

    def ran(self, *words: str) -> str:
        """The output of a command run to its end, whatever its exit code (a refusal prints what to do)."""
        command = self.start(*words)
        return command.communicate(timeout=600)[0]

    def run_as_printed(self, command: str) -> str:
        ran = subprocess.run(["bash", "-c", command], cwd=self.folder, env=self.environment, capture_output=True,
                             text=True, timeout=600)
        assert ran.returncode == 0, (command, (ran.stdout + ran.stderr)[-3000:])
        return ran.stdout + ran.stderr


def test_every_printed_command_runs_as_printed(tiny_model, course_data, tmp_path):
    world = World(tmp_path, tiny_model, course_data)
    train = ["train", "--config", str(world.recipe)]
    outputs = {
        # Ctrl-C during training: it saves last/ and prints the command that goes on.
        "a run's Ctrl-C": world.stopped([*train, "--epochs", "12", "--output-dir", "runs/stopped"],
                                        tmp_path / "runs/stopped/metrics.jsonl", signal.SIGINT),
        # A search's Ctrl-C during its second trial: its own command that goes on, which ends with the best recipe's.
        "a search's Ctrl-C": world.stopped(
            ["search", "--config", str(world.recipe), "--space", "space.yaml", "--study-dir", "runs/search/tiny",
             "--trials", "2", "--pruner", "none", "--epochs", "12"],
            tmp_path / "runs/search/tiny/trial-0001/metrics.jsonl", signal.SIGINT),
        # A pretrained encoder's next step.
        "pretraining's end": world.ran("pretrain", "--model", str(tiny_model), "--method", "ct", "--data",
                                       "sentences.txt", "--output-dir", "runs/ct", "--max-steps", "2", "--batch-size",
                                       "8", "--device", "cpu"),
        # A refusal's pointer to --help.
        "a misspelled flag": world.ran(*train, "--epoch", "1"),
    }
    # kill -9 after its first step, before its first checkpoint (an epoch of 60 steps): the same command again is
    # refused, naming the command that starts over.
    killed = [*train, "--batch-size", "2", "--output-dir", "runs/killed"]
    world.stopped(killed, tmp_path / "runs/killed/metrics.jsonl", signal.SIGKILL)
    assert not (tmp_path / "runs/killed/last").exists(), "killed after its first save: make its first epoch longer"
    outputs["a run killed before its first save"] = world.ran(*killed)

    ran = []
    for what, output in outputs.items():
        queue = harvested(output)
        assert queue, f"{what}: no command printed: {output[-3000:]}"
        while queue:  # what a printed command prints in turn (the search's closing command) runs too
            command = queue.pop(0)
            output = world.run_as_printed(command)
            queue += [] if command.endswith("--help") else harvested(output)  # a --help names no next step
            ran.append((what, command))
    print(f"{len(ran)} printed commands ran as printed:\n" + "\n".join(f"  {what}: {command}" for what, command in ran))
    kinds = {what for what, _ in ran}
    # One a stop, and two more: the search's closing command, and Contrastive Tension's second encoder's next step.
    assert kinds == set(outputs) and len(ran) == len(outputs) + 2
    assert any(command.startswith("OMP_NUM_THREADS=1 ") and "--study-dir" not in command and "runs/search/tiny-best"
               in command for _, command in ran)
