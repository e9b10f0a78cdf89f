"""search.py: its space files (each mistake one line naming file and line), two workers sharing one study, a bad
trial pruned before its end, a study resumed after its worker was killed, and the trials' --no-predict-test.
Trials are tiny: a random 2-layer BERT on tiny course files (MiniLM on a sample of the real data where a trial must
learn something)."""
import json
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import multitask_classifier  # noqa: E402
from minbert.commands import search  # noqa: E402
from minbert.tuning import confirm, report  # noqa: E402
from minbert.tuning.study import one_at_a_time  # noqa: E402
from minbert.common.files import make_folders, remove_empty  # noqa: E402
from minbert.common import cli, progress  # noqa: E402
from minbert.common.errors import Interrupted, UsageError  # noqa: E402
from tests.conftest import multitask_argv  # noqa: E402
from tests.test_timed_save import interpreter  # noqa: E402
from minbert.training.multitask_config import MultitaskConfig  # noqa: E402

# (what is wrong, the space file, the line search.py prints after "SPACE:")
SPACE_CASES = [
    ("a flag multitask_classifier.py does not have", "lr: 1.0e-3\nbogus: [1, 2]\n",
     "2: bogus: not a flag of multitask_classifier.py (see its --help)"),
    ("a flag search.py sets itself", "output-dir: runs/x\n",
     "1: output-dir: search.py sets it in every trial (each trial's folder is made by search.py)"),
    ("a range beyond what the flag takes", "lr: 1.0e-3\nwarmup: {low: 0.0, high: 1.5}\n",
     "2: warmup: --warmup must be >= 0 and <= 1, got 1.5"),
    ("a range whose low is not below its high", "lr: {low: 1.0e-3, high: 1.0e-4}\n",
     "1: lr: low 0.001 must be below high 0.0001"),
    ("a log range from 0", "head-dropout: {low: 0, high: 0.3, log: true}\n",
     "1: head-dropout: a log range must start above 0, got low 0.0"),
    ("a value the flag does not offer", "pooling: [mean, max]\n", "1: pooling: 'max' is not one of cls, mean, pooler"),
    ("an empty list", "pooling: []\n", "1: pooling: an empty list: give at least one value"),
    ("a range of a flag that is not a number", "pooling: {low: 1, high: 2}\n",
     "1: pooling: a range needs a numeric flag; give a list of values instead"),
    ("a fraction for an integer flag", "max-length: {low: 64.5, high: 128}\n",
     "1: max-length: value 64.5 is not an integer"),
    ("a flag given twice", "lr: 1.0e-3\nhead-lr: [1.0e-3]\nlr: 2.0e-3\n", "3: lr is given twice (first at line 1)"),
    ("not YAML", "lr: [1, 2\nwarmup: 0.1\n", "2: not YAML"),
    ("a list, not a mapping", "- lr\n- warmup\n", "1: a search space is a mapping of flag names to ranges"),
]


def space_table() -> str:
    lines = ["| what is wrong | space file | what you get (exit code 2) |", "|---|---|---|"]
    for what, text, line in SPACE_CASES:
        shown = text.strip().replace("\n", "<br>").replace("|", "\\|")
        lines.append(f"| {what} | `{shown}` | `SPACE:{line}` |")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def recipe(course_data, tiny_model, tmp_path_factory) -> Path:
    """A recipe of tiny runs: 2 epochs of 40 examples a task in batches of 8 (heads at 1e-3), in fp32 whatever the
    processor (--precision auto runs bf16 where it is native)."""
    path = tmp_path_factory.mktemp("recipe") / "tiny.yaml"
    path.write_text(f"model: {tiny_model}\ndata-dir: {course_data}\ndevice: cpu\nprecision: fp32\nbatch-size: 8\n"
                    f"epochs: 2\nlr: 1.0e-3\nlog-every: 1\n")
    return path


