"""The `minbert` command: one subcommand a job, each the same as the script of its name at the repository's root,
with the same flags and --help (`minbert train --help`)."""
import importlib
import sys

from minbert import __version__

# subcommand -> (its module, whose main(argv) it runs; the script of the same job; what it does, for the list)
COMMANDS = {
    "train": ("minbert.commands.train", "multitask_classifier.py",
              "multi-task fine-tuning of one encoder for SST, Quora and STS (the course's project)"),
    "pretrain": ("minbert.commands.pretrain", "pretrain_contrastive.py",
                 "contrastive pretraining of an encoder: SimCSE, MNRL, Contrastive Tension, SG-OPT, ConSERT"),
    "predict": ("minbert.commands.predict", "predict.py", "a finished run's predictions on new text"),
    "ensemble": ("minbert.commands.ensemble", "ensemble.py", "per-task ensembles of finished runs"),
    "silver": ("minbert.commands.silver", None,
               "silver data: new training examples labelled by a finished run or an ensemble, for train --silver"),
    "search": ("minbert.commands.search", "search.py", "an Optuna hyperparameter search over train's flags"),
    "analyze": ("minbert.commands.analyze", "analyze.py", "pictures for a report: layers, spread, embeddings, errors, curves"),
    "benchmark": ("minbert.commands.benchmark", None,
                  "the STS benchmark of an encoder's sentence embeddings (STS12-16, SICK-R, STS dev)"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {what}" for name, (_, _, what) in COMMANDS.items()]
    return ("usage: minbert SUBCOMMAND [flags]   (minbert SUBCOMMAND --help: its flags)\n\n" + __doc__ +
            "\n\nsubcommands:\n" + "\n".join(lines) + "\n\n  --version   the version of the toolkit")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(usage())
        return
    if argv and argv[0] == "--version":
        print(f"minbert {__version__}")
        return
    if not argv or argv[0] not in COMMANDS:
        from minbert.common.errors import did_you_mean

        guess = did_you_mean(argv[0], COMMANDS) if argv else ""
        given = f"unknown subcommand {argv[0]!r}{f' ({guess})' if guess else ''}" if argv else "no subcommand given"
        print(f"minbert: error: {given}; choose one of {', '.join(COMMANDS)} (see minbert --help)", file=sys.stderr)
        sys.exit(2)
    # Imported only here, for a subcommand, which the list and --version do not need. Neither loads torch: a
    # command loads its work once its flags are parsed, so that its --help answers at once too.
    from minbert.common import cli

    module = importlib.import_module(COMMANDS[argv[0]][0])
    cli.run(lambda: module.main(argv[1:]))
