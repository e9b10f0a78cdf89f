"""Hyperparameter search: an Optuna study over multitask_classifier.py's flags: the same as `minbert search`, with the
same flags (minbert/commands/search.py).

    python search.py --help
"""
from minbert.commands.search import main
from minbert.common import cli

if __name__ == "__main__":
    cli.run(main)