@pytest.mark.parametrize("what,text,line", SPACE_CASES, ids=[case[0] for case in SPACE_CASES])
def test_a_bad_space_file_is_one_line_naming_file_and_line(what, text, line, recipe, tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(text)
    config, _, base = search.parse_flags(["--config", str(recipe), "--space", str(space)])
    with pytest.raises(UsageError) as error:
        search.read_checked_space(config.space, base, config.objective)
    assert str(error.value).startswith(f"{space}:{line}")
    assert "\n" not in str(error.value)


def test_a_bad_space_file_stops_the_command_with_exit_code_2(recipe, tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text("warmup: {low: 0.0, high: 1.5}\n")
    done = subprocess.run([sys.executable, "search.py", "--config", str(recipe), "--space", str(space),
                           "--study-dir", str(tmp_path / "study"), "--trials", "1"],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"error: {space}:1: warmup: --warmup must be >= 0 and <= 1, got 1.5"]
    assert not (tmp_path / "study").exists()  # refused before any study was made


def test_docs_catalogue_the_space_file_mistakes():
    assert space_table() in (ROOT / "docs" / "bad-input.md").read_text(), \
        "docs/bad-input.md's table of space files differs: paste tests/test_search.py's space_table() into it"


def trials_of(folder: Path) -> list[optuna.trial.FrozenTrial]:
    """The trials of the study in folder, from its SQLite file or its journal (--storage journal)."""
    journal = folder / "study.journal"
    storage = (optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(journal)))
               if journal.exists() else f"sqlite:///{folder / 'study.db'}")
    return optuna.load_study(study_name=folder.name, storage=storage).trials


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_two_workers_share_one_study_each_on_one_thread(recipe, tmp_path):
    """Two processes on one study: 4 trials in all, each run once by one of them, on 1 thread though
    OMP_NUM_THREADS says 2."""
    space = tmp_path / "space.yaml"
    space.write_text("lr: {low: 1.0e-4, high: 1.0e-2, log: true}\nhead-dropout: {low: 0.0, high: 0.3}\n")
    study = tmp_path / "study"
    command = [sys.executable, "search.py", "--config", str(recipe), "--space", str(space), "--study-dir", str(study),
               "--trials", "4", "--pruner", "none", "--sampler", "random", "--join"]
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    workers = [subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for _ in range(2)]
    outputs = [worker.communicate(timeout=600) for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0], outputs
    trials = [trial for trial in trials_of(study) if not trial.user_attrs.get("not_run")]
    assert sorted(trial.state for trial in trials) == [TrialState.COMPLETE] * 4
    assert {trial.user_attrs["worker"].rpartition(":")[2] for trial in trials} <= {str(w.pid) for w in workers}
    assert {trial.user_attrs["threads"] for trial in trials} == {1}
    # Each trial reported once, by the worker that ran it, and run once in its own folder.
    reported = [line.split()[1] for out, _ in outputs for line in out.splitlines() if line.startswith("trial ")]
    assert sorted(reported) == sorted(str(trial.number) for trial in trials)
    for trial in trials:
        run = study / f"trial-{trial.number:04d}"
        assert [r["event"] for r in records(run)].count("finish") == 1
        assert sorted(p.name for p in (run / "predictions").iterdir()) == [
            "para-dev-output.csv", "sst-dev-output.csv", "sts-dev-output.csv", "written-by.json"]  # no test pass
    assert "best.yaml" in os.listdir(study) and "trials.md" in os.listdir(study)


def test_a_study_folder_removed_as_a_worker_opens_it_is_made_again(tmp_path, monkeypatch):
    """Two workers starting at one moment: the one that checks that the new study folder can be written takes back
    the folder it made, which the other has just made too; the other makes it again, and its lock file is inside."""
    folder, calls = tmp_path / "study", []

    def made_then_taken_back(path):
        made = make_folders(path)
        if not calls:
            path.rmdir()  # the other worker's write check removes the folder before the lock file is in it
        calls.append(path)
        return made

    monkeypatch.setattr("minbert.tuning.study.make_folders", made_then_taken_back)
    made = []
    with one_at_a_time(folder, made):
        assert (folder / ".opening.lock").is_file()
    assert len(calls) == 2 and made == [folder]
    remove_empty(made)  # refused: the folder this worker made goes again
    assert not folder.exists()


