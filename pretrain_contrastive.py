"""Contrastive pretraining of a BERT encoder (SimCSE, MNRL, Contrastive Tension, SG-OPT, ConSERT): the same as `minbert
pretrain`, with the same flags (minbert/commands/pretrain.py).

    python pretrain_contrastive.py --help
"""
from minbert.commands.pretrain import main
from minbert.common import cli

if __name__ == "__main__":
    cli.run(main)
