"""Progress off a terminal is a log line at least every INTERVAL seconds (and no more often), from every long part
of a run: training (after a start line that says what will run), evaluation and prediction, and from a timer, so
that a step slower than INTERVAL still shows life; on a terminal, log lines are printed above the bars instead of
into them."""
import importlib.util
import io
import logging
import re
import socket
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest
from tqdm import tqdm

import multitask_classifier
from minbert.analysis import layers
from minbert.common import progress
from minbert.engine import engine
from minbert.models import sentence_embedding
from tests.conftest import multitask_argv

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("one_thread")


class Clock:
    """time.monotonic's stand-in, and progress.start_timer's: a timer fires when advance() reaches its due time."""

    def __init__(self):
        self.now = 1000.0
        self.timers = []  # [due, tick, stop]

    def __call__(self):
        return self.now

    def start_timer(self, tick, stop):
        self.timers.append([progress._last_line[0] + progress.INTERVAL, tick, stop])

    def advance(self, seconds):
        """`seconds` pass (a step that takes them): each timer fires at its due times, as its thread would."""
        end = self.now + seconds
        while due := [timer for timer in self.timers if timer[0] <= end and not timer[2].is_set() and timer[1]()]:
            timer = min(due, key=lambda timer: timer[0])
            self.now = timer[0]
            timer[0] = self.now + timer[1]()()
        self.now = end


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    monkeypatch.setattr(progress, "start_timer", clock.start_timer, raising=False)
    monkeypatch.setattr(progress, "_last_line", [clock.now])
    monkeypatch.setattr(progress, "_open", [])
    return clock


def test_with_an_effort_the_time_left_follows_the_effort_done_not_the_units(clock, caplog):
    """Batches longest first: the first 100 examples hold 600 of 1,000 tokens; 30 s for them leaves the 400 tokens
    of the other 300 examples, 20 s at that rate, where counting examples would say 90 s."""
    caplog.set_level(logging.INFO)
    items = [(100, 600), (100, 200), (100, 100), (100, 100)]  # (examples, tokens)
    batches = progress.progress(items, "predicting sst", total=400, unit="example", weight=lambda item: item[0],
                                effort=lambda item: item[1])
    next(batches)
    clock.now += 30
    next(batches)  # the first batch is counted as the second is asked for
    assert caplog.messages == ["predicting sst: 100/400 examples (25%), 30 s, about 20 s left"]


def test_off_a_terminal_a_line_once_the_interval_has_passed_and_not_before(clock, caplog):
    caplog.set_level(logging.INFO)
    bar = progress.Progress(400, "predicting para", unit="example")
    lines = []
    for seconds in (10, 10, 9):  # 29 s: nothing yet
        clock.now += seconds
        bar.update(40)
    assert caplog.messages == []
    clock.now += 1  # 30 s since the last line (here: since the start)
    bar.update(40)
    assert caplog.messages == ["predicting para: 160/400 examples (40%), 30 s, about 45 s left"]
    clock.now += 29
    bar.update(40)
    lines.append(len(caplog.messages))
    clock.now += 91  # a slow batch: the line comes with it; 150 s for 240 examples, so 100 s for the 160 left
    bar.update(40)
    assert lines == [1] and caplog.messages[-1] == "predicting para: 240/400 examples (60%), 2.5 min, about 1.7 min left"
    # The clock is the process's: a new bar does not start a new 30 s of silence.
    clock.now += 30
    progress.Progress(10, "predicting sts", unit="example").update(2)
    assert caplog.messages[-1].startswith("predicting sts: 2/10 examples (20%)")


