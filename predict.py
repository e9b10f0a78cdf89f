"""Predictions of a finished multitask run on new text: the same as `minbert predict`, with the same flags
(minbert/commands/predict.py).

    python predict.py --help
"""
from minbert.commands.predict import main
from minbert.common import cli

if __name__ == "__main__":
    cli.run(main)
