"""Progress a user sees wherever the output goes: a tqdm bar on a terminal; off one (a log file, a batch job),
where a bar would be one unreadable line of control characters, a log line at least every INTERVAL seconds while
work is under way, from a timer: a step slower than INTERVAL still shows life. Log lines are printed above the
bars (LogHandler), never glued into them.

    for rows in progress(batches, "predicting sst", unit="batch"): ...
    log_to_stderr(logging.WARNING, progress_lines=True)   # a script of its own: its log, and the lines
    with Progress(total=steps, desc="multitask", unit="step") as bar: ... bar.update()
    with named("trial 3"): ...                             # every Progress made in it: "trial 3: multitask: ..."
"""
import logging
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from tqdm import tqdm

INTERVAL = 30.0  # seconds: the longest silence off a terminal while a Progress counts

log = logging.getLogger(__name__)
# When this process last printed a progress line (off a terminal): one clock for every Progress, so that a
# task of many short parts (a dev set per task) still says something every INTERVAL seconds, and no more often.
_last_line = [time.monotonic()]
_lock = threading.Lock()  # the timers' threads and the counting thread share _last_line
# The Progress objects that write lines, oldest first: a timer speaks for the newest one still open (the dev
# evaluation within training), so that its lines say what is under way.
_open: list[weakref.ref] = []
# What the work under way is part of (named()), outermost first: a Progress made now says so before its own name.
_parts: list[str] = []


def on_terminal() -> bool:
    return sys.stderr.isatty()


def duration(seconds: float) -> str:
    """45 s, 3.2 min, 1.5 h."""
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min" if seconds < 5400 else \
        f"{seconds / 3600:.1f} h"


class Progress:
    """A count of done units out of `total`: a tqdm bar on a terminal; off one, a line "desc: 120/450 steps
    (27%), 2.1 min, about 5.8 min left" once INTERVAL seconds have passed since the last such line. Nothing at
    all where the logger would not print INFO lines (--quiet, a torchrun process other than rank 0), or with
    shown=False."""

    def __init__(self, total: int, desc: str, unit: str = "it", initial: int = 0, leave: bool = False,
                 shown: bool = True, logger: logging.Logger = log, effort: float = 0.0):
        """effort: what the whole work costs (e.g. its tokens), where units differ in cost, as batches longest first
        do: the time left is then estimated from the effort done (update's), not from the units."""
        desc = ": ".join([*_parts, desc])
        self.total, self.desc, self.unit, self.n, self.logger = total, desc, unit, initial, logger
        self.started, self.first = time.monotonic(), initial
        self.effort, self.effort_done = effort, 0.0
        shown = shown and logger.isEnabledFor(logging.INFO)
        self.bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, dynamic_ncols=True, leave=leave,
                        disable=not (shown and on_terminal()))
        self.lines = shown and not on_terminal()
        self.closed = threading.Event()
        if self.lines:  # the timer holds this Progress weakly: one never closed stops it once it is garbage
            weakref.finalize(self, self.closed.set)
            with _lock:
                _open.append(weakref.ref(self))
            start_timer(weakref.WeakMethod(self.on_timer), self.closed)

    def update(self, n: int = 1, effort: float = 0.0) -> None:
        self.n, self.effort_done = self.n + n, self.effort_done + effort
        self.bar.update(n)
        if self.lines:
            self.tick()

    def tick(self) -> float:
        """Off a terminal: the line, if INTERVAL seconds have passed since the process's last; returns the seconds
        until the next one is due."""
        with _lock:
            now = time.monotonic()
            due = _last_line[0] + INTERVAL - now
            if due > 0:
                return due
            _last_line[0] = now
            self.logger.info("%s", self.line(now - self.started))
            return INTERVAL

    def on_timer(self) -> float:
        """The timer's tick: the line if this is the newest open Progress; returns the seconds until the next
        check (another's line due: a second, for it to come, or for this one to speak once the other is closed)."""
        with _lock:
            _open[:] = [ref for ref in _open if ref() is not None and not ref().closed.is_set()]
            newest = _open[-1]() is self
            due = _last_line[0] + INTERVAL - time.monotonic()
        return self.tick() if newest else max(due, 1.0)

    def line(self, elapsed: float) -> str:
        if self.effort:
            left = (self.effort - self.effort_done) * elapsed / self.effort_done if self.effort_done else None
        else:
            done = self.n - self.first  # this process's rate: a resumed run's earlier steps took no time here
            left = (self.total - self.n) * elapsed / done if done else None
        percent = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        return (f"{self.desc}: {self.n:,}/{self.total:,} {self.unit}s{percent}, {duration(elapsed)}"
                + (f", about {duration(left)} left" if left is not None else ""))

    def set_postfix(self, values: dict) -> None:
        self.bar.set_postfix(values)

    def close(self) -> None:
        self.closed.set()
        self.bar.close()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@contextmanager
def named(name: str) -> Iterator[None]:
    """Each Progress made in the block is named `name` first ("trial 3: multitask: 40/192 steps ..."): a command
    that runs others, or one model's work of several (the search's trials, silver's teachers), says whose its
    progress is."""
    _parts.append(name)
    try:
        yield
    finally:
        _parts.pop()


def start_timer(tick: Callable[[], Callable[[], float] | None], stop: threading.Event) -> None:
    """Call tick()() in a thread of its own, first when the next line is due, then each time after the seconds its
    last call returned, until `stop` is set or tick() is None (its Progress is gone)."""
    def run() -> None:
        wait = _last_line[0] + INTERVAL - time.monotonic()
        while not stop.wait(wait):
            method = tick()
            if method is None:
                return
            wait = method()
            del method  # no strong reference to the Progress while waiting

    threading.Thread(target=run, name="progress lines", daemon=True).start()


def progress(items: Iterable, desc: str, total: int | None = None, unit: str = "it", weight=None,
             effort=None) -> Iterator:
    """Each item of `items`, counted by a Progress; weight(item): how many units an item is (default 1);
    effort(item): what an item costs, where items differ in cost (Progress's effort)."""
    items = list(items) if (total is None or effort) and not hasattr(items, "__len__") else items
    efforts = [effort(item) for item in items] if effort else None
    with Progress(len(items) if total is None else total, desc, unit, effort=sum(efforts or ())) as bar:
        for index, item in enumerate(items):
            yield item
            bar.update(weight(item) if weight else 1, efforts[index] if efforts else 0.0)


def log_to_stderr(level: int, progress_lines: bool = False) -> None:
    """A command's log on stderr: lines of `level` and up, through LogHandler; progress_lines: also the progress
    lines below that level (a benchmark that prints its own results and only warnings besides)."""
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", handlers=[LogHandler()])
    if progress_lines:
        log.setLevel(logging.INFO)


class LogHandler(logging.StreamHandler):
    """Log lines through tqdm.write: on a terminal it clears any bar, prints the line and redraws the bar below."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            tqdm.write(self.format(record), file=self.stream)
        except Exception:  # logging's own contract: a handler reports through handleError, never raises
            self.handleError(record)
