"""Multi-task fine-tuning of one BERT encoder for SST-5 sentiment, Quora paraphrase and STS similarity.

    minbert train --model all-MiniLM-L6-v2 --schedule mtdnn --option finetune
    minbert train --config mtdnn-minilm --output-dir runs/mtdnn-minilm

Writes runs/multitask/{best,last}/ (checkpoints), runs/multitask/metrics.jsonl (dev metrics per
evaluation) and predictions/{sst,para,sts}-{dev,test}-output.csv (the leaderboard files).
"""
from collections.abc import Sequence

from minbert.common import cli
from minbert.engine.callbacks import Callback, stops_before_start
from minbert.training.multitask_config import MultitaskConfig


def main(argv: list[str] | None = None, callbacks: Sequence[Callback] = ()) -> dict:
    """The command; callbacks: yours, told of the training loop's events (engine/callbacks.py)."""
    config = cli.parse_config(MultitaskConfig, __doc__, argv, program=cli.program("multitask_classifier.py", "train"),
                              recipe="mtdnn-minilm")
    # The training loads torch: imported once the flags are parsed, so that --help answers at once.
    with stops_before_start(cli.as_given(config.command)):
        from minbert.engine.engine import Engine
        from minbert.training.multitask import MultitaskRun

    with Engine(config, callbacks) as engine:  # engine.config: with --resume, the run's own flags
        return {} if engine.finished else engine.fit(MultitaskRun(engine.config, engine))

