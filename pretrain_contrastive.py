"""Contrastive pretraining of the encoder; the checkpoint it writes is what `multitask_classifier.py --init` takes.

    python pretrain_contrastive.py --config recipes/simcse-nli.yaml --output-dir runs/simcse-nli
    python pretrain_contrastive.py --model all-MiniLM-L6-v2 --method simcse --data nli --eval --output-dir runs/simcse
    python pretrain_contrastive.py --model all-MiniLM-L6-v2 --method ct --data unlabeled --max-steps 2000 \
        --output-dir runs/ct                                   # writes runs/ct/model1 and runs/ct/model2
    python pretrain_contrastive.py --model all-MiniLM-L6-v2 --method consert --consert-stages joint-unsup \
        --aug1 shuffle --aug2 token-cutoff --data sts --output-dir runs/consert

Methods: simcse, mnrl, ct (Contrastive Tension), sg / sg-opt (self-guided), consert. Data: nli, quora, sst, sts,
unlabeled, all3 (quora, then sst, then sts in every epoch), or a file in one of those formats.
"""
from collections.abc import Sequence

from common import cli
from training.callbacks import Callback
from training.contrastive import Pretraining
from training.engine import Engine
from training.methods import ContrastiveConfig


def main(argv: list[str] | None = None, callbacks: Sequence[Callback] = ()) -> dict:
    """The command; callbacks: yours, told of the training loop's events (training/callbacks.py)."""
    config = cli.parse_config(ContrastiveConfig, __doc__, argv, program="pretrain_contrastive.py",
                              recipe="recipes/simcse-nli.yaml")
    with Engine(config, callbacks) as engine:  # engine.config: with --resume, the run's own flags
        return {} if engine.finished else Pretraining(engine.config, engine).run()


if __name__ == "__main__":
    cli.run(main)