def test_a_clearly_bad_trial_is_pruned_before_its_end(minilm_dir, data_dir, tmp_path, capsys, one_thread):
    """MiniLM on a sample of the real data: the recipe's --lr 5e-5 first (the baseline trial), then --lr 1, which
    ruins the encoder at its first steps: the median pruner stops it at its first evaluation, as early stopping
    would, with its best/ and dev files written."""
    space = tmp_path / "space.yaml"
    space.write_text("lr: [5.0e-5, 1.0]\n")
    study = tmp_path / "study"
    flags = ["--space", str(space), "--study-dir", str(study), "--pruner", "median", "--prune-after", "1",
             "--model", str(minilm_dir), "--data-dir", str(data_dir), "--device", "cpu", "--precision", "fp32",
             "--max-train-examples", "16", "--max-eval-examples", "24", "--batch-size", "8", "--eval-every", "2",
             "--lr", "5e-5"]
    search.main([*flags, "--trials", "1"])
    assert [(t.params, t.state) for t in trials_of(study)] == [({"lr": 5e-5}, TrialState.COMPLETE)]
    optuna.load_study(study_name="study", storage=f"sqlite:///{study / 'study.db'}").enqueue_trial({"lr": 1.0})
    search.main([*flags, "--trials", "2", "--resume"])
    good, bad = trials_of(study)
    assert bad.params == {"lr": 1.0} and bad.state == TrialState.PRUNED
    steps = max(good.intermediate_values)
    assert bad.user_attrs["pruned_at"] == min(bad.intermediate_values) == 2 < steps
    assert bad.intermediate_values[2] < good.intermediate_values[2]
    run = records(study / "trial-0001")
    assert max(r["step"] for r in run if r["event"] == "eval") == 2 and run[-1]["event"] == "finish"
    assert (study / "trial-0001" / "best").is_dir()
    assert "trial 1 pruned at step 2" in capsys.readouterr().out


@pytest.mark.parametrize("kill", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT],
                         ids=["SIGKILL", "SIGTERM", "SIGINT"])
def test_a_study_resumed_after_its_worker_was_killed_loses_and_repeats_no_trial(kill, recipe, tmp_path, capsys,
                                                                                one_thread):
    """The worker killed during trial 1: --resume fails trial 1 (SIGTERM and Ctrl-C: the worker itself did), runs
    its configuration again as trial 2 and goes on to 3 finished trials; trial 0, finished before the kill, is not
    run again. Stopped by a signal, the worker says so and prints its own command that goes on, which is run as
    printed. The study in a journal file (the other tests' are in SQLite)."""
    space = tmp_path / "space.yaml"
    space.write_text("head-dropout: {low: 0.0, high: 0.3}\n")
    study = tmp_path / "study"
    flags = ["--config", str(recipe), "--space", str(space), "--study-dir", str(study), "--trials", "3",
             "--pruner", "none", "--sampler", "random", "--epochs", "12", "--storage", "journal"]
    with open(tmp_path / "worker.err", "w") as errors:
        worker = subprocess.Popen([sys.executable, "search.py", *flags], cwd=ROOT, stdout=subprocess.DEVNULL,
                                  stderr=errors, env={**os.environ, "OMP_NUM_THREADS": "1"})
        while not (study / "trial-0001" / "metrics.jsonl").exists():  # its first training step is logged
            assert worker.poll() is None, "the worker ended before its second trial started"
            time.sleep(0.02)
        worker.send_signal(kill)
        worker.wait()
    first = (study / "trial-0000" / "metrics.jsonl").read_bytes()
    killed = TrialState.RUNNING if kill == signal.SIGKILL else TrialState.FAIL
    assert [t.state for t in trials_of(study)][:2] == [TrialState.COMPLETE, killed]

    if kill == signal.SIGKILL:  # no word from the worker
        search.main([*flags, "--resume"])
        assert "trial(s) 1 of a worker that is gone: failed, and queued again" in capsys.readouterr().out
    else:
        last = (tmp_path / "worker.err").read_text().strip().splitlines()[-1]
        told = (f"{signal.Signals(kill).name}: trial 1 stopped, and is queued again: the study runs its "
                f"configuration first when it goes on; to go on: ")
        assert last.startswith(told), last
        again = last[len(told):]
        assert shlex.split(again) == ["OMP_NUM_THREADS=1", interpreter(), "search.py", *flags, "--resume"]
        resumed = subprocess.run(["bash", "-c", again], cwd=ROOT, capture_output=True, text=True)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert "of a worker that is gone" not in resumed.stdout
    trials = trials_of(study)
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.FAIL, TrialState.COMPLETE,
                                         TrialState.COMPLETE]
    assert trials[2].user_attrs["retry_of"] == 1 and trials[2].params == trials[1].params
    assert trials[3].params != trials[1].params
    assert (study / "trial-0000" / "metrics.jsonl").read_bytes() == first
    # trials.md: a trial a signal stopped is no failure of its configuration
    state = "failed" if kill == signal.SIGKILL else "interrupted, queued again"
    assert re.search(rf"^\| 1 \| - \| {state} \|", (study / "trials.md").read_text(), re.MULTILINE)


