"""Multi-task fine-tuning of one BERT encoder for SST-5 sentiment, Quora paraphrase and STS similarity: the same as
`minbert train`, with the same flags (minbert/commands/train.py).

    python multitask_classifier.py --help
"""
from minbert.commands.train import main
from minbert.common import cli

if __name__ == "__main__":
    cli.run(main)
