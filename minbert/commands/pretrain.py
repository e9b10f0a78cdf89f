"""Contrastive pretraining of the encoder; the checkpoint it writes is what `multitask_classifier.py --init` takes.

    minbert pretrain --config simcse-nli --output-dir runs/simcse-nli
    minbert pretrain --model all-MiniLM-L6-v2 --method simcse --data nli --eval --output-dir runs/simcse
    minbert pretrain --model all-MiniLM-L6-v2 --method ct --data unlabeled --max-steps 2000 \
        --output-dir runs/ct                                   # writes runs/ct/model1 and runs/ct/model2
    minbert pretrain --model all-MiniLM-L6-v2 --method consert --consert-stages joint-unsup \
        --aug1 shuffle --aug2 token-cutoff --data sts --output-dir runs/consert

Methods: simcse, mnrl, ct (Contrastive Tension), sg / sg-opt (self-guided), consert. Data: nli, quora, sst, sts,
unlabeled, all3 (quora, then sst, then sts in every epoch), or a file in one of those formats.
"""
from collections.abc import Sequence

from minbert.common import cli
from minbert.engine.callbacks import Callback, stops_before_start
from minbert.training.methods import ContrastiveConfig


def main(argv: list[str] | None = None, callbacks: Sequence[Callback] = ()) -> dict:
    """The command; callbacks: yours, told of the training loop's events (engine/callbacks.py)."""
    config = cli.parse_config(ContrastiveConfig, __doc__, argv,
                              program=cli.program("pretrain_contrastive.py", "pretrain"),
                              recipe="simcse-nli")
    # The training loads torch: imported once the flags are parsed, so that --help answers at once.
    with stops_before_start(cli.as_given(config.command)):
        from minbert.engine.engine import Engine
        from minbert.training.contrastive import Pretraining

    with Engine(config, callbacks) as engine:  # engine.config: with --resume, the run's own flags
        return {} if engine.finished else Pretraining(engine.config, engine).run()