def test_a_step_slower_than_the_interval_still_shows_life(clock, caplog):
    caplog.set_level(logging.INFO)
    bar = progress.Progress(3, "multitask", unit="step")
    clock.advance(95)  # the first step takes 95 s: a line at 30, 60 and 90 s, while it runs
    assert caplog.messages == ["multitask: 0/3 steps (0%), 30 s", "multitask: 0/3 steps (0%), 60 s",
                               "multitask: 0/3 steps (0%), 1.5 min"]
    bar.update()  # 5 s after the last line: none
    clock.advance(30)  # the next comes from the timer, 25 s into the second step (120 s for 1 step: 240 s left)
    assert caplog.messages[3:] == ["multitask: 1/3 steps (33%), 2.0 min, about 4.0 min left"]
    bar.update()
    clock.advance(25)  # at 150 s, 2 steps done: 75 s for the one left
    assert caplog.messages[4:] == ["multitask: 2/3 steps (67%), 2.5 min, about 75 s left"]
    bar.close()
    clock.advance(300)  # closed: silent
    assert len(caplog.messages) == 5


def test_the_timer_speaks_for_the_work_under_way(clock, caplog):
    caplog.set_level(logging.INFO)
    training = progress.Progress(3, "multitask", unit="step")
    clock.advance(10)
    evaluation = progress.Progress(100, "predicting sst", unit="example")  # the dev set, within training
    clock.advance(25)  # a line at 30 s, of the evaluation's (0 done: no time left yet)
    evaluation.update(50)
    clock.advance(30)
    evaluation.close()
    clock.advance(30)  # back to training
    assert caplog.messages == ["predicting sst: 0/100 examples (0%), 20 s",
                               "predicting sst: 50/100 examples (50%), 50 s, about 50 s left",
                               "multitask: 0/3 steps (0%), 1.5 min"]
    training.close()


def test_the_timer_is_a_thread_that_writes_lines_while_nothing_is_counted(caplog, monkeypatch):
    monkeypatch.setattr(progress, "INTERVAL", 0.01)  # the real clock and timer; a line every 10 ms
    caplog.set_level(logging.INFO)
    earlier = set(threading.enumerate())
    bar = progress.Progress(3, "multitask", unit="step")
    timer = [thread for thread in threading.enumerate() if thread.name == "progress lines" and thread not in earlier]
    deadline = time.monotonic() + 60  # generous on a loaded machine: what is tested is that lines come at all
    while len(caplog.messages) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    bar.close()
    assert len(caplog.messages) >= 2 and all(m.startswith("multitask: 0/3 steps (0%)") for m in caplog.messages)
    # Its thread ends at its next wake-up, 10 ms on (a loaded machine may take longer to run it).
    assert len(timer) == 1 and (timer[0].join(timeout=60) or not timer[0].is_alive())


def test_nothing_is_printed_where_info_lines_are_not(clock, caplog):
    caplog.set_level(logging.WARNING)  # --quiet, or a torchrun process other than rank 0
    bar = progress.Progress(10, "multitask", unit="step")
    clock.now += 60
    bar.update()
    assert caplog.messages == []


def test_a_log_line_is_printed_above_a_bar_not_glued_to_it():
    stream = io.StringIO()
    bar = tqdm(total=3, desc="multitask", file=stream)
    bar.update()
    handler = progress.LogHandler(stream)
    handler.setFormatter(logging.Formatter("INFO %(message)s"))
    handler.emit(logging.makeLogRecord({"msg": "step 1 dev: sst 0.4", "levelno": logging.INFO}))
    assert "INFO step 1 dev: sst 0.4" in re.split(r"[\r\n]", stream.getvalue())  # a line of its own
    bar.close()


def test_a_run_says_what_it_will_train_then_reports_training_evaluation_and_prediction(
        tiny_model, course_data, tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(progress, "INTERVAL", 0.0)  # a line at every update
    monkeypatch.setattr(progress, "start_timer", lambda tick, stop: None)  # and none between (tested above)
    caplog.set_level(logging.INFO)
    multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path, "--max-steps", "3",
                                             "--log-every", "0"))
    messages = caplog.messages
    start = next(m for m in messages if m.startswith("multitask: 3 steps"))
    assert re.fullmatch(r"multitask: 3 steps in 1 epoch\(s\) on cpu, fp32; training examples: sst \d+, para \d+, "
                        r"sts \d+; batches of \d+ examples", start), start
    assert messages.index(start) < messages.index(next(m for m in messages if m.startswith("multitask: 1/3 steps")))
    for task in ("sst", "para", "sts"):  # the dev evaluation and the test predictions, each with its own lines
        assert sum(m.startswith(f"predicting {task}: ") for m in messages) >= 2


