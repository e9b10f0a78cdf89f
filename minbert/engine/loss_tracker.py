"""The training losses between log lines and over an epoch, summed on the device and over the processes."""
import torch

from minbert.common import distributed


class LossTracker:
    """Each named loss summed on the device (no wait for the GPU in the step) over two windows: since the
    last log line, and since the trainer last took its period's means (an epoch)."""

    def __init__(self):
        self.window, self.period = {}, {}  # name -> [sum, count]

    def add(self, losses: dict[str, torch.Tensor]) -> None:
        """losses: this process's parts of the step's losses (under torchrun they sum to them over the processes)."""
        for name, loss in losses.items():
            for store in (self.window, self.period):
                total = store.setdefault(name, [0.0, 0])
                total[0] = total[0] + loss.detach().double()
                total[1] += 1

    @staticmethod
    def _means(store: dict, reset: bool) -> dict[str, float]:
        # torchrun: the whole steps' losses, every process's part summed (a collective: every process calls this).
        sums = distributed.sum_over_processes([total for total, _ in store.values()])
        means = {name: total / count for (name, (_, count)), total in zip(store.items(), sums)}
        if reset:
            store.clear()
        return means

    def window_means(self, reset: bool = True) -> dict[str, float]:
        return self._means(self.window, reset)

    def period_means(self, reset: bool = True) -> dict[str, float]:
        return self._means(self.period, reset)

    def state_dict(self) -> dict:
        """Both windows' sums over the whole steps (a collective: every process calls this): a resumed run's next
        log line and epoch means are those of the run uninterrupted."""
        state = {}
        for key, store in (("window", self.window), ("period", self.period)):
            sums = distributed.sum_over_processes([total for total, _ in store.values()])
            state[key] = {name: [total, count] for (name, (_, count)), total in zip(store.items(), sums)}
        return state

    def load_state_dict(self, state: dict) -> None:
        # torchrun: rank 0 holds the saved sums, the others start from 0, so that the sums over processes are them.
        # A state saved before the log window was saved has none: the window starts empty.
        self.window, self.period = ({name: [total if distributed.is_main() else 0.0, count]
                                     for name, (total, count) in state.get(key, {}).items()}
                                    for key in ("window", "period"))
