"""Pictures for a report: every layer's STS score, cosine spread, alignment and uniformity, errors, curves: the same as
`minbert analyze`, with the same flags (minbert/commands/analyze.py).

    python analyze.py --help
"""
from minbert.commands.analyze import main
from minbert.common import cli

if __name__ == "__main__":
    cli.run(main)