class Lines(logging.Handler):
    """The progress lines, each with the fake clock's time when it was written."""

    def __init__(self, clock):
        super().__init__(logging.INFO)
        self.clock, self.lines = clock, []

    def emit(self, record):
        self.lines.append((self.clock.now, record.getMessage()))


@pytest.fixture
def lines(clock):
    handler = Lines(clock)
    progress.log.addHandler(handler)
    level = progress.log.level
    yield handler
    progress.log.removeHandler(handler)
    progress.log.setLevel(level)  # as log_to_stderr(progress_lines=True) left it


def assert_a_line_every_interval(lines: list[tuple[float, str]], started: float, ended: float) -> None:
    times = [started, *(time for time, _ in lines), ended]
    assert max(later - earlier for earlier, later in zip(times, times[1:])) <= progress.INTERVAL, lines


def each_call_takes(clock: Clock, function, seconds: float = 40):
    """`function`, each call of which takes `seconds` of the fake clock (a slow step)."""
    def slow(*args, **kwargs):
        clock.advance(seconds)
        return function(*args, **kwargs)
    return slow


def each_item_takes(clock: Clock, generator, seconds: float = 40):
    """`generator` (a function that yields), each item of which takes `seconds` of the fake clock (a slow batch)."""
    def slow(*args, **kwargs):
        for item in generator(*args, **kwargs):
            clock.advance(seconds)
            yield item
    return slow


def test_a_benchmark_off_a_terminal_writes_a_line_at_least_every_interval(clock, lines, tiny_model, monkeypatch):
    spec = importlib.util.spec_from_file_location("encoder_speed", ROOT / "benchmarks" / "encoder_speed.py")
    encoder_speed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(encoder_speed)

    def step_seconds(model, batch, train, bf16):  # a step of 40 s
        clock.advance(40)
        return 1.0

    monkeypatch.setattr(encoder_speed, "step_seconds", step_seconds)
    started = clock.now
    encoder_speed.main(["--model", str(tiny_model), "--device", "cpu", "--repeats", "2", "--tokens", "8"])
    # 2 sides x (a warm-up and 2 repeats) x training and inference: 12 steps of 40 s
    assert clock.now - started == 12 * 40
    assert_a_line_every_interval(lines.lines, started, clock.now)
    assert lines.lines[0][1] == "encoder_speed: 0/12 steps (0%), 30 s"


def test_analyze_layers_off_a_terminal_writes_a_line_at_least_every_interval(clock, lines, tiny_model,
                                                                             contrastive_data, monkeypatch, caplog):
    caplog.set_level(logging.INFO)
    monkeypatch.setattr(sentence_embedding, "_length_sorted_batches",  # a batch of 40 s
                        each_item_takes(clock, sentence_embedding._length_sorted_batches))
    started = clock.now
    layers.build(layers.LayersConfig(models=str(tiny_model), data_dir=str(contrastive_data), sets="sts12,sts-dev",
                                     batch_size=4))
    assert clock.now - started >= 4 * 40  # several batches
    assert_a_line_every_interval(lines.lines, started, clock.now)
    assert all(line.startswith(f"layers of {tiny_model.name}, ") for _, line in lines.lines)


# ---- the benchmarks that ran silent off a terminal: each with steps, batches or runs of 40 s ----

def test_optimizer_speed_off_a_terminal_writes_a_line_at_least_every_interval(clock, lines, monkeypatch):
    from benchmarks import optimizer_speed
    monkeypatch.setattr(optimizer_speed, "SHAPES", [(4, 3), (3,)])
    monkeypatch.setattr(optimizer_speed, "step_time", each_call_takes(clock, lambda optimizer, device: 1.0))
    started = clock.now
    optimizer_speed.main(["--device", "cpu", "--repeats", "2"])
    assert clock.now - started == 5 * 3 * 40  # ours, ours fused, torch's 3 x (a first step and 2 repeats)
    assert_a_line_every_interval(lines.lines, started, clock.now)
    assert lines.lines[0][1] == "optimizer_speed: 0/15 steps (0%), 30 s"