def test_an_interrupted_trial_is_listed_as_such_and_queued_again_even_when_it_was_a_retry():
    """A trial a signal stopped is no failure of its configuration: trials.md says "interrupted, queued again", and
    it runs again even where it was itself a retry (a configuration that killed its worker twice is not)."""
    from minbert.tuning.study import queue_again

    study = optuna.create_study(direction="maximize")
    for attrs in ({"retry_of": 7, "interrupted": True}, {"retry_of": 7}, {}):
        trial = study.ask({"lr": optuna.distributions.FloatDistribution(1e-5, 1e-3)})
        for name, value in attrs.items():
            trial.set_user_attr(name, value)
        study.tell(trial, state=TrialState.FAIL)
    interrupted, retried, failed = study.trials
    assert [report.trial_state(t) for t in study.trials] == ["interrupted, queued again", "failed", "failed"]
    for trial in (interrupted, retried):
        queue_again(study, trial)
    queued = study.get_trials(states=(TrialState.WAITING,))
    assert [(t.system_attrs["fixed_params"], t.user_attrs["retry_of"]) for t in queued] == [
        (interrupted.params, interrupted.number)]


def test_a_journal_study_resumed_without_storage_goes_on_in_its_journal(recipe, tmp_path, one_thread):
    """The storage a study was started in is recorded in its folder: --resume without --storage journal continues
    the journal (no second study begins in a study.db beside it), and trials.md counts the journal's trials."""
    space = tmp_path / "space.yaml"
    space.write_text("head-dropout: {low: 0.0, high: 0.3}\nepochs: 1\n")
    study = tmp_path / "study"
    flags = ["--config", str(recipe), "--space", str(space), "--study-dir", str(study), "--pruner", "none",
             "--sampler", "random"]
    search.main([*flags, "--trials", "1", "--storage", "journal"])
    search.main([*flags, "--trials", "2", "--resume"])
    assert not (study / "study.db").exists()
    assert [trial.state for trial in trials_of(study)] == [TrialState.COMPLETE] * 2
    assert (study / "trials.md").read_text().count("| complete |") == 2


def test_the_recorded_storage_is_the_studys_and_another_is_refused(tmp_path, monkeypatch):
    """What the record keeps: the folder's own files by their --storage name (a moved or cloned folder finds them),
    any other file by its absolute path, an RDB URL without its password; a command that leaves --storage out gets
    the study's, one that gives another is refused, and one that must give the password is told so."""
    from minbert.tuning.study import canonical_storage, record_storage, study_storage

    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "study"
    assert canonical_storage("", folder) == canonical_storage("sqlite:///study/study.db", folder) == "sqlite"
    assert canonical_storage("study/study.journal", folder) == "journal"
    assert canonical_storage("shared/s.journal", folder) == str(tmp_path / "shared" / "s.journal")
    assert canonical_storage("sqlite:///other.db", folder) == f"sqlite:///{tmp_path / 'other.db'}"
    assert canonical_storage("postgresql://me:secret@host/db", folder) == "postgresql://me:***@host/db"
    assert study_storage("journal", folder) == "journal"  # nothing recorded: --storage as given
    folder.mkdir()
    record_storage("shared/s.journal", folder)
    assert study_storage("", folder) == str(tmp_path / "shared" / "s.journal")
    assert study_storage(str(tmp_path / "shared" / "s.journal"), folder) == str(tmp_path / "shared" / "s.journal")
    with pytest.raises(UsageError, match=f"--storage journal: the study in {folder} is kept in "
                                         f"{tmp_path}/shared/s.journal; leave"):
        study_storage("journal", folder)
    (folder / "study-storage.json").unlink()
    record_storage("postgresql://me:secret@host/db", folder)
    assert "secret" not in (folder / "study-storage.json").read_text()
    assert study_storage("postgresql://me:secret@host/db", folder) == "postgresql://me:secret@host/db"
    with pytest.raises(UsageError, match=r"kept in postgresql://me:\*\*\*@host/db, whose password is not recorded"):
        study_storage("", folder)


