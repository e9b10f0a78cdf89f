"""Per-task ensembles of finished runs, and their leaderboard files: the same as `minbert ensemble`, with the same flags
(minbert/commands/ensemble.py).

    python ensemble.py --help
"""
from minbert.commands.ensemble import main
from minbert.common import cli

if __name__ == "__main__":
    cli.run(main)