@pytest.fixture
def slow_steps(clock, monkeypatch):
    """Every training step of the trainers takes 40 s."""
    monkeypatch.setattr(engine.Engine, "_train_step", each_call_takes(clock, engine.Engine._train_step))


def test_compare_schedules_off_a_terminal_writes_a_line_at_least_every_interval(clock, lines, slow_steps, tiny_model,
                                                                                course_data, tmp_path):
    from benchmarks import compare_schedules
    started = clock.now
    compare_schedules.main(["--model", str(tiny_model), "--schedules", "avg,rr-batch", "--max-train-examples", "8",
                            "--epochs", "1", "--output-root", str(tmp_path), "--data-dir", str(course_data),
                            "--batch-size", "4", "--device", "cpu"])
    assert clock.now - started == (2 + 6) * 40  # avg: 2 steps of every task; rr-batch: 6 of one task
    assert_a_line_every_interval(lines.lines, started, clock.now)  # here the runs' own lines


def test_compare_contrastive_off_a_terminal_writes_a_line_at_least_every_interval(clock, lines, slow_steps,
                                                                                  tiny_model, contrastive_data,
                                                                                  tmp_path, monkeypatch):
    from benchmarks import compare_contrastive
    monkeypatch.setattr(sentence_embedding, "_length_sorted_batches",  # the STS benchmark's batches too
                        each_item_takes(clock, sentence_embedding._length_sorted_batches))
    started = clock.now
    compare_contrastive.main(["--model", str(tiny_model), "--runs", "simcse-unlabeled", "--max-steps", "2",
                              "--data-dir", str(contrastive_data), "--output-root", str(tmp_path),
                              "--batch-size", "4", "--device", "cpu"])
    assert clock.now - started > 2 * 40  # the zero-shot scoring, 2 steps, the trained encoder's scoring
    assert_a_line_every_interval(lines.lines, started, clock.now)
    assert any(line.startswith("STS benchmark, ") for _, line in lines.lines)


def test_same_runs_off_a_terminal_writes_a_line_at_least_every_interval(clock, lines, monkeypatch):
    from benchmarks import same_runs

    def run(argv, **kwargs):  # git archive and tar at once; each run of a revision 40 s
        if argv[0] == sys.executable:
            clock.advance(40)
        return subprocess.CompletedProcess(argv, 0, stdout=b"")

    monkeypatch.setattr(same_runs, "subprocess", types.SimpleNamespace(run=run))
    monkeypatch.setattr(same_runs, "run_hash", lambda folder: "0" * 64)
    started = clock.now
    assert same_runs.main(["HEAD~1", "HEAD", "--runs", "recipe,simcse"])
    assert clock.now - started == 2 * 2 * 40
    assert_a_line_every_interval(lines.lines, started, clock.now)
    assert lines.lines[0][1] == "same_runs, HEAD~1: 0/2 runs (0%), 30 s"


def test_memory_off_a_terminal_writes_a_line_at_least_every_interval(clock, lines, course_data, tmp_path,
                                                                     monkeypatch):
    from benchmarks import memory
    measured = {"peak_mb": 1.0, "wall_s": 1.0, "cpu_s": 1.0}
    monkeypatch.setattr(memory, "measured", each_call_takes(clock, lambda argv: measured, seconds=100))
    started = clock.now
    memory.main(["--out", str(tmp_path), "--data-dir", str(course_data), "--lines", "5"])
    assert clock.now - started == 200  # the quick start, then predict: 100 s each
    assert_a_line_every_interval(lines.lines, started, clock.now)
    assert lines.lines[0][1] == "memory: 0/2 commands (0%), 30 s"