def test_no_predict_test_writes_the_dev_files_only(tiny_model, course_data, tmp_path, one_thread):
    multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path, "--epochs", "1", "--no-predict-test"))
    assert sorted(p.name for p in (tmp_path / "predictions").iterdir()) == [
        "para-dev-output.csv", "sst-dev-output.csv", "sts-dev-output.csv", "written-by.json"]


def test_seeds_score_their_mean_and_best_yaml_is_a_recipe(recipe, tmp_path, one_thread):
    """--seeds 1,2: a trial's value is the mean of its two runs' best dev scores; best.yaml, given to
    multitask_classifier.py's --config as it is, gives the recipe's flags and the best trial's values."""
    space = tmp_path / "space.yaml"
    space.write_text("head-dropout: {low: 0.0, high: 0.3}\npooling: [mean, cls]\nepochs: 1\n")
    study = tmp_path / "study"
    search.main(["--config", str(recipe), "--space", str(space), "--study-dir", str(study), "--trials", "2",
                 "--seeds", "1,2", "--pruner", "none", "--sampler", "random", "--head-lr", "2e-3"])
    for trial in trials_of(study):
        runs = [study / f"trial-{trial.number:04d}" / f"seed-{seed}" for seed in (1, 2)]
        scores = [json.loads((run / "best" / "metrics.json").read_text())["dev"]["overall"] for run in runs]
        assert trial.value == pytest.approx(sum(scores) / 2, abs=1e-12)
        assert [json.loads((run / "run_config.json").read_text())["seed"] for run in runs] == [1, 2]
    best = max(trials_of(study), key=lambda trial: trial.value)
    config = cli.parse_config(MultitaskConfig, "", ["--config", str(study / "best.yaml")])
    assert (config.head_dropout, config.pooling) == (best.params["head_dropout"], best.params["pooling"])
    assert (config.epochs, config.head_lr, config.lr, config.batch_size) == (1, 2e-3, 1e-3, 8)



def scores(objective: list[float], **tasks: list[float]) -> confirm.Scores:
    return confirm.Scores(objective, tasks)


RECIPE_SCORES = scores([0.680, 0.690, 0.700], sst=[0.44, 0.45, 0.46], sts=[0.85, 0.85, 0.85])  # sd 0.01


@pytest.mark.parametrize("other,expected", [
    (scores([0.700, 0.710, 0.720], sst=[0.45, 0.46, 0.47], sts=[0.85, 0.85, 0.85]),
     (True, "+0.0200, beyond the seed spread 0.0100; no task below by more than 0.005")),
    (scores([0.690, 0.700, 0.710], sst=[0.45, 0.46, 0.47], sts=[0.85, 0.85, 0.85]),
     (False, "+0.0100, within the seed spread 0.0100")),  # equal to the spread is not beyond it
    (scores([0.680, 0.710, 0.740], sst=[0.45, 0.46, 0.47], sts=[0.85, 0.85, 0.85]),
     (False, "+0.0200, within the seed spread 0.0300")),  # the candidate's own spread counts too
    (scores([0.700, 0.710, 0.720], sst=[0.45, 0.46, 0.47], sts=[0.84, 0.84, 0.85]),
     (False, "+0.0200 (spread 0.0100), but sts -0.0067")),  # a task's mean 0.0067 below: more than 0.005
    (scores([0.660, 0.670, 0.680], sst=[0.45, 0.46, 0.47], sts=[0.85, 0.85, 0.85]),
     (False, "-0.0200, below the recipe by more than the seed spread 0.0100")),
], ids=["beats", "gain equal to the spread", "the candidate's spread", "a task loses more than 0.005", "below"])
def test_confirm_verdict_takes_the_seed_spread_and_each_task(other, expected):
    assert confirm.verdict(RECIPE_SCORES, other) == expected


