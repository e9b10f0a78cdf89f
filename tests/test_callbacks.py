"""A user's callbacks (engine/callbacks.py): every event of the loop in order, and a run stopped through the
control object as --patience stops it."""
import json

import pytest

import multitask_classifier
from minbert.common.files import read_json
from tests.conftest import multitask_argv
from minbert.engine.callbacks import Callback, EngineState

pytestmark = pytest.mark.usefixtures("one_thread")


class Recorder(Callback):
    """Every event, with the step it came at; stops the run at its first evaluation."""

    def __init__(self):
        self.events = []

    def on_train_begin(self, state, control):
        self.events.append(("train_begin", state.step, state.total_steps))

    def on_step_end(self, state, control, losses):
        assert set(losses) == {"sst", "para", "sts"} or len(losses) == 1  # mtdnn: one task's batch a step
        assert all(isinstance(value, float) and value > 0 for value in losses.values())
        self.events.append(("step_end", state.step))

    def on_log(self, state, control, record):
        self.events.append(("log", record["event"], record["step"]))

    def on_evaluate(self, state, control, metrics, score):
        assert set(metrics) >= {"sst", "para", "sts"} and score == state.best
        self.events.append(("evaluate", state.step))
        control.should_stop = True

    def on_save(self, state, control, folder, best):
        self.events.append(("save", folder.name, best, state.step))

    def on_train_end(self, state, control):
        self.events.append(("train_end", state.step, state.stopped_early))


def test_a_user_callback_sees_every_event_in_order_and_stops_the_run_as_patience_would(tiny_model, course_data,
                                                                                      tmp_path):
    """3 epochs of 15 steps (3 tasks of 5 batches of 8, mtdnn), a train line every 5 steps: the callback stops the
    run at the first evaluation (the end of epoch 1). The run then ends as --patience ends it: best/ and the
    leaderboard files from it, the finish line, the run recorded as stopped early."""
    recorder = Recorder()
    multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path, "--epochs", "3", "--log-every", "5",
                                             "--task-weights", "para=1"),
                              callbacks=[recorder])
    expected = [("train_begin", 0, 45)]
    for step in range(1, 16):
        expected.append(("step_end", step))
        if step % 5 == 0:
            expected.append(("log", "train", step))
    expected += [("log", "eval", 15), ("save", "best", True, 15), ("evaluate", 15), ("save", "last", False, 15),
                 ("train_end", 15, True), ("log", "finish", 15)]
    assert recorder.events == expected
    run = tmp_path / "run"
    assert read_json(run / "run_config.json")["finished"] == {"step": 15, "stopped_early": True}
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(line["event"], line["step"]) for line in lines] == [event[1:] for event in expected if event[0] == "log"]
    assert read_json(run / "best/metrics.json")["step"] == 15
    for task in ("sst", "para", "sts"):
        for split in ("dev", "test"):
            assert (tmp_path / f"predictions/{task}-{split}-output.csv").is_file()


def test_the_engine_state_round_trips_and_a_state_saved_before_it_was_one_object_loads():
    state = EngineState(step=7, total_steps=20, epoch=2, stage="unsup", best=0.5, best_step=4, since_best=1,
                        stopped_early=False, last_record={"event": "eval", "step": 4})
    assert EngineState.from_dict(json.loads(json.dumps(state.to_dict()))) == state
    # The training state today's code saved before: the loop's fields at its top level, among the optimizer's.
    old = {"optimizer": {}, "step": 7, "best": 0.5, "last_record": {"step": 4}, "best_step": 4, "since_best": 1}
    assert EngineState.from_dict(old) == EngineState(step=7, best=0.5, best_step=4, since_best=1,
                                                     last_record={"step": 4})


def test_a_training_state_saved_before_the_loops_state_was_one_object_is_whole(tmp_path):
    """--resume of a run whose last/ the code before EngineState wrote: its loop fields at the top level."""
    import torch

    from minbert.common.run_folder import RunFolder
    from minbert.engine.resume import load_training_state

    folder = RunFolder(tmp_path / "run")
    folder.last.mkdir(parents=True)
    old = {"optimizer": {}, "scheduler": {}, "scaler": {}, "rng": [], "losses": {}, "run": {}, "step": 7, "best": 0.5,
           "last_record": {}, "best_step": 4, "since_best": 1}
    torch.save(old, folder.state_file)
    assert load_training_state(folder)["step"] == 7
    del old["step"]  # neither the engine's entry nor its fields: not a training state
    torch.save(old, folder.state_file)
    with pytest.raises(Exception, match="not a whole training state"):
        load_training_state(folder)


class StopAt(Callback):
    """Asks the run to stop at `step`, from on_step_end or from on_log (the train line of that step)."""

    def __init__(self, step: int, event: str):
        self.step, self.event, self.ends = step, event, []

    def on_step_end(self, state, control, losses):
        if self.event == "on_step_end" and state.step == self.step:
            control.should_stop = True

    def on_log(self, state, control, record):
        if self.event == "on_log" and record["event"] == "train" and record["step"] == self.step:
            control.should_stop = True

    def on_train_end(self, state, control):
        self.ends.append((state.step, state.stopped_early))


@pytest.mark.parametrize("event", ["on_step_end", "on_log"])
def test_a_stop_asked_between_evaluations_ends_the_run_at_that_step(tiny_model, course_data, tmp_path, event):
    """3 epochs of 15 steps, evaluations at 15, 30 and 45: a stop asked at step 20, between two, ends the run there
    (no step 21), kept best/ of step 15 for its test predictions, and is recorded as stopped early at step 20."""
    stop = StopAt(20, event)
    multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path, "--epochs", "3", "--log-every", "5",
                                             "--task-weights", "para=1"), callbacks=[stop])
    assert stop.ends == [(20, True)]
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert max(line["step"] for line in lines) == 20 and lines[-1]["event"] == "finish"
    assert [line["step"] for line in lines if line["event"] == "eval"] == [15]
    assert read_json(tmp_path / "run" / "run_config.json")["finished"] == {"step": 20, "stopped_early": True}
    assert (tmp_path / "predictions" / "sst-test-output.csv").is_file()
