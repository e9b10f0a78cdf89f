"""The command-line front ends: flags -> config -> work. main.py is the `minbert` command, whose subcommands are
these modules' main(); the course's scripts at the repository's root (multitask_classifier.py, ...) run the same."""