def test_confirm_reruns_the_recipe_and_the_best_trials_over_seeds_and_continues_where_it_stopped(
        recipe, tmp_path, capsys, monkeypatch, one_thread):
    """--confirm 1 --seeds 1,2 after a 3-trial study: the recipe (trial 0's values) and the best other trial, each
    trained with seeds 1 and 2; every seed-S.json holds its run's best dev metrics; confirm.md's means are theirs.
    Stopped by Ctrl-C in a run, it prints its own command, not the run's; run again after one result was lost (its
    run stopped), it trains that run alone; a run another process holds is left to it."""
    space = tmp_path / "space.yaml"
    space.write_text("head-dropout: {low: 0.0, high: 0.3}\nepochs: 1\n")
    study = tmp_path / "study"
    flags = ["--config", str(recipe), "--space", str(space), "--study-dir", str(study), "--pruner", "none",
             "--sampler", "random"]
    search.main([*flags, "--trials", "3"])
    trials = trials_of(study)
    baseline = MultitaskConfig().head_dropout
    assert trials[0].params == {"head_dropout": baseline}
    best = max(trials[1:], key=lambda trial: trial.value)
    search.main([*flags, "--confirm", "1", "--seeds", "1,2"])
    folder = study / "confirm"
    chosen = f"trial-{best.number:04d}"
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == sorted(["recipe", chosen])
    for name, dropout in (("recipe", baseline), (chosen, best.params["head_dropout"])):
        for seed in (1, 2):
            run = folder / name / f"seed-{seed}"
            flags_used = json.loads((run / "run_config.json").read_text())
            assert (flags_used["seed"], flags_used["head_dropout"], flags_used["epochs"]) == (seed, dropout, 1)
            dev = json.loads((run / "best" / "metrics.json").read_text())["dev"]
            assert json.loads(run.with_name(run.name + ".json").read_text()) == dev
    overall = [json.loads((folder / chosen / f"seed-{s}.json").read_text())["overall"] for s in (1, 2)]
    table = (study / "confirm.md").read_text().splitlines()
    assert next(line for line in table if line.startswith("| recipe |")).startswith(f"| recipe | {trials[0].value:.4f} |")
    line = next(line for line in table if line.startswith(f"| {chosen}"))
    assert f"| {(overall[0] + overall[1]) / 2:.4f} ± {abs(overall[0] - overall[1]) / 2 ** 0.5:.4f} |" in line
    assert cli.parse_config(MultitaskConfig, "", ["--config", str(folder / f"{chosen}.yaml")]).head_dropout == \
        best.params["head_dropout"]

    (folder / chosen / "seed-2.json").unlink()  # as if its run was killed: its folder is there, its result not

    def stopped_by_ctrl_c(*args, **kwargs):  # as a run stops: its last/ saved, its own command named
        raise Interrupted("SIGINT: stopped after step 1 of 5, saved in its last/; to go on: multitask_classifier.py "
                          "--resume", signal.SIGINT)

    with monkeypatch.context() as patch:
        patch.setattr(search, "train", stopped_by_ctrl_c)
        with pytest.raises(Interrupted) as stopped:
            search.main([*flags, "--confirm", "1", "--seeds", "1,2"])
    assert str(stopped.value) == ("SIGINT: the confirming runs stopped (those that ended are kept); to go on: " +
                                  cli.printed_command([*cli.program("search.py", "search"), *flags, "--confirm", "1",
                                                       "--seeds", "1,2"]))
    kept = (folder / "recipe" / "seed-1" / "metrics.jsonl").read_bytes()
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'a+'); "
                               "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(600)",
                               str(folder / "recipe" / "seed-2.lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        (folder / "recipe" / "seed-2.json").unlink()
        capsys.readouterr()
        search.main([*flags, "--confirm", "1", "--seeds", "1,2"])
    finally:
        holder.kill()
        holder.wait()
    out = capsys.readouterr().out
    assert [line.split(":")[0] for line in out.splitlines() if " seed " in line and ":" in line
            and not line.startswith("|")] == [f"{chosen} seed 2"]
    assert (folder / chosen / "seed-2.json").exists() and not (folder / "recipe" / "seed-2.json").exists()
    assert (folder / "recipe" / "seed-1" / "metrics.jsonl").read_bytes() == kept
    assert "Runs without a result yet (under way in another process, or stopped): recipe/seed-2." in \
        (study / "confirm.md").read_text()


def test_confirm_waits_for_no_run_that_has_its_result(tmp_path):
    """The runs listed as pending are those without a result when the table is written: one that another process
    held when this one passed it, and finished since, is not."""
    configs = [confirm.Configuration("recipe", {}), confirm.Configuration("trial-0003", {"lr": 1e-4})]
    for name, seed in (("recipe", 1), ("recipe", 2), ("trial-0003", 2)):
        (tmp_path / name).mkdir(exist_ok=True)
        (tmp_path / name / f"seed-{seed}.json").write_text("{}")
    assert confirm.pending(tmp_path, configs, [1, 2]) == ["trial-0003/seed-1"]


def test_confirm_needs_two_seeds(recipe, tmp_path):
    with pytest.raises(SystemExit):
        search.parse_flags(["--config", str(recipe), "--space", "x.yaml", "--confirm", "2", "--seeds", "1"])


def a_study(trials: int) -> optuna.Study:
    """An in-memory study of `trials` complete trials over two flags."""
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(trials):
        trial = study.ask()
        lr, warmup = trial.suggest_float("lr", 1e-5, 1e-3, log=True), trial.suggest_float("warmup", 0.0, 0.2)
        study.tell(trial, 0.6 + lr * 100 - warmup / 10)
    return study


def contrast(first, second) -> float:
    """WCAG's contrast ratio of two RGB(A) colours (1 to 21; 4.5 is its minimum for text)."""
    def luminance(colour):
        linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in colour[:3]]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    light, dark = sorted((luminance(first), luminance(second)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_importances_wait_for_enough_complete_trials_and_say_so(tmp_path, caplog):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    few = report.IMPORTANCE_TRIALS - 1
    report.write_pictures(a_study(few), tmp_path, "overall")
    assert not (tmp_path / "importance.png").exists() and (tmp_path / "history.png").exists()
    assert f"no importance.png: importances need {report.IMPORTANCE_TRIALS} complete trials, and {few} are" in \
        caplog.text
    report.write_pictures(a_study(report.IMPORTANCE_TRIALS), tmp_path, "overall")
    assert (tmp_path / "importance.png").exists()


def test_every_marker_of_the_pictures_stands_out_from_the_background(tmp_path, monkeypatch):
    import matplotlib.figure
    from matplotlib.collections import PathCollection
    saved, savefig = [], matplotlib.figure.Figure.savefig
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda self, *a, **k: (saved.append(self),
                                                                                   savefig(self, *a, **k)))
    report.write_pictures(a_study(4), tmp_path, "overall")
    markers = [(ax, collection) for figure in saved for ax in figure.axes for collection in ax.collections
               if isinstance(collection, PathCollection) and len(collection.get_offsets())]
    assert len(markers) >= 3  # history, and a slice a flag
    for ax, collection in markers:
        background = ax.get_facecolor()
        for face, edge in zip(collection.get_facecolors(), collection.get_edgecolors()):
            assert max(contrast(face, background), contrast(edge, background)) >= 4.5, (face, edge, background)


def test_the_best_command_trains_into_a_folder_beside_the_study(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the study's threads: its trials' times are theirs
    study, folder = a_study(2), tmp_path / "quick-start"
    folder.mkdir()
    command = report.write_best(folder, study, {"config": "quick-start"}, {}, "overall")
    words = shlex.split(command)
    run = tmp_path / "quick-start-best"
    assert words[0] == "OMP_NUM_THREADS=2"
    assert words[-4:] == ["--output-dir", str(run), "--predictions-dir", str(run / "predictions")]
    config = cli.parse_config(MultitaskConfig, "", words[3:])  # what the command runs: after the program's words
    assert (config.output_dir, config.predictions_dir) == (str(run), str(run / "predictions"))
    train_it = (folder / "best.yaml").read_text().splitlines()[1].removeprefix("# Train it: ")
    assert shlex.split(train_it)[-6:] == ["--config", str(folder / "best.yaml"), "--output-dir", str(run),
                                          "--predictions-dir", str(run / "predictions")]


@pytest.mark.parametrize("study_dir,expected", [("runs/search/quick-start", "runs/search/quick-start-best"),
                                                ("runs/search/quick-start/", "runs/search/quick-start-best"),
                                                ("study", "study-best")])
def test_a_study_recipes_run_folder_lies_beside_the_study_folder(study_dir, expected):
    assert report.beside(Path(study_dir), "best") == Path(expected)


def test_a_study_in_the_current_folder_trains_its_best_beside_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert report.beside(Path("."), "best") == tmp_path.parent / f"{tmp_path.name}-best"


def printed_commands(output: str, study: Path) -> list[str]:
    """The commands a search printed at its end and in its recipe files (best.yaml's `# Train it:` line)."""
    lines = output.splitlines()
    closing = [lines[i + 1].strip() for i, line in enumerate(lines) if line.startswith("best recipe: ")]
    train_it = [line.removeprefix("# Train it: ") for line in (study / "best.yaml").read_text().splitlines()
                if line.startswith("# Train it: ")]
    return closing + train_it


def test_a_real_searchs_printed_commands_run_as_printed(recipe, tmp_path):
    """A tiny search run as a user runs it (python -m minbert search, in a folder of their own), then the command
    it prints at its end and best.yaml's `# Train it:` line, each run by the shell as printed: each trains (exit 0)
    into the folder beside the study."""
    space = tmp_path / "space.yaml"
    space.write_text("head-dropout: {low: 0.0, high: 0.3}\nepochs: 1\n")
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    searched = subprocess.run([sys.executable, "-m", "minbert", "search", "--config", str(recipe), "--space",
                               str(space), "--study-dir", "runs/search/tiny", "--trials", "1", "--pruner", "none",
                               "--max-steps", "2"], cwd=tmp_path, env=environment, capture_output=True, text=True,
                              timeout=600)
    assert searched.returncode == 0, searched.stderr
    commands = printed_commands(searched.stdout, tmp_path / "runs/search/tiny")
    assert len(commands) == 2, searched.stdout
    run = tmp_path / "runs/search/tiny-best"
    for command in commands:
        shutil.rmtree(run, ignore_errors=True)  # both train into the same folder: each as on its own
        ran = subprocess.run(command, shell=True, cwd=tmp_path, env=environment, capture_output=True, text=True,
                             timeout=600)
        assert ran.returncode == 0, (command, ran.stderr[-2000:])
        assert (run / "best").is_dir() and sorted(p.name for p in (run / "predictions").glob("*-dev-output.csv"))


def test_a_trials_progress_lines_reach_the_commands_output_too(tmp_path, caplog):
    """A trial's output goes to its log file, but its progress lines (a line every 30 s off a terminal: the
    trainers' timer, tests/test_progress.py) also to the search's own output, which otherwise says nothing for the
    minutes a trial trains."""
    caplog.set_level(logging.INFO)
    with search.output_to(tmp_path / "trial-0000.log"):
        logging.getLogger("minbert.engine.engine").info("step 40: saved last/")
        progress.log.info("multitask: 40/192 steps (21%), 30 s, about 1.9 min left")
    assert caplog.messages == ["multitask: 40/192 steps (21%), 30 s, about 1.9 min left"]
    logged = (tmp_path / "trial-0000.log").read_text().splitlines()  # in the command's format
    assert [line.endswith(end) for line, end in zip(logged, ("step 40: saved last/", "about 1.9 min left"))] == \
        [True, True] and len(logged) == 2
    progress.log.info("after the trial")  # the command's own output again, once
    assert caplog.messages[-1] == "after the trial" and len(caplog.records) == 2


def test_a_trials_progress_lines_name_the_trial(tiny_model, course_data, tmp_path, caplog, monkeypatch, one_thread):
    """Off a terminal the search's output has its trials' progress lines: each says which trial it is of."""
    monkeypatch.setattr(progress, "INTERVAL", 0.0)  # a line at every update
    monkeypatch.setattr(progress, "start_timer", lambda tick, stop: None)  # and none between
    caplog.set_level(logging.INFO)
    argv = multitask_argv(tiny_model, course_data, tmp_path, "--epochs", "1", "--max-steps", "2")
    search.train(argv, {}, tmp_path / "study" / "trial-0007", 1, "overall", "trial 7")
    assert caplog.messages and all(line.startswith("trial 7: ") for line in caplog.messages), caplog.messages
    assert any(line.startswith("trial 7: multitask: ") for line in caplog.messages)