def test_memory_refuses_to_skip_both_of_its_commands(tmp_path, capsys):
    from benchmarks import memory
    with pytest.raises(SystemExit) as stopped:
        memory.main(["--out", str(tmp_path), "--skip-train", "--skip-predict"])
    assert stopped.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_hf_single_task_baseline_off_a_terminal_writes_a_line_at_least_every_interval(clock, lines, tiny_model,
                                                                                      course_data, tmp_path,
                                                                                      monkeypatch):
    from benchmarks import hf_single_task_baseline
    monkeypatch.setattr(hf_single_task_baseline, "batches", each_item_takes(clock, hf_single_task_baseline.batches))
    started = clock.now
    hf_single_task_baseline.main(["--model", str(tiny_model), "--data", str(course_data), "--tasks", "sst",
                                  "--epochs", "sst=1", "--batch-size", "8", "--max-length", "32", "--device", "cpu",
                                  "--out", str(tmp_path / "baseline.json")])
    assert clock.now - started == (5 + 1) * 40  # 40 rows in 5 training batches, 12 dev rows in one
    assert_a_line_every_interval(lines.lines, started, clock.now)
    assert {line.split(":")[0] for _, line in lines.lines} == {"sst baseline", "sst dev"}


def test_distributed_step_off_a_terminal_writes_a_line_at_least_every_interval(clock, lines, monkeypatch):
    """Its rank 0, here a world of one process, in this one."""
    from benchmarks import distributed_step
    monkeypatch.setattr(distributed_step, "step", each_call_takes(clock, lambda models, inputs, way: 1.0))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = types.SimpleNamespace(processes=1, threads=1, layers=1, hidden=8, heads=2, intermediate=16, batch_size=2,
                                 tokens=4, bucket_mb=1, warmup=1, steps=2, repeats=2)
    started, results = clock.now, {}
    distributed_step.worker(0, args, port, results)
    assert clock.now - started == 2 * 3 * (1 + 2) * 40  # 2 repeats of 3 ways x 3 steps
    assert_a_line_every_interval(lines.lines, started, clock.now)
    assert lines.lines[0][1] == "distributed_step: 0/18 steps (0%), 30 s"


def test_gpu_throughput_off_a_terminal_writes_a_line_at_least_every_interval(clock, lines, monkeypatch):
    """A configuration of 100 s (a compilation, then its steps)."""
    from benchmarks import gpu_throughput
    result = {"seconds": 1.0, "tokens": 10, "flops": 1.0, "peak_memory_gib": None}
    monkeypatch.setattr(gpu_throughput, "measure", each_call_takes(clock, lambda *args: result, seconds=100))
    started = clock.now
    gpu_throughput.main(["--shape", "tiny", "--model", "none", "--device", "cpu", "--fixed", "2x8", "--real-batches",
                         "0", "--precisions", "fp32", "--compile", "eager", "--sides", "ours,transformers",
                         "--attention", "padded"])
    assert clock.now - started == 2 * 100  # ours and transformers
    assert_a_line_every_interval(lines.lines, started, clock.now)
    assert lines.lines[0][1] == "gpu_throughput: 0/2 configurations (0%), 30 s"


def test_named_work_says_whose_its_progress_is(monkeypatch, caplog):
    """A command that runs others (the search's trials, silver's teachers) names each: the lines of every Progress
    made inside, nested names outermost first; none after."""
    monkeypatch.setattr(progress, "INTERVAL", 0.0)  # a line at every update
    monkeypatch.setattr(progress, "start_timer", lambda tick, stop: None)  # and none between
    caplog.set_level(logging.INFO, logger=progress.log.name)
    with progress.named("trial 3"):
        progress.Progress(4, "multitask", unit="step").update(1)
        with progress.named("teacher runs/a"):
            progress.Progress(4, "predicting sst", unit="example").update(1)
    progress.Progress(4, "multitask", unit="step").update(1)
    assert [message.split(" (")[0] for message in caplog.messages] == [
        "trial 3: multitask: 1/4 steps", "trial 3: teacher runs/a: predicting sst: 1/4 examples", "multitask: 1/4 steps"]
