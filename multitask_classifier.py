"""Multi-task fine-tuning of one BERT encoder for SST-5 sentiment, Quora paraphrase and STS similarity.

    python multitask_classifier.py --model all-MiniLM-L6-v2 --schedule mtdnn --option finetune
    python multitask_classifier.py --config recipes/mtdnn-minilm.yaml --output-dir runs/mtdnn-minilm

Writes runs/multitask/{best,last}/ (checkpoints), runs/multitask/metrics.jsonl (dev metrics per
evaluation) and predictions/{sst,para,sts}-{dev,test}-output.csv (the leaderboard files).
"""
from collections.abc import Sequence

from common import cli
from training.callbacks import Callback
from training.engine import Engine
from training.multitask import MultitaskRun
from training.multitask_config import MultitaskConfig


def main(argv: list[str] | None = None, callbacks: Sequence[Callback] = ()) -> dict:
    """The command; callbacks: yours, told of the training loop's events (training/callbacks.py)."""
    config = cli.parse_config(MultitaskConfig, __doc__, argv, program="multitask_classifier.py",
                              recipe="recipes/mtdnn-minilm.yaml")
    with Engine(config, callbacks) as engine:  # engine.config: with --resume, the run's own flags
        return {} if engine.finished else engine.fit(MultitaskRun(engine.config, engine))


if __name__ == "__main__":
    cli.run(main)
