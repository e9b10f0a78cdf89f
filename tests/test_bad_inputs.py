"""What a user gets for each bad input we know of: one line naming the problem (file and line, or flag) and exit code 2,
never a traceback. The table "Bad input and what you get" of docs/bad-input.md is this catalogue (test_docs_table_is_the_catalogue);
print it with `.venv/bin/python tests/test_bad_inputs.py`.

Each case: (kind, what is wrong, command, arguments, the exact message's start, exit code). In the arguments and the
message, MODEL, DATA, OUT stand for a tiny model, tiny course files and a fresh output folder; FILE for a file that
is not a folder; the lower-case names for the broken files and folders the fixture `places` makes (finished-run: a
finished run trained on edited-data, whose ids-sst-train.csv changed since). A case that cannot be made of files,
a full disk or a read-only file system (OUT-ro), has a fault in FAULTS that the test injects.
"""
import argparse
import json
import os
import random
import shlex
import shutil
import stat
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from minbert.commands import analyze  # noqa: E402
from minbert.commands import benchmark  # noqa: E402
from minbert import checkpoint  # noqa: E402
from minbert.commands import ensemble  # noqa: E402
import multitask_classifier  # noqa: E402
from minbert.commands import predict  # noqa: E402
from minbert.commands import search  # noqa: E402
from minbert.commands import silver  # noqa: E402
import pretrain_contrastive  # noqa: E402
from minbert.common import cli  # noqa: E402
from minbert.common.cli import last_wins, printed_command, shown_path  # noqa: E402
from minbert.engine.callbacks import Callback  # noqa: E402
from minbert.common.outputs import write_output  # noqa: E402
from tests.conftest import contents, full_file_system  # noqa: E402
from minbert.training.contrastive import ContrastiveConfig  # noqa: E402
from minbert.training.multitask_config import MultitaskConfig  # noqa: E402

COMMANDS = {"multitask": multitask_classifier, "pretrain": pretrain_contrastive, "ensemble": ensemble,
            "predict": predict, "analyze": analyze, "search": search, "silver": silver, "benchmark": benchmark}
SCRIPTS = {"multitask": "multitask_classifier.py", "pretrain": "pretrain_contrastive.py", "ensemble": "ensemble.py",
           "predict": "predict.py", "analyze": "analyze.py", "search": "search.py", "silver": "minbert silver",
           "benchmark": "minbert benchmark"}
TRAIN = ["--model", "MODEL", "--data-dir", "DATA", "--output-dir", "OUT/run", "--predictions-dir", "OUT/predictions",
         "--epochs", "1", "--batch-size", "8", "--device", "cpu"]
SEARCH = ["--config", "recipe.yaml", "--space", "lr-space.yaml", "--study-dir", "OUT/study", "--trials", "1"]
SILVER = ["--teacher", "finished-run", "--retriever", "MODEL", "--data-dir", "DATA", "--bank", "bank.txt", "--out",
          "OUT/silver", "--cache-dir", "OUT/cache", "--tasks", "sst", "--device", "cpu", "--per-class", "2",
          "--neighbours", "2"]
CASES = [
    # flags
    ("flag", "negative learning rate", "multitask", [*TRAIN, "--lr", "-1"], "--lr must be > 0, got -1", 2),
    ("flag", "negative head learning rate", "multitask", [*TRAIN, "--head-lr", "-1"],
     "--head-lr must be > 0, got -1", 2),
    ("flag", "dropout above 1", "multitask", [*TRAIN, "--head-dropout", "2"],
     "--head-dropout must be >= 0 and < 1, got 2", 2),
    ("flag", "negative sample size", "multitask", [*TRAIN, "--max-train-examples", "-5"],
     "--max-train-examples must be >= 0, got -5", 2),
    ("flag", "warm-up fraction above 1", "pretrain", ["--model", "MODEL", "--warmup", "1.5"],
     "--warmup must be >= 0 and <= 1, got 1.5", 2),
    ("flag", "fp16 on a CPU", "multitask", [*TRAIN, "--precision", "fp16"],
     "error: --precision fp16 needs a CUDA device; use bf16 or fp32 on CPU", 2),
    ("flag", "--max-length too short for a pair", "multitask", [*TRAIN, "--max-length", "4"],
     "--max-length must be >= 8, got 4", 2),
    ("flag", "--max-length beyond the model's positions", "multitask", [*TRAIN, "--max-length", "512"],
     "error: --max-length 512: this model has 128 positions; use --max-length 128 or less", 2),
    ("flag", "a task weighted 0 (trained never, scored anyway)", "multitask", [*TRAIN, "--task-weights", "para=0"],
     "--task-weights 'para=0': para would never be trained, yet scored and predicted", 2),
    ("flag", "--max-tokens below the longest input allowed", "multitask", [*TRAIN, "--max-tokens", "100"],
     "error: --max-tokens 100 is smaller than the longest input (256 tokens), which would fit in no batch; use "
     "--max-tokens 256 or more", 2),
    ("flag", "--compile where torch cannot compile", "multitask", [*TRAIN, "--compile"],
     "error: torch cannot compile on this machine (cpu): RuntimeError: g++: not found; run without compiling", 2),
    ("flag", "--attention unpadded (removed: the slowest layout)", "multitask", [*TRAIN, "--attention", "unpadded"],
     "argument --attention: invalid choice: 'unpadded'", 2),
    ("flag", "contrastive --grad-accum", "pretrain", ["--model", "MODEL", "--grad-accum", "2"],
     "--grad-accum: a contrastive loss compares the examples of one batch", 2),
    ("flag", "an unknown flag", "multitask", [*TRAIN, "--bogus"],
     "multitask_classifier.py: error: unrecognized arguments: --bogus (see .venv/bin/python multitask_classifier.py "
     "--help)", 2),
    ("flag", "--tasks naming no task", "multitask", [*TRAIN, "--tasks", "nonsense"],
     "--tasks 'nonsense': unknown task 'nonsense'", 2),
    ("flag", "every trained task's loss weighted 0", "multitask", [*TRAIN, "--loss-weights", "sst=0,para=0,sts=0"],
     "--loss-weights 'sst=0,para=0,sts=0': every trained task weighs 0, so nothing would be trained", 2),
    ("flag", "task weights of a schedule that samples none", "multitask",
     [*TRAIN, "--schedule", "avg", "--task-weights", "para=2"],
     "--schedule avg: task weights are sampling weights of the mtdnn schedule, not of 'avg'", 2),
    ("flag", "fewer epochs than a sequential schedule's tasks", "multitask", [*TRAIN, "--schedule", "sequential"],
     "--schedule sequential: sequential training of 3 tasks needs at least 3 epochs, got 1", 2),
    ("flag", "a device that does not exist", "multitask", [*TRAIN, "--device", "gpu"],
     "error: --device gpu: not a device; use auto, cpu, cuda or cuda:N", 2),
    ("flag", "--resume and --overwrite together", "multitask", [*TRAIN, "--resume", "--overwrite"],
     "error: --resume continues the run in --output-dir and --overwrite replaces it: give one of them", 2),
    ("flag", "an infinite learning rate", "multitask", [*TRAIN, "--lr", "inf"],
     "--lr must be a finite number > 0, got inf", 2),
    ("flag", "an infinite head learning rate", "multitask", [*TRAIN, "--head-lr", "inf"],
     "--head-lr must be a finite number > 0, got inf", 2),
    ("flag", "an infinite contrastive learning rate", "pretrain", ["--model", "MODEL", "--lr", "inf"],
     "--lr must be a finite number > 0, got inf", 2),
    ("flag", "a negative seed", "multitask", [*TRAIN, "--seed", "-1"],
     "--seed must be >= 0 and <= 4294967295, got -1", 2),
    ("flag", "a config file's key without a value", "multitask", [*TRAIN, "--config", "no-value.yaml"],
     "--config no-value.yaml: epochs has no value; give one, or leave the key out for the default (3)", 2),
    ("flag", "a flag given twice", "multitask", ["--seed", "-1", *TRAIN, "--seed", "5"],
     "multitask_classifier.py: error: --seed: given twice on the command line (--seed -1, then --seed 5); give it "
     "once (see .venv/bin/python multitask_classifier.py --help)", 2),
    ("flag", "two config files", "multitask", ["--config", "no-value.yaml", *TRAIN, "--config", "dup-key.yaml"],
     "multitask_classifier.py: error: --config: given twice on the command line (--config no-value.yaml, then "
     "--config dup-key.yaml); give it once", 2),
    ("flag", "a config file's key given twice", "multitask", [*TRAIN, "--config", "dup-key.yaml"],
     "multitask_classifier.py: error: --config dup-key.yaml: epochs is given twice (lines 1 and 3); give it once", 2),
    ("flag", "a run config recorded with --overwrite, given to --config", "multitask",
     [*TRAIN, "--config", "overwrite-config.json"],
     "multitask_classifier.py: error: --config overwrite-config.json: overwrite: a file never sets it, since it "
     "removes or continues files; type --overwrite on the command line if you mean it", 2),
    ("flag", "a recipe that sets --resume", "multitask", [*TRAIN, "--config", "resume-flags.yaml"],
     "multitask_classifier.py: error: --config resume-flags.yaml: resume: a file never sets it, since it removes "
     "or continues files; type --resume on the command line if you mean it", 2),
    ("flag", "an abbreviated flag (--se for --seed)", "multitask", [*TRAIN, "--se", "1"],
     "multitask_classifier.py: error: unrecognized arguments: --se 1; did you mean --seed? (see .venv/bin/python "
     "multitask_classifier.py --help)", 2),
    ("flag", "a misspelled flag (--epoch for --epochs)", "multitask", [*TRAIN, "--epoch", "1"],
     "multitask_classifier.py: error: unrecognized arguments: --epoch 1; did you mean --epochs? (see "
     ".venv/bin/python multitask_classifier.py --help)", 2),
    ("flag", "a misspelled choice (--precision fp23)", "multitask", [*TRAIN, "--precision", "fp23"],
     "multitask_classifier.py: error: argument --precision: invalid choice: 'fp23' (choose from 'auto', 'fp32', "
     "'tf32', 'bf16', 'fp16'); did you mean fp32?", 2),
    ("flag", "a recipe name that no recipe has", "multitask", [*TRAIN, "--config", "quickstart"],
     "multitask_classifier.py: error: --config quickstart: no such file, and no recipe of that name comes with the "
     "toolkit; did you mean quick-start? (the recipes: mtdnn-minilm, mtdnn-mpnet, mtdnn-mpnet-gpu, quick-start, simcse-nli)", 2),
    ("flag", "a misspelled subcommand of analyze.py", "analyze", ["curvs"],
     "analyze.py: error: argument SUBCOMMAND: invalid choice: 'curvs' (choose from 'layers', 'spread', 'embeddings', "
     "'errors', 'curves'); did you mean curves?", 2),
    ("flag", "a run's output folder inside another run's best/", "multitask",
     [*TRAIN, "--output-dir", "finished-run/best"],
     "error: --output-dir finished-run/best: inside finished-run/best, a checkpoint folder, whose files its own "
     "commands write and replace; choose a place outside it", 2),
    ("flag", "a TensorBoard folder inside another run's folder", "multitask",
     [*TRAIN, "--tensorboard", "finished-run/tb"],
     "error: --tensorboard finished-run/tb: inside finished-run, a run folder, whose files its own commands write and "
     "replace; choose a place outside it", 2),
    ("flag", "a pretraining output folder inside an encoder's folder", "pretrain",
     ["--model", "MODEL", "--output-dir", "pretrained-encoder/more"],
     "error: --output-dir pretrained-encoder/more: inside pretrained-encoder, a checkpoint folder, whose files its "
     "own commands write and replace; choose a place outside it", 2),
    ("flag", "a study folder inside a run's best/", "search", [*SEARCH, "--study-dir", "finished-run/best"],
     "error: --study-dir finished-run/best: inside finished-run/best, a checkpoint folder, whose files its own "
     "commands write and replace; choose a place outside it", 2),
    ("flag", "a study folder that is a run folder", "search", [*SEARCH, "--study-dir", "finished-run"],
     "error: --study-dir finished-run: inside finished-run, a run folder, whose files its own commands write and "
     "replace; choose a place outside it", 2),
    ("flag", "a study folder that is a file", "search", [*SEARCH, "--study-dir", "FILE"],
     "error: --study-dir FILE: a file; give a folder for the study", 2),
    ("flag", "a study without a limit (--trials 0)", "search", [*SEARCH, "--trials", "0"],
     "error: give --trials N, --timeout SECONDS or both: how long the study runs", 2),
    ("flag", "--report with a mistyped --study-dir", "search", [*SEARCH, "--study-dir", "OUT/stduy", "--report"],
     "error: --study-dir OUT/stduy: no study there (no study.db); give the folder of a study that has trials", 2),
    ("flag", "--resume of a study with another --objective", "search",
     [*SEARCH, "--study-dir", "old-study", "--resume", "--objective", "sts"],
     "was started with --objective overall, not sts: its values are overall scores; give --objective overall, or "
     "another --study-dir", 2),
    ("flag", "a space value for a device this machine lacks", "search", [*SEARCH, "--space", "gpu-space.yaml"],
     "error: gpu-space.yaml:1: device: --device cuda: CUDA is not available on this machine; use --device cpu", 2),
    ("flag", "a space value of a precision a CPU lacks", "search", [*SEARCH, "--space", "fp16-space.yaml"],
     "error: fp16-space.yaml:1: precision: --precision fp16 needs a CUDA device; use bf16 or fp32 on CPU", 2),
    ("flag", "a space value of a model folder that does not exist", "search", [*SEARCH, "--space", "model-space.yaml"],
     "error: model-space.yaml:1: model: --model ./nowhere: checkpoint folder not found", 2),
    ("flag", "a space value of a data folder without the course files", "search",
     [*SEARCH, "--space", "data-space.yaml"],
     "error: data-space.yaml:1: data-dir: --data-dir no-data: no ids-sst-train.csv (the sst task's)", 2),
    ("flag", "a space value of --max-tokens below one input", "search", [*SEARCH, "--space", "tokens-space.yaml"],
     "error: tokens-space.yaml:1: max-tokens: --max-tokens 10 is smaller than the longest input (128 tokens)", 2),
    ("flag", "a space value of tasks without the --objective's", "search",
     [*SEARCH, "--space", "tasks-space.yaml", "--objective", "para"],
     "error: tasks-space.yaml:1: tasks: --metric-for-best para", 2),
    ("flag", "a space key without a value", "search", [*SEARCH, "--space", "empty-space.yaml"],
     "error: empty-space.yaml:1: lr: no value; give a range, a list of values or one value", 2),
    ("flag", "a NUL byte in a space file", "search", [*SEARCH, "--space", "nul-space.yaml"],
     "error: nul-space.yaml: not YAML (unacceptable character #x0000: special characters are not allowed", 2),
    ("file system", "a journal whose last line is cut short", "search",
     [*SEARCH, "--study-dir", "OUT/s", "--storage", "cut.journal", "--resume"],
     "error: cut.journal: line 2: not a line of an Optuna journal (cut short, or edited); the study cannot be read", 2),
    ("file system", "--storage naming a folder", "search", [*SEARCH, "--storage", "user-folder"],
     "error: --storage user-folder: a folder; give a journal file's path (or an RDB URL)", 2),
    ("flag", "a predictions folder inside the run's best/", "multitask", [*TRAIN, "--predictions-dir", "OUT/run/best"],
     "error: --predictions-dir OUT/run/best: inside OUT/run/best, which each save of the run replaces whole; choose a "
     "folder outside OUT/run/best and OUT/run/last", 2),
    ("flag", "a dev sample too small for Pearson r", "multitask", [*TRAIN, "--max-eval-examples", "1"],
     "error: --max-eval-examples 1: a sample of 1 pair of DATA/sts-dev.csv, all scored", 2),
    ("flag", "a learning rate that makes the run diverge", "multitask", [*TRAIN, "--tasks", "sst", "--lr", "1e30"],
     "error: step 2: the sst loss is not finite (nan); the run stopped; no checkpoint was saved", 2),
    ("flag", "an empty sentence to predict", "predict", ["finished-run", "--sst", ""],
     "predict.py: error: --sst: an empty sentence; give the text to predict", 2),
    ("flag", "a pair of empty sentences to predict", "predict", ["finished-run", "--sts", "", ""],
     "predict.py: error: --sts: an empty sentence; give the text to predict", 2),
    ("flag", "int8 with bf16, to predict", "predict",
     ["finished-run", "--sst", "a film", "--quantize", "int8", "--precision", "bf16"],
     "error: --quantize int8 computes in int8 and fp32, not with --precision bf16; leave out one of them", 2),
    ("flag", "--quantize to train (int8 is for inference)", "multitask", [*TRAIN, "--quantize", "int8"],
     "multitask_classifier.py: error: unrecognized arguments: --quantize int8 (see .venv/bin/python "
     "multitask_classifier.py --help)", 2),
    ("flag", "one run twice among the members", "ensemble",
     ["--members", "finished-run,finished-run/", "--data-dir", "DATA", "--out", "OUT/e.json", "--predictions-dir",
      "OUT/p"],
     "ensemble.py: error: --members: finished-run and finished-run/ are one checkpoint (finished-run/best); list each "
     "run once", 2),
    ("flag", "a member and a link to it", "ensemble",
     ["--members", "finished-run,link-to-run", "--data-dir", "DATA", "--out", "OUT/e.json", "--predictions-dir",
      "OUT/p"],
     "ensemble.py: error: --members: finished-run and link-to-run are one checkpoint (finished-run/best); list each "
     "run once", 2),
    # weights and checkpoints
    ("checkpoint", "config.json is not JSON", "multitask", [*TRAIN, "--model", "broken-config"],
     "error: broken-config/config.json: line 1: not valid JSON", 2),
    ("checkpoint", "config.json of another architecture", "multitask", [*TRAIN, "--model", "gpt2-config"],
     "error: gpt2-config/config.json: model_type is 'gpt2'; this encoder loads bert, roberta, mpnet checkpoints only", 2),
    ("checkpoint", "truncated model.safetensors", "multitask", [*TRAIN, "--model", "truncated-weights"],
     "error: truncated-weights/model.safetensors: cannot read weights", 2),
    ("checkpoint", "truncated heads.safetensors", "multitask", [*TRAIN, "--init", "truncated-heads"],
     "error: truncated-heads/heads.safetensors: cannot read the heads", 2),
    ("checkpoint", "truncated training_state.pt", "multitask", [*TRAIN, "--output-dir", "truncated-state", "--resume"],
     "error: truncated-state/last/training_state.pt: cannot read the training state", 2),
    ("checkpoint", "truncated ensemble outputs", "ensemble",
     ["--members", "truncated-outputs", "--data-dir", "DATA", "--out", "OUT/e.json", "--predictions-dir", "OUT/p"],
     "error: truncated-outputs/outputs-sst-dev.pt: cannot read saved outputs", 2),
    ("checkpoint", "no such model folder", "multitask", [*TRAIN, "--model", "OUT/nowhere/"],
     "error: checkpoint folder not found: OUT/nowhere", 2),
    ("checkpoint", "a mistyped model folder beside the folders the command makes", "multitask",
     [*TRAIN, "--model", "OUT/modle"],
     "error: checkpoint folder not found: OUT/modle; the closest existing folder is OUT/, which holds no folders", 2),
    ("checkpoint", "a mistyped run folder (looked for here, not on the hub)", "multitask",
     [*TRAIN, "--model", "finished-run/bset"], "error: checkpoint folder not found: finished-run/bset; the closest "
     "existing folder is finished-run/, which holds best/, last/", 2),
    ("checkpoint", "a task the run did not train, to predict", "predict", ["finished-run", "--cfimdb", "a film"],
     "error: --cfimdb: finished-run was trained on sst, para, sts, not cfimdb", 2),
    ("checkpoint", "an encoder-only checkpoint (pretrain_contrastive.py's), to predict", "predict",
     ["pretrained-encoder", "--sst", "a film"],
     "error: pretrained-encoder: an encoder-only checkpoint (no heads.safetensors; pretrain_contrastive.py writes "
     "these): it has no task heads to predict with; fine-tune it first: .venv/bin/python multitask_classifier.py "
     "--init pretrained-encoder", 2),
    ("checkpoint", "a Contrastive Tension run folder (model1/, model2/), to predict", "predict",
     ["ct-run", "--sst", "a film"],
     "error: ct-run: an encoder-only checkpoint (no heads.safetensors; pretrain_contrastive.py writes these): it has "
     "no task heads to predict with; fine-tune it first: .venv/bin/python multitask_classifier.py --init ct-run/model1 "
     "or --init ct-run/model2", 2),
    ("checkpoint", "a path that does not exist, to predict", "predict", ["OUT/nowhere", "--sst", "a film"],
     "error: OUT/nowhere: not found", 2),
    ("checkpoint", "a run that saved no checkpoint (it diverged before its first evaluation), to predict", "predict",
     ["no-checkpoint", "--sst", "a film"],
     "error: no-checkpoint: a run with no checkpoint yet (no best/): it saves one at its first evaluation; predict "
     "once it has", 2),
    ("checkpoint", "a run whose best/ a save is replacing this moment, to predict", "predict",
     ["mid-save", "--sst", "a film"],
     "error: mid-save: its best/ is being replaced by a save this moment; try again once the save ends", 2),
    ("checkpoint", "a run folder given to --init", "multitask", [*TRAIN, "--init", "finished-run"],
     "error: --init finished-run: a folder of checkpoints, not a checkpoint; give --init finished-run/best", 2),
    ("checkpoint", "a Contrastive Tension output (model1/, model2/) given to --init", "multitask",
     [*TRAIN, "--init", "ct-run"],
     "error: --init ct-run: a folder of checkpoints, not a checkpoint; give --init ct-run/model1 or --init "
     "ct-run/model2", 2),
    ("checkpoint", "a run with no checkpoint given to --init", "multitask", [*TRAIN, "--init", "no-checkpoint"],
     "error: --init no-checkpoint: a run with no checkpoint yet (no best/): it saves one at its first evaluation", 2),
    ("checkpoint", "a checkpoint saved before a head flag existed (--pair-mlp), to predict", "predict",
     ["old-run", "--sst", "a film"], "error: old-run/best/run_config.json: records no --pair-mlp (saved before the "
     "flag existed), and what its heads compute depends on it; add \"pair_mlp\" with the value they were trained "
     "with", 2),
    ("checkpoint", "a checkpoint saved before a head flag existed (--pair-mlp), to --init", "multitask",
     [*TRAIN, "--init", "old-run/best"], "error: old-run/best/run_config.json: records no --pair-mlp", 2),
    ("checkpoint", "a run_config.json that holds a list, on --resume", "multitask",
     [*TRAIN, "--output-dir", "list-config", "--resume"],
     "error: list-config/last/run_config.json: not a run's configuration (a JSON list, expected an object of flags)",
     2),
    ("checkpoint", "bytes that are not UTF-8 in metrics.jsonl, on --resume", "multitask",
     [*TRAIN, "--data-dir", "edited-data", "--output-dir", "bad-log", "--resume", "--allow-changed-data"],
     "error: bad-log/metrics.jsonl: line 3: not UTF-8 text, so not a line of ours; remove it to resume", 2),
    ("checkpoint", "a note of the user's in metrics.jsonl, on --resume", "multitask",
     [*TRAIN, "--data-dir", "edited-data", "--output-dir", "user-note", "--resume", "--allow-changed-data"],
     "error: user-note/metrics.jsonl: line 1: not the run's (each of its lines is a JSON object with its step and "
     "event); move them out of the file to resume", 2),
    ("checkpoint", "a note of the user's that holds a step, in metrics.jsonl, on --resume", "multitask",
     [*TRAIN, "--data-dir", "edited-data", "--output-dir", "step-note", "--resume", "--allow-changed-data"],
     "error: step-note/metrics.jsonl: line 1: not the run's (each of its lines is a JSON object with its step and "
     "event); move them out of the file to resume", 2),
    ("checkpoint", "a training state that holds Python objects, on --resume", "multitask",
     [*TRAIN, "--data-dir", "edited-data", "--output-dir", "pickled-state", "--resume", "--allow-changed-data"],
     "error: pickled-state/last/training_state.pt: cannot read the training state (it holds Python objects, not only "
     "tensors, and such a file is never unpickled: its code could run)", 2),
    ("checkpoint", "a training state without its optimizer, on --resume", "multitask",
     [*TRAIN, "--data-dir", "edited-data", "--output-dir", "no-optimizer", "--resume", "--allow-changed-data"],
     "error: no-optimizer/last/training_state.pt: not a whole training state (no optimizer entry); put back the "
     "run's own last/, or start the run again with --overwrite", 2),
    ("checkpoint", "another run's training state, on --resume", "multitask",
     [*TRAIN, "--data-dir", "edited-data", "--output-dir", "other-state", "--resume", "--allow-changed-data"],
     "error: other-state/last/training_state.pt: another run's training state (its last evaluation, at step", 2),
    ("checkpoint", "another run's training state, copied before that run's first evaluation, on --resume",
     "multitask",
     [*TRAIN, "--data-dir", "edited-data", "--output-dir", "early-state", "--resume", "--allow-changed-data"],
     "error: early-state/last/training_state.pt: another run's training state (it records run another-run, the run "
     "config of early-state run ", 2),
    # Round six, second half (issue 62): every bound --help shows checked, a study's storage, and one line with
    # nothing left behind for what gave a traceback or an unclear line.
    ("flag", "a batch size of 0 to benchmark", "benchmark", ["--model", "MODEL", "--batch-size", "0"],
     "minbert benchmark: error: --batch-size must be >= 1, got 0", 2),
    ("flag", "a negative --max-length to benchmark", "benchmark", ["--model", "MODEL", "--max-length", "-1"],
     "minbert benchmark: error: --max-length must be >= 0, got -1", 2),
    ("flag", "a batch size of 0 to analyze layers", "analyze", ["layers", "--models", "MODEL", "--batch-size", "0"],
     "error: --batch-size must be >= 1, got 0", 2),
    ("flag", "a negative --max-length to analyze spread", "analyze", ["spread", "--models", "MODEL", "--max-length",
                                                                       "-5"],
     "error: --max-length must be >= 3, got -5", 2),
    ("flag", "a config file that is not UTF-8", "multitask", [*TRAIN, "--config", "latin1.yaml"],
     "multitask_classifier.py: error: --config latin1.yaml: line 2: not UTF-8 text; save it as UTF-8 (e.g. iconv -f "
     "latin1 -t utf-8)", 2),
    ("flag", "a YAML list for a flag of one value, in a config file", "multitask", [*TRAIN, "--config", "lr-list.yaml"],
     "multitask_classifier.py: error: --config lr-list.yaml: lr: a YAML list ([0.001, 0.002]); give one value, as on "
     "the command line", 2),
    ("flag", "a flag that is neither search.py's nor a trial's", "search", [*SEARCH, "--tri", "1"],
     "search.py: error: unrecognized arguments: --tri 1; did you mean --trials? (see .venv/bin/python search.py "
     "--help)", 2),
    ("flag", "a search space name that no space has", "search", [*SEARCH, "--space", "quickstart"],
     "error: --space quickstart: no such file, and no space of that name comes with the toolkit; did you mean "
     "quick-start? (the spaces: mtdnn-minilm, quick-start)", 2),
    ("flag", "--resume of a folder with no study", "search", [*SEARCH, "--study-dir", "OUT/new", "--resume"],
     "error: --study-dir OUT/new: no study there (no study.db); give the folder of a study that has trials", 2),
    ("flag", "--resume of a study with another --storage than it was started in", "search",
     [*SEARCH, "--study-dir", "old-study", "--resume", "--storage", "journal"],
     "error: --storage journal: the study in old-study is kept in study.db (the default --storage); leave --storage "
     "out to use it, or give another --study-dir", 2),
    ("file system", "a study's storage that is a named pipe", "search", [*SEARCH, "--storage", "a-pipe"],
     "error: --storage a-pipe: a named pipe, not a regular file or folder; give the path of a file or folder to write",
     2),
    ("file system", "a study's storage that is a device (a-device: a link to /dev/null)", "search",
     [*SEARCH, "--storage", "a-device"],
     "error: --storage a-device: a device, not a regular file or folder; give the path of a file or folder to write",
     2),
    ("file system", "the disk is full as the study's database is made", "search", SEARCH,
     "error: --storage sqlite:///OUT/study/study.db: cannot open it (OperationalError: (sqlite3.OperationalError) "
     "database or disk is full", 2),
    ("file system", "a bank cache folder that is a file", "silver", [*SILVER, "--cache-dir", "FILE"],
     "error: --cache-dir FILE: a file; give a folder for the bank's embeddings", 2),
    ("file system", "a bank cache folder on a read-only file system", "silver",
     [*SILVER, "--cache-dir", "OUT-ro/cache"],
     "error: --cache-dir OUT-ro/cache: cannot write there (Read-only file system)", 2),
    ("file system", "the disk fills up as the bank's embeddings are cached", "silver", SILVER,
     "/chunk-00000.safetensors: no space left on the device; nothing of it was written", 2),
    ("data", "no --bank, and none in --data-dir", "silver", [arg for arg in SILVER if arg != "--bank"
                                                             and arg != "bank.txt"],
     "no such file (--data-dir's; no --bank was given); give --bank, a file of the unlabeled sentences to retrieve "
     "from", 2),
    ("file system", "the disk is full as the TensorBoard file is begun", "multitask",
     [*TRAIN, "--tensorboard", "OUT/tb"],
     "error: --tensorboard OUT/tb: cannot write its event file (No space left on device)", 2),
    ("file system", "an MLflow tracking store on a read-only file system", "multitask",
     [*TRAIN, "--report-to", "mlflow"],
     "error: --report-to mlflow: cannot write MLflow's tracking store sqlite:///OUT-ro/mlflow.db (Read-only file "
     "system)", 2),
    ("file system", "an MLflow tracking store that is a file, not a database", "multitask",
     [*TRAIN, "--report-to", "mlflow"],
     "error: --report-to mlflow: cannot write MLflow's tracking store OUT/notes.txt (a file, not a folder: set "
     "MLFLOW_TRACKING_URI=sqlite:///OUT/mlflow.db)", 2),
    ("file system", "the disk is full as the MLflow database is made", "multitask", [*TRAIN, "--report-to", "mlflow"],
     "error: --report-to mlflow: cannot write MLflow's tracking store sqlite:///OUT/mlflow.db (OperationalError: "
     "(sqlite3.OperationalError) database or disk is full", 2),
    ("checkpoint", "a run whose best/run_config.json was removed, to predict", "predict",
     ["no-best-config", "--sst", "a film"],
     "error: no-best-config/best: no run_config.json, the flags its model was trained with; put it back "
     "(no-best-config/run_config.json is the run's, not the checkpoint's)", 2),
    # data files
    ("data", "empty file to pretrain on", "pretrain", ["--model", "MODEL", "--data", "empty.txt", "--output-dir", "OUT"],
     "error: empty.txt: no usable rows", 2),
    ("data", "missing course file", "multitask", [*TRAIN, "--data-dir", "OUT"],
     "error: OUT/ids-sst-train.csv: file not found", 2),
    ("data", "a test-student row that cannot be read", "multitask", [*TRAIN, "--data-dir", "bad-test-row"],
     "error: bad-test-row/ids-sst-test-student.csv: line 3: 2 fields, the header has 3", 2),
    ("data", "a test-student sentence opening a double quote it does not close", "multitask",
     [*TRAIN, "--data-dir", "open-quote"],
     "error: open-quote/ids-sst-test-student.csv: line 4: a double quote opens a field that runs on to line 8; "
     "every line must be one row", 2),
    ("data", "an empty id in a test-student file", "multitask", [*TRAIN, "--data-dir", "empty-id"],
     "error: empty-id/ids-sst-test-student.csv: line 3: empty id; every row of a file without labels needs an id", 2),
    ("data", "an id twice in a test-student file", "multitask", [*TRAIN, "--data-dir", "repeated-id"],
     "error: repeated-id/ids-sst-test-student.csv: line 5: id 'ids-sst-test-student-2' is the id of line 4 too; every "
     "row of a file without labels needs an id of its own for its prediction", 2),
    ("data", "an STS dev file whose pairs all have one score", "multitask", [*TRAIN, "--data-dir", "constant-sts"],
     "error: constant-sts/sts-dev.csv: 12 pairs, all scored 2.5; Pearson r needs dev pairs of at least two different "
     "scores", 2),
    ("data", "a data file changed since the run started, on --resume", "multitask",
     [*TRAIN, "--data-dir", "edited-data", "--output-dir", "finished-run", "--resume"],
     "error: --resume: edited-data/ids-sst-train.csv changed since the run started (SHA-256 in its "
     "run_config.json); resume with the data it started with, or add --allow-changed-data", 2),
    ("data", "an empty file to predict", "predict", ["finished-run", "--task", "sst", "--input", "empty.txt"],
     "error: empty.txt: no examples to predict", 2),
    ("data", "a comma-separated CSV file with an id column to predict", "predict",
     ["finished-run", "--task", "sst", "--input", "commas.csv"],
     "error: commas.csv: line 1 is a header of comma-separated columns (id,sentence); predict.py reads the course's "
     "tab-separated files, or one example a line: separate the columns by tabs, or remove the header", 2),
    ("data", "a binary file to predict", "predict", ["finished-run", "--task", "sst", "--input", "binary.gz"],
     "error: binary.gz: line 1: a NUL byte: a binary file, not text", 2),
    # file system
    ("file system", "output folder that cannot be written", "multitask", [*TRAIN, "--output-dir", "FILE/run"],
     "error: --output-dir FILE/run: cannot write there", 2),
    ("file system", "predictions folder that cannot be written", "multitask",
     [*TRAIN, "--predictions-dir", "FILE/predictions"], "error: --predictions-dir FILE/predictions: cannot write there", 2),
    ("file system", "--resume with no interrupted run", "multitask", [*TRAIN, "--resume"],
     "error: --resume: no interrupted run in OUT/run (no last/training_state.pt)", 2),
    ("file system", "a run killed before its first save, started again as it was", "multitask",
     [*TRAIN, "--output-dir", "killed-run"],
     "error: --output-dir killed-run holds a run that stopped before it saved a checkpoint to resume from; start it "
     "again: .venv/bin/python multitask_classifier.py --model MODEL", 2),
    ("file system", "a run killed before its first save, with --resume", "multitask",
     [*TRAIN, "--output-dir", "killed-run", "--resume"],
     "error: --resume: the run in killed-run stopped before it saved a checkpoint to resume from; start it again: "
     ".venv/bin/python multitask_classifier.py --model MODEL", 2),
    ("file system", "an output folder that holds another run", "multitask", [*TRAIN, "--output-dir", "finished-run"],
     "error: --output-dir finished-run already holds files (best, last, metrics.jsonl, run_config.json): continue "
     "its run with --resume, start again over it with --overwrite, or choose another --output-dir", 2),
    ("file system", "a pretraining output folder that holds other files", "pretrain",
     ["--model", "MODEL", "--output-dir", "user-folder"],
     "error: --output-dir user-folder already holds files (notes.txt)", 2),
    ("file system", "--overwrite of the folder whose best/ --init starts from", "multitask",
     [*TRAIN, "--output-dir", "init-run", "--init", "init-run/best", "--overwrite"],
     "error: --overwrite would remove init-run/best, which --init init-run/best reads; copy it out of init-run first, "
     "or choose another --output-dir", 2),
    ("file system", "an output folder another command is writing", "multitask", TRAIN,
     "error: --output-dir OUT/run is in use by another command (pid 4242); wait until it ends, or choose another "
     "--output-dir", 2),
    ("file system", "the disk fills up while a checkpoint is saved", "multitask", TRAIN,
     "error: OUT/run/best: no space left on the device; nothing of it was written (it needs about", 2),
    ("file system", "a predictions file that cannot be written", "predict",
     ["finished-run", "--sst", "a film", "--output", "FILE/out.tsv"],
     "error: --output FILE/out.tsv: cannot write there", 2),
    ("file system", "an ensemble report that cannot be written", "ensemble",
     ["--members", "finished-run", "--data-dir", "DATA", "--out", "FILE/e.json", "--predictions-dir", "OUT/p"],
     "error: --out FILE/e.json: cannot write there", 2),
    ("file system", "predictions written over the file they are read from", "predict",
     ["finished-run", "--task", "sst", "--input", "sentences.txt", "--output", "sentences.txt"],
     "error: --output sentences.txt: the file --input reads; writing it would destroy it before it is read; choose "
     "another --output", 2),
    ("file system", "predictions written over a file no command wrote", "predict",
     ["finished-run", "--sst", "a film", "--output", "user-folder/notes.txt"],
     "error: --output user-folder/notes.txt: a file no command of ours wrote (no record of the write beside it); "
     "choose another --output, or replace it with --overwrite", 2),
    ("file system", "an ensemble's predictions into a run's best/", "ensemble",
     ["--members", "finished-run", "--data-dir", "DATA", "--out", "OUT/e.json", "--predictions-dir",
      "finished-run/best"],
     "error: --predictions-dir finished-run/best: inside finished-run/best, a checkpoint folder, whose files its own "
     "commands write and replace; choose a place outside it", 2),
    ("file system", "an ensemble's report over a run's run_config.json", "ensemble",
     ["--members", "finished-run", "--data-dir", "DATA", "--out", "finished-run/run_config.json", "--predictions-dir",
      "OUT/p"],
     "error: --out finished-run/run_config.json: inside finished-run, a run folder, whose files its own commands "
     "write and replace; choose a place outside it", 2),
    ("file system", "an ensemble's report over a file no command wrote", "ensemble",
     ["--members", "finished-run", "--data-dir", "DATA", "--out", "user-folder/notes.txt", "--predictions-dir",
      "OUT/p"],
     "error: --out user-folder/notes.txt: a file no command of ours wrote (no record of the write beside it); choose "
     "another --out, or replace it with --overwrite", 2),
    ("file system", "an ensemble's predictions into a folder of another ensemble's", "ensemble",
     ["--members", "finished-run", "--data-dir", "DATA", "--out", "OUT/e.json", "--predictions-dir",
      "other-leaderboard"],
     "error: --predictions-dir other-leaderboard holds leaderboard files of the ensemble reported in "
     "/elsewhere/ensemble.json (sst-dev-output.csv); choose another --predictions-dir, or replace them with "
     "--overwrite", 2),
    ("file system", "a run's predictions into a folder of leaderboard files no command recorded, with --overwrite",
     "multitask", [*TRAIN, "--predictions-dir", "unrecorded", "--overwrite"],
     "error: --predictions-dir unrecorded holds leaderboard files that no command recorded writing "
     "(para-dev-output.csv): they may be yours, and no command replaces them, --overwrite or not; move them out of "
     "unrecorded, or choose another --predictions-dir", 2),
    ("file system", "predictions written to a device (a-device: a link to /dev/null)", "predict",
     ["finished-run", "--sst", "a film", "--output", "a-device"],
     "error: --output a-device: a device, not a regular file or folder; give the path of a file or folder to "
     "write", 2),
    ("file system", "a run's output folder on a read-only file system", "multitask",
     [*TRAIN, "--output-dir", "OUT-ro/run"],
     "error: --output-dir OUT-ro/run: cannot write there (Read-only file system)", 2),
    ("file system", "a run's predictions folder on a read-only file system", "multitask",
     [*TRAIN, "--predictions-dir", "OUT-ro/predictions"],
     "error: --predictions-dir OUT-ro/predictions: cannot write there (Read-only file system)", 2),
    ("file system", "a predictions file on a read-only file system", "predict",
     ["finished-run", "--sst", "a film", "--output", "OUT-ro/out.tsv"],
     "error: --output OUT-ro/out.tsv: cannot write there (Read-only file system)", 2),
    ("file system", "an ensemble's report on a read-only file system", "ensemble",
     ["--members", "finished-run", "--data-dir", "DATA", "--out", "OUT-ro/ensemble.json", "--predictions-dir",
      "OUT/p"], "error: --out OUT-ro/ensemble.json: cannot write there (Read-only file system)", 2),
    ("file system", "an ensemble's predictions folder on a read-only file system", "ensemble",
     ["--members", "finished-run", "--data-dir", "DATA", "--out", "OUT/ensemble.json", "--predictions-dir",
      "OUT-ro/p"], "error: --predictions-dir OUT-ro/p: cannot write there (Read-only file system)", 2),
    ("file system", "a study folder on a read-only file system", "search", [*SEARCH, "--study-dir", "OUT-ro/study"],
     "error: --study-dir OUT-ro/study: cannot write there (Read-only file system)", 2),
    ("file system", "a study's journal on a read-only file system", "search",
     [*SEARCH, "--storage", "OUT-ro/study.journal"],
     "error: --storage OUT-ro/study.journal: cannot write there (Read-only file system)", 2),
    ("file system", "predictions written to a named pipe", "predict", ["finished-run", "--sst", "a film", "--output",
                                                                        "a-pipe"],
     "error: --output a-pipe: a named pipe, not a regular file or folder; give the path of a file or folder to "
     "write", 2),
    ("file system", "an ensemble's report named as its predictions folder", "ensemble",
     ["--members", "finished-run", "--data-dir", "DATA", "--out", "OUT/p", "--predictions-dir", "OUT/p"],
     "error: --out OUT/p: the --predictions-dir itself; give a file for the report, e.g. --out OUT/p/ensemble.json", 2),
    ("file system", "an MLflow tracking store that cannot be written", "multitask", [*TRAIN, "--report-to", "mlflow"],
     "error: --report-to mlflow: cannot write MLflow's tracking store sqlite:///OUT/a-file/mlflow.db (", 2),
    ("file system", "an analysis folder that is a file", "analyze", ["curves", "--runs", "finished-run", "--out", "FILE"],
     "error: --out FILE: a file; give a folder for the files it writes", 2),
    ("file system", "an analysis folder that cannot be written", "analyze",
     ["curves", "--runs", "finished-run", "--out", "FILE/analysis"], "error: --out FILE/analysis: cannot write there",
     2),
    ("file system", "an analysis written over a file of the name it writes, which no command wrote", "analyze",
     ["curves", "--runs", "finished-run", "--out", "users-analysis"],
     "error: --out users-analysis/curves.json: a file no command of ours wrote (no record of the write beside it); "
     "choose another --out, or replace it with --overwrite", 2),
    ("file system", "an analysis written through a link of the name it writes, with --overwrite", "analyze",
     ["curves", "--runs", "finished-run", "--out", "linked-analysis", "--overwrite"],
     "error: --out linked-analysis/curves.json: a symbolic link (to user-folder/notes.txt); a command never writes "
     "through a link: give the path of the file itself", 2),
    ("file system", "silver data written over a file of the name it writes, which no command wrote", "silver",
     [*SILVER, "--out", "users-silver"],
     "error: --out users-silver/sst-silver.csv: a file no command of ours wrote (no record of the write beside it); "
     "choose another --out, or replace it with --overwrite", 2),
    # What a command may remove or replace, what it owns, and weights it never uses (their places: ownership_places)
    ("file system", "--overwrite of a folder holding no run, but the user's best/x.bin, metrics.jsonl, tensorboard/x",
     "multitask", [*TRAIN, "--output-dir", "users-files", "--overwrite"],
     "error: --overwrite: metrics.jsonl, best in users-files were not written by a run (no run_config.json there "
     "records them), and --overwrite removes only what a run wrote; move them out of users-files, or choose another "
     "--output-dir", 2),
    ("file system", "--overwrite of a run whose best/ is a link to a folder of the user's", "multitask",
     [*TRAIN, "--data-dir", "edited-data", "--output-dir", "linked-best", "--overwrite"],
     "error: --overwrite would remove linked-best/best, a symbolic link to user-best; --overwrite never follows a "
     "link out of linked-best, and removed nothing: remove the link yourself, or choose another --output-dir", 2),
    ("file system", "a benchmark's results written to a named pipe", "benchmark",
     ["--model", "MODEL", "--data-dir", "DATA", "--out", "a-pipe", "--device", "cpu"],
     "error: --out a-pipe: a named pipe, not a regular file or folder; give the path of a file or folder to write", 2),
    ("file system", "an empty output folder (the current folder)", "multitask", [*TRAIN, "--output-dir", ""],
     "error: --output-dir '': an empty path, which would be the current folder; give the folder or file to write", 2),
    ("file system", "an empty predictions folder (the current folder)", "multitask", [*TRAIN, "--predictions-dir", ""],
     "error: --predictions-dir '': an empty path, which would be the current folder; give the folder or file to "
     "write", 2),
    ("file system", "an ensemble's report over the report of another ensemble", "ensemble",
     ["--members", "finished-run", "--data-dir", "DATA", "--out", "a-report.json", "--predictions-dir", "OUT/p"],
     "error: --out a-report.json holds the report of an ensemble already (--method mean of runs/a, runs/b); replace "
     "it with --overwrite, or choose another --out", 2),
    ("file system", "a copy of an unfinished run (cp -r) resumed into the original's predictions folder", "multitask",
     ["--output-dir", "copied-run", "--resume", "--allow-changed-data"],
     "error: --resume: copied-run is a copy of the run in finished-run, and would write its --predictions-dir ", 2),
    # Round seven (issue 72): what a command writes, replaces and removes
    ("file system", "a run's output folder on a full disk (its lock's pid does not fit)", "multitask",
     [*TRAIN, "--output-dir", "OUT-full/run"], "error: --output-dir OUT-full/run: cannot write there (No space left "
     "on device)", 2),
    ("file system", "a predictions file on a full disk (its lock's pid does not fit)", "predict",
     ["finished-run", "--sst", "a film", "--output", "OUT-full/p.tsv"],
     "error: --output OUT-full/p.tsv: cannot write there (No space left on device)", 2),
    ("file system", "predictions written over a user's file whose first line starts with id and a tab", "predict",
     ["finished-run", "--sst", "a film", "--output", "id-sentences.tsv"],
     "error: --output id-sentences.tsv: a file no command of ours wrote (no record of the write beside it); choose "
     "another --output, or replace it with --overwrite", 2),
    ("file system", "predictions written over a leaderboard file of another command, with --overwrite", "predict",
     ["finished-run", "--sst", "a film", "--output", "other-leaderboard/sst-dev-output.csv", "--overwrite"],
     "error: --output other-leaderboard/sst-dev-output.csv: a file of the leaderboard files of the ensemble reported "
     "in /elsewhere/ensemble.json (listed in other-leaderboard/written-by.json), which only their writer replaces; "
     "choose another --output", 2),
    ("file system", "predictions written through a symbolic link, with --overwrite", "predict",
     ["finished-run", "--sst", "a film", "--output", "link-to-notes", "--overwrite"],
     "error: --output link-to-notes: a symbolic link (to user-folder/notes.txt); a command never writes through a "
     "link: give the path of the file itself", 2),
    ("file system", "predict stopped by SIGTERM while it writes --output", "predict",
     ["finished-run", "--task", "sst", "--input", "sentences.txt", "--output", "OUT/p.tsv"],
     "interrupted after 0 of 2 predictions: kept no --output OUT/p.tsv; the same command predicts the file again",
     143),
    ("file system", "a benchmark's results over the weights of the model it reads, with --overwrite", "benchmark",
     ["--model", "pretrained-encoder", "--data-dir", "DATA", "--out", "pretrained-encoder/model.safetensors",
      "--overwrite", "--device", "cpu"],
     "error: --out pretrained-encoder/model.safetensors: a file of the checkpoint in pretrained-encoder, which no "
     "command writes over, --overwrite or not; give a new file name", 2),
    ("file system", "a benchmark's results over its own data, with --overwrite", "benchmark",
     ["--model", "MODEL", "--data-dir", "DATA", "--out", "DATA/sts-dev.csv", "--overwrite", "--device", "cpu"],
     "error: --out DATA/sts-dev.csv: inside DATA, the folder --data-dir reads; writing there could replace a file it "
     "reads; choose a place outside it", 2),
    ("file system", "an output folder that holds only a run_config.json of the user's (flags, no run's record)",
     "multitask", [*TRAIN, "--output-dir", "flags-as-run-config"],
     "error: --output-dir flags-as-run-config holds a run_config.json that no run wrote (it records no run's id nor "
     "what the run wrote), which the run would write over, --overwrite or not; move it out of flags-as-run-config, "
     "or choose another --output-dir", 2),
    ("file system", "--overwrite of a folder of the user's notes.txt and run_config.json", "multitask",
     [*TRAIN, "--output-dir", "notes-and-flags", "--overwrite"],
     "error: --output-dir notes-and-flags holds a run_config.json that no run wrote (it records no run's id nor "
     "what the run wrote), which the run would write over, --overwrite or not; move it out of notes-and-flags, or "
     "choose another --output-dir", 2),
    ("file system", "--overwrite of a run whose record names a file outside its folder (an absolute path)",
     "multitask", [*TRAIN, "--data-dir", "edited-data", "--output-dir", "outside-wrote", "--overwrite"],
     "error: --overwrite would remove precious.txt, which lies outside outside-wrote (its run_config.json records it); "
     "--overwrite removes only what lies inside the run folder, and removed nothing: choose another --output-dir", 2),
    ("file system", "--overwrite of a run with a file that cannot be removed (immutable: chattr +i)", "multitask",
     [*TRAIN, "--output-dir", "OUT/kept", "--overwrite"],
     "error: --overwrite cannot remove OUT/kept/best (OUT/kept/best/config.json: Operation not permitted), and removed "
     "nothing: make it removable, or choose another --output-dir", 2),
    ("file system", "the predictions folder moved (mv) while the run trains", "multitask", TRAIN,
     "error: --predictions-dir OUT/predictions was moved to OUT/moved while the command ran; it stopped, and wrote "
     "nothing more where the folder was", 2),
    ("file system", "the predictions folder replaced by a file while the run trains", "multitask", TRAIN,
     "error: --predictions-dir OUT/predictions was removed (or replaced) while the command ran; it stopped, and "
     "wrote nothing more where the folder was", 2),
    ("file system", "the run's metrics.jsonl removed while the run trains (rm -rf of its folder under way)",
     "multitask", [*TRAIN, "--output-dir", "OUT/logged"], "error: --output-dir OUT/logged: metrics.jsonl was removed "
     "while the command ran in it; it stopped, and wrote nothing more", 2),
    ("file system", "--overwrite of a run with a file of the user's put into its best/", "multitask",
     [*TRAIN, "--data-dir", "edited-data", "--output-dir", "mine-in-best", "--overwrite"],
     "error: --overwrite would remove mine-in-best/best/mine.txt, which the run did not write (.written-by.json in "
     "mine-in-best/best, the record of what its save wrote there, does not list it), and removed nothing: move it out "
     "of mine-in-best/best, or choose another --output-dir", 2),
    ("checkpoint", "weights that are not finite (NaN), to predict", "predict", ["nan-run", "--sst", "a film"],
     "error: nan-run/best: weights that are not finite (embeddings.word_embeddings.weight holds NaN or infinity); no "
     "command uses them: take a checkpoint saved before its run diverged", 2),
    ("checkpoint", "weights that are not finite (NaN), given to --init", "multitask",
     [*TRAIN, "--init", "nan-run/best"],
     "error: nan-run/best: weights that are not finite (embeddings.word_embeddings.weight holds NaN or infinity)", 2),
    ("checkpoint", "weights that are not finite (NaN), to analyse", "analyze",
     ["spread", "--models", "nan-run/best", "--data-dir", "DATA", "--out", "OUT/spread"],
     "error: nan-run/best: weights that are not finite (embeddings.word_embeddings.weight holds NaN or infinity)", 2),
    ("checkpoint", "outputs that are not finite (NaN), to ensemble", "ensemble",
     ["--members", "nan-outputs", "--data-dir", "DATA", "--out", "OUT/e.json", "--predictions-dir", "OUT/p"],
     "error: nan-outputs/best/outputs-sst-dev.pt: outputs that are not finite (NaN or infinity), of weights that were "
     "not; take a checkpoint saved before its run diverged", 2),
    ("checkpoint", "a heads tensor of the wrong shape, to predict", "predict", ["wrong-heads", "--sst", "a film"],
     "error: wrong-heads/best/heads.safetensors: heads.sst.mlp.second.1.weight has shape (3, 32), where the head "
     "flags of its run config make it (5, 32); these heads are not the ones their run config describes", 2),
    ("checkpoint", "weights that are not finite (NaN) in last/, on --resume", "multitask",
     [*TRAIN, "--data-dir", "edited-data", "--output-dir", "nan-last", "--resume", "--allow-changed-data"],
     "error: --resume: nan-last/last: weights that are not finite (model.safetensors: "
     "embeddings.word_embeddings.weight), nothing to resume from; the run's last checkpoint whose weights are finite "
     "is nan-last/best", 2),
    # a checkpoint loads exactly, or not at all (the weights: 2 layers)
    ("checkpoint", "a config.json of more layers than its weights (num_hidden_layers 3 of 2), to predict", "predict",
     ["more-layers/best", "--sst", "a film"],
     "error: more-layers/best: its weights do not match its config.json: 16 encoder tensor(s) missing "
     "(encoder.layer.2.attention.output.LayerNorm.bias, encoder.layer.2.attention.output.LayerNorm.weight, "
     "encoder.layer.2.attention.output.dense.bias and 13 more); correct config.json (num_hidden_layers, ...), or pass "
     "--allow-partial-load to load what matches and leave the rest at random initial values", 2),
    ("checkpoint", "a config.json of fewer layers than its weights (num_hidden_layers 1 of 2), given to --init",
     "multitask", [*TRAIN, "--init", "fewer-layers/best"],
     "error: fewer-layers/best: its weights do not match its config.json: 16 tensor(s) the encoder does not use "
     "(encoder.layer.1.attention.output.LayerNorm.bias, ", 2),
    ("checkpoint", "a config.json of more layers than its weights, to benchmark", "benchmark",
     ["--model", "more-layers/best", "--data-dir", "DATA", "--device", "cpu"],
     "error: more-layers/best: its weights do not match its config.json: 16 encoder tensor(s) missing", 2),
    ("checkpoint", "a config.json of fewer layers than its weights, to analyse", "analyze",
     ["spread", "--models", "fewer-layers/best", "--data-dir", "DATA", "--out", "OUT/spread"],
     "error: fewer-layers/best: its weights do not match its config.json: 16 tensor(s) the encoder does not use", 2),
    ("checkpoint", "a config.json of more layers than its weights in last/, on --resume", "multitask",
     [*TRAIN, "--data-dir", "edited-data", "--output-dir", "layers-in-last", "--resume", "--allow-changed-data"],
     "error: layers-in-last/last: its weights do not match its config.json: 16 encoder tensor(s) missing", 2),
    ("checkpoint", "a BERT folder relabelled roberta (config.json's model_type edited)", "multitask",
     [*TRAIN, "--model", "as-roberta"],
     "error: as-roberta/config.json: model_type is 'roberta', but the weights were saved by BertModel "
     "(architectures), a bert model; set model_type to 'bert'", 2),
    ("checkpoint", "a BERT folder relabelled mpnet, its architectures removed", "multitask",
     [*TRAIN, "--model", "as-mpnet"],
     "error: as-mpnet: config.json says model_type 'mpnet', but its weights have no relative position bias "
     "(encoder.relative_attention_bias.weight), which every MPNet has: they are another family's", 2),
    ("flag", "--max-length beyond an MPNet model's positions (counted after its offset)", "multitask",
     [*TRAIN, "--model", "tiny-mpnet", "--max-length", "129"],
     "error: --max-length 129: this model has 128 positions; use --max-length 128 or less", 2),
    ("checkpoint", "heads that are not finite (NaN), to predict", "predict", ["nan-heads/best", "--sst", "a film"],
     "error: nan-heads/best/heads.safetensors: weights that are not finite (heads.sst.mlp.second.1.weight holds NaN "
     "or infinity)", 2),
    ("checkpoint", "heads that are not finite (NaN), given to --init", "multitask",
     [*TRAIN, "--init", "nan-heads/best"],
     "error: nan-heads/best/heads.safetensors: weights that are not finite (heads.sst.mlp.second.1.weight holds NaN "
     "or infinity)", 2),
    ("checkpoint", "heads that are not finite (NaN) in last/, on --resume", "multitask",
     [*TRAIN, "--data-dir", "edited-data", "--output-dir", "last-heads-nan", "--resume", "--allow-changed-data"],
     "error: --resume: last-heads-nan/last: weights that are not finite (heads.safetensors: "
     "heads.sst.mlp.second.1.weight), nothing to resume from", 2),
    ("checkpoint", "weights that are infinite (not NaN), to predict", "predict", ["inf-run", "--sst", "a film"],
     "error: inf-run/best: weights that are not finite (embeddings.word_embeddings.weight holds NaN or infinity)", 2),
    ("flag", "int8 with tf32, to predict", "predict",
     ["finished-run", "--sst", "a film", "--quantize", "int8", "--precision", "tf32"],
     "error: --quantize int8 computes in int8 and fp32, not with --precision tf32; leave out one of them", 2),
    ("flag", "int8 with tf32, to benchmark", "benchmark",
     ["--model", "MODEL", "--data-dir", "DATA", "--device", "cpu", "--quantize", "int8", "--precision", "tf32"],
     "error: --quantize int8 computes in int8 and fp32, not with --precision tf32; leave out one of them", 2),
]
COMMANDS["benchmark"], SCRIPTS["benchmark"] = benchmark, "minbert benchmark"


def disk_full(monkeypatch, out):
    """Every weights file a checkpoint writes finds no space left: the error safetensors raises on a full disk."""
    from safetensors import SafetensorError

    def no_space(*args, **kwargs):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr("minbert.models.checkpoint.save_file", no_space)


def no_compiler(monkeypatch, out):
    """torch.compile fails at the first call, as a missing C compiler makes it."""
    def compile_(function, **options):
        def compiled(*args):
            raise RuntimeError("g++: not found")
        return compiled

    monkeypatch.setattr("minbert.models.compile.torch.compile", compile_)


def folder_in_use(monkeypatch, out):
    """Another command (pid 4242) holds OUT/run: its lock, taken as a run takes it (an open file of the folder's,
    locked with flock, its pid in it). Returns what ends it."""
    import fcntl

    (out / "run").mkdir()
    holder = open(out / "run" / ".lock", "w")
    fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    holder.write("4242\n")
    holder.flush()
    return holder.close


def unwritable_mlflow_store(monkeypatch, out):
    """$MLFLOW_TRACKING_URI names a database inside a file, where no database can be made."""
    (out / "a-file").write_text("a file, not a folder")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{out}/a-file/mlflow.db")


def read_only_folder(monkeypatch, out):
    """OUT-ro, a folder on a read-only file system: whatever creates, writes, renames or removes anything inside it
    fails as the kernel fails it there (OSError EROFS), at the calls every write goes through. tests/test_read_only.py
    runs the commands on a folder mounted read-only, where the machine allows it."""
    import builtins
    import errno
    import io

    read_only = Path(f"{out}-ro")
    read_only.mkdir()

    def inside(path) -> bool:
        try:
            return Path(os.fsdecode(path)).resolve().is_relative_to(read_only.resolve())
        except TypeError:  # an open file's number
            return False

    def guarded(call, writes=lambda *args, **kwargs: True):
        def call_(path, *args, **kwargs):
            if inside(path) and writes(path, *args, **kwargs):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(path))
            return call(path, *args, **kwargs)
        return call_

    writing = "wax+"
    monkeypatch.setattr(os, "open", guarded(os.open, lambda path, flags, *args, **kwargs: bool(
        flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC))))
    monkeypatch.setattr(os, "mkdir", guarded(os.mkdir, lambda path, *args, **kwargs: not os.path.exists(path)))
    for name in ("rename", "replace", "unlink", "remove", "rmdir"):
        monkeypatch.setattr(os, name, guarded(getattr(os, name)))
    for module in (builtins, io):
        monkeypatch.setattr(module, "open", guarded(io.open, lambda path, mode="r", *args, **kwargs: any(
            letter in mode for letter in writing)))


def full_disk_error(*args, **kwargs):
    """What safetensors raises on a full disk."""
    from safetensors import SafetensorError

    raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")


def full_disk_at_the_bank_cache(monkeypatch, out):
    """The bank's embeddings find no space left as the first chunk of them is written."""
    monkeypatch.setattr("minbert.data.retrieval.save_file", full_disk_error)


def full_disk_at_the_study(monkeypatch, out):
    """The disk fills up as SQLite makes the study's database: the file is made, 0 bytes, and its tables find no
    room (the error sqlite3 raises then, through SQLAlchemy)."""
    import sqlite3

    import optuna
    import sqlalchemy.exc

    def database(url, **kwargs):
        Path(url.removeprefix("sqlite:///")).touch()
        raise sqlalchemy.exc.OperationalError("CREATE TABLE", {}, sqlite3.OperationalError("database or disk is full"))

    monkeypatch.setattr(optuna.storages, "RDBStorage", database)


def full_disk_at_the_event_file(monkeypatch, out):
    """The disk fills up as TensorBoard's event file is first written: the file is made, its bytes find no room."""
    import errno

    from tensorboard.compat.tensorflow_stub.io import gfile

    def write(self, filename, content, mode):
        open(filename, "ab").close()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), filename)

    monkeypatch.setattr(gfile.LocalFileSystem, "_write", write)


def sigterm_while_predicting(monkeypatch, out):
    """SIGTERM (kill, a batch job's end) arrives as the first chunk is predicted: a real signal."""
    import signal
    import time

    def predictions(self, task, examples):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)  # the handler runs before this ends

    monkeypatch.setattr("minbert.predictor.MultitaskPredictor.predictions", predictions)


def undeletable_file_in_a_run(monkeypatch, out):
    """OUT/kept: a run's folder whose best/config.json no process may remove, root included (chattr +i); skipped,
    saying why, where the attribute cannot be set. Returns what takes the attribute back."""
    import subprocess
    import uuid

    for name in ("metrics.jsonl", "best/model.safetensors", "best/config.json"):
        (out / "kept" / name).parent.mkdir(parents=True, exist_ok=True)
        (out / "kept" / name).write_text(name)
    (out / "kept" / "run_config.json").write_text(json.dumps({"provenance": {"run_id": uuid.uuid4().hex},
                                                              "wrote": ["metrics.jsonl", "best"]}))
    config = out / "kept" / "best" / "config.json"
    made = subprocess.run(["chattr", "+i", str(config)], capture_output=True, text=True)
    if made.returncode:
        pytest.skip(f"cannot make a file immutable here (chattr +i: {made.stderr.strip() or 'failed'})")
    return lambda: subprocess.run(["chattr", "-i", str(config)], check=True)


def at_a_log_line(change, line: int = 1):
    """A fault: `change(out)` done once, as the run appends line `line` to metrics.jsonl (while it trains)."""
    def fault(monkeypatch, out):
        from minbert.common.run_folder import RunFolder

        append, lines = RunFolder.append_record, []

        def changed_there(self, record):
            lines.append(record)
            if len(lines) == line:
                change(out)
            return append(self, record)

        monkeypatch.setattr(RunFolder, "append_record", changed_there)
    return fault


def replaced_by_a_file(folder: Path) -> None:
    shutil.rmtree(folder)
    folder.write_text("the user's")


def real_full_disk(monkeypatch, out):
    """OUT-full: a real file system with no space left (tests/conftest.py's full_file_system)."""
    return full_file_system(Path(f"{out}-full"))


def mlflow_store_in(uri: str):
    """A fault: $MLFLOW_TRACKING_URI set to uri (OUT in it the case's output folder)."""
    return lambda monkeypatch, out: monkeypatch.setenv("MLFLOW_TRACKING_URI", uri.replace("OUT", str(out)))


def read_only_mlflow_store(monkeypatch, out):
    read_only_folder(monkeypatch, out)
    mlflow_store_in("sqlite:///OUT-ro/mlflow.db")(monkeypatch, out)


def a_file_as_the_mlflow_store(monkeypatch, out):
    (out / "notes.txt").write_text("the user's notes")
    mlflow_store_in("OUT/notes.txt")(monkeypatch, out)


def full_disk_at_the_mlflow_store(monkeypatch, out):
    """The disk fills up as MLflow makes its database: the file is made, 0 bytes, and its tables find no room."""
    import sqlite3

    import sqlalchemy.exc

    mlflow_store_in("sqlite:///OUT/mlflow.db")(monkeypatch, out)

    def client():
        (out / "mlflow.db").touch()
        raise sqlalchemy.exc.OperationalError("CREATE TABLE", {}, sqlite3.OperationalError("database or disk is full"))

    monkeypatch.setattr("mlflow.MlflowClient", client)


FAULTS = {"an MLflow tracking store that cannot be written": unwritable_mlflow_store,
          "the disk fills up while a checkpoint is saved": disk_full,
          "--compile where torch cannot compile": no_compiler,
          "an output folder another command is writing": folder_in_use,
          **dict.fromkeys(["a run's output folder on a read-only file system",
                           "a run's predictions folder on a read-only file system",
                           "a predictions file on a read-only file system",
                           "an ensemble's report on a read-only file system",
                           "an ensemble's predictions folder on a read-only file system",
                           "a study folder on a read-only file system",
                           "a study's journal on a read-only file system",
                           "a bank cache folder on a read-only file system"], read_only_folder),
          "the disk fills up as the bank's embeddings are cached": full_disk_at_the_bank_cache,
          "the disk is full as the study's database is made": full_disk_at_the_study,
          "the disk is full as the TensorBoard file is begun": full_disk_at_the_event_file,
          "an MLflow tracking store on a read-only file system": read_only_mlflow_store,
          "an MLflow tracking store that is a file, not a database": a_file_as_the_mlflow_store,
          "the disk is full as the MLflow database is made": full_disk_at_the_mlflow_store,
          **dict.fromkeys(["a run's output folder on a full disk (its lock's pid does not fit)",
                           "a predictions file on a full disk (its lock's pid does not fit)"], real_full_disk),
          "predict stopped by SIGTERM while it writes --output": sigterm_while_predicting,
          "--overwrite of a run with a file that cannot be removed (immutable: chattr +i)": undeletable_file_in_a_run,
          "the predictions folder moved (mv) while the run trains": at_a_log_line(
              lambda out: os.rename(out / "predictions", out / "moved")),
          "the predictions folder replaced by a file while the run trains": at_a_log_line(
              lambda out: replaced_by_a_file(out / "predictions")),
          "the run's metrics.jsonl removed while the run trains (rm -rf of its folder under way)":
              at_a_log_line(lambda out: (out / "logged" / "metrics.jsonl").unlink(), line=2)}
# What a case's command may have begun and must not leave behind (besides a trained run, and a search's anything).
LEFT_NOTHING = {"the disk fills up as the bank's embeddings are cached": ["OUT/cache", "OUT/silver"],
                "the disk is full as the TensorBoard file is begun": ["OUT/tb"],
                "the disk is full as the MLflow database is made": ["OUT/mlflow.db"],
                "predict stopped by SIGTERM while it writes --output": ["OUT/p.tsv", "OUT/.p.tsv.lock"]}


@pytest.fixture(scope="module")
def places(tiny_model, tiny_mpnet, tmp_path_factory) -> dict[str, Path]:
    """The folders and files the cases name, each broken the way its case says."""
    from tests.conftest import write_course_files

    root = tmp_path_factory.mktemp("bad")
    (root / "data").mkdir()
    data = write_course_files(root / "data", random.Random(0), train_rows=16)
    places = {"MODEL": tiny_model, "DATA": data}

    def model_copy(name: str) -> Path:
        return Path(shutil.copytree(tiny_model, root / name))

    (model_copy("broken-config") / "config.json").write_text("{not json")
    (model_copy("gpt2-config") / "config.json").write_text('{"model_type": "gpt2"}')
    weights = model_copy("truncated-weights") / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    heads = model_copy("truncated-heads")
    (heads / checkpoint.HEADS).write_bytes(b"\x00" * 20)
    (heads / "run_config.json").write_text(json.dumps(MultitaskConfig(model=str(tiny_model)).to_dict()))
    state = Path(shutil.copytree(tiny_model, root / "truncated-state" / "last"))  # last/ complete but for the state
    (state / "training_state.pt").write_bytes(b"PK\x03\x04 cut short")
    outputs = root / "truncated-outputs"
    outputs.mkdir()
    for split in ("dev", "test"):
        (outputs / f"outputs-sst-{split}.pt").write_bytes(b"\x80\x02 cut")
    (root / "empty.txt").write_text("")

    def test_file_copy(name: str, line: int, text: str) -> Path:
        """The data with line `line` (1-based) of ids-sst-test-student.csv replaced by `text`."""
        folder = Path(shutil.copytree(data, root / name))
        lines = (folder / "ids-sst-test-student.csv").read_text().splitlines()
        lines[line - 1] = text
        (folder / "ids-sst-test-student.csv").write_text("\n".join(lines) + "\n")
        return folder

    test_file_copy("bad-test-row", 3, "1\tonly-an-id")
    test_file_copy("empty-id", 3, "1\t\ta sentence")
    test_file_copy("repeated-id", 5, "3\tids-sst-test-student-2\ta sentence with the id of line 4")
    constant = Path(shutil.copytree(data, root / "constant-sts")) / "sts-dev.csv"
    lines = constant.read_text().splitlines()
    constant.write_text("\n".join([lines[0]] + [line.rsplit("\t", 1)[0] + "\t2.5" for line in lines[1:]]) + "\n")
    (root / "no-value.yaml").write_text("epochs:\n")
    (root / "dup-key.yaml").write_text("epochs: 1\nseed: 3\nepochs: 2\n")
    (root / "resume-flags.yaml").write_text("epochs: 1\nresume: true\n")
    # A search's recipe of tiny runs, its spaces (one of values that cannot run each), and a study of one trial.
    (root / "recipe.yaml").write_text(f"model: {tiny_model}\ndata-dir: {data}\ndevice: cpu\nbatch-size: 8\n"
                                      f"epochs: 1\n")
    spaces = {"lr-space.yaml": "lr: [1.0e-3]\n", "gpu-space.yaml": "device: [cpu, cuda]\n",
              "fp16-space.yaml": "precision: [fp32, fp16]\n", "model-space.yaml": "model: [./nowhere]\n",
              "data-space.yaml": f"data-dir: [{root / 'no-data'}]\n", "tokens-space.yaml": "max-tokens: [10]\n",
              "tasks-space.yaml": "tasks: [sst]\n", "empty-space.yaml": "lr:\n"}
    for name, text in spaces.items():
        (root / name).write_text(text)
        places[name] = root / name
    places |= {"recipe.yaml": root / "recipe.yaml", "no-data": root / "no-data"}
    (root / "nul-space.yaml").write_bytes(b"lr: [1.0e-3]\x00\n")
    places["nul-space.yaml"] = root / "nul-space.yaml"
    (root / "commas.csv").write_text("id,sentence\n1,a fine film\n")
    places["commas.csv"] = root / "commas.csv"
    os.mkfifo(root / "a-pipe")
    places["a-pipe"] = root / "a-pipe"
    # A device, through a link of the test's own: were it written over, the link would go, never the device (a
    # test run as root that wrote over /dev/full itself replaced the machine's device with a file of predictions).
    places["a-device"] = root / "a-device"
    places["a-device"].symlink_to(os.devnull)
    (root / "cut.journal").write_text('{"op_code": 0, "worker_id": "w", "study_name": "s", "directions": [1]}\n{"op_')
    places["cut.journal"] = root / "cut.journal"
    (root / "binary.gz").write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xcbH\xcd\xc9\xc9\x07\x00")
    # A Contrastive Tension run's folder: its run config, and its two encoders in model1/ and model2/.
    contrastive = ContrastiveConfig(model=str(tiny_model), method="ct").to_dict()
    (root / "ct-run").mkdir()
    (root / "ct-run" / "run_config.json").write_text(json.dumps(contrastive))
    for name in ("model1", "model2"):
        (model_copy(f"ct-run/{name}") / "run_config.json").write_text(json.dumps(contrastive))
    (root / "list-config" / "last").mkdir(parents=True)
    (root / "list-config" / "last" / "training_state.pt").write_bytes(b"a state")
    (root / "list-config" / "last" / "run_config.json").write_text("[]")
    # A sentence that opens a double quote, and one four lines below that closes it: csv alone reads lines 4 to 8 as
    # one row, and 10 ids would get 6 predictions.
    quoted = test_file_copy("open-quote", 4, '2\tids-sst-test-student-2\t"a sentence opening a quote')
    lines = (quoted / "ids-sst-test-student.csv").read_text().splitlines()
    lines[7] += ' and " another'
    (quoted / "ids-sst-test-student.csv").write_text("\n".join(lines) + "\n")
    (root / "FILE").write_text("a file, not a folder")
    (root / "user-folder").mkdir()
    (root / "user-folder" / "notes.txt").write_text("the user's, not a run's")
    encoder_only = model_copy("pretrained-encoder")
    (encoder_only / "run_config.json").write_text(json.dumps(ContrastiveConfig(model=str(tiny_model)).to_dict()))
    for name in ("broken-config", "gpt2-config", "truncated-weights", "truncated-heads", "truncated-state",
                 "truncated-outputs", "empty.txt", "bad-test-row", "empty-id", "open-quote", "FILE", "user-folder",
                 "repeated-id", "constant-sts", "no-value.yaml", "dup-key.yaml",
                 "resume-flags.yaml", "binary.gz", "ct-run", "list-config"):
        places[name] = root / name
    # The interrupted run's flags, so that --resume gets as far as reading its training state.
    resumed = [substitute(arg, places, root) for arg in last_wins([*TRAIN, "--output-dir", "truncated-state"])]
    (state / "run_config.json").write_text(json.dumps(cli.parse_config(MultitaskConfig, "", resumed).to_dict()))
    # A finished run, and then a change to a file it trained on.
    places |= {"edited-data": Path(shutil.copytree(data, root / "edited-data")), "pretrained-encoder": encoder_only,
               "finished-run": root / "finished-run"}
    multitask_classifier.main([substitute(arg, places, root / "finished")
                               for arg in last_wins([*TRAIN, "--data-dir", "edited-data", "--output-dir",
                                                     "finished-run"])])
    with open(places["edited-data"] / "ids-sst-train.csv", "a") as f:
        f.write("99\tadded-later\ta sentence added after the run\t2\n")
    # What a run started with --overwrite recorded before such flags were kept out of run configs.
    recorded = json.loads((places["finished-run"] / "run_config.json").read_text())
    places["overwrite-config.json"] = root / "overwrite-config.json"
    places["overwrite-config.json"].write_text(json.dumps({**recorded, "overwrite": True}))
    places["old-study"] = root / "old-study"
    search.main([substitute(arg, places, root) for arg in last_wins([*SEARCH, "--study-dir", "old-study"])])
    places["link-to-run"] = root / "link-to-run"
    places["link-to-run"].symlink_to(places["finished-run"])
    places["init-run"] = Path(shutil.copytree(places["finished-run"], root / "init-run"))
    # A run that diverged before its first evaluation (its run config and log only), and one caught between the
    # two renames of a save of best/ (.best.old, no best/).
    places["no-checkpoint"] = root / "no-checkpoint"
    places["no-checkpoint"].mkdir()
    shutil.copy(places["finished-run"] / "metrics.jsonl", places["no-checkpoint"] / "metrics.jsonl")
    saved = json.loads((places["finished-run"] / "run_config.json").read_text())
    (places["no-checkpoint"] / "run_config.json").write_text(
        json.dumps({k: v for k, v in saved.items() if k != "finished"}))
    places["mid-save"] = Path(shutil.copytree(places["finished-run"], root / "mid-save"))
    (places["mid-save"] / "best").rename(places["mid-save"] / ".best.old")
    # Interrupted copies of the finished run (its command did not end): a note of the user's as the first line of
    # its log; its training state without the optimizer; a training state whose last evaluation is another run's.
    for name in ("user-note", "no-optimizer", "other-state"):
        places[name] = Path(shutil.copytree(places["finished-run"], root / name))
        saved = json.loads((places[name] / "run_config.json").read_text())
        (places[name] / "run_config.json").write_text(json.dumps({k: v for k, v in saved.items() if k != "finished"}))
    log = places["user-note"] / "metrics.jsonl"
    log.write_text("lr 1e-3 looked better than 1e-4\n" + log.read_text())
    places["step-note"] = Path(shutil.copytree(places["user-note"], root / "step-note"))
    log = places["step-note"] / "metrics.jsonl"
    log.write_text('{"step": 9, "note": "lr 1e-3 looked better"}\n' + log.read_text().split("\n", 1)[1])
    state = torch.load(places["no-optimizer"] / "last" / "training_state.pt", weights_only=True)
    torch.save({k: v for k, v in state.items() if k != "optimizer"}, places["no-optimizer"] / "last" / "training_state.pt")
    evaluation = state["engine"]["last_record"]
    state["engine"]["last_record"] = {**evaluation, "dev": {task: 0.5 for task in evaluation["dev"]}}
    torch.save(state, places["other-state"] / "last" / "training_state.pt")
    places["pickled-state"] = Path(shutil.copytree(places["no-optimizer"], root / "pickled-state"))
    torch.save({"engine": argparse.Namespace(step=1)}, places["pickled-state"] / "last" / "training_state.pt")
    # The interrupted run's training state replaced by one another run saved before its first evaluation.
    places["early-state"] = Path(shutil.copytree(places["no-optimizer"], root / "early-state"))
    state["engine"]["last_record"], state["run_id"] = None, "another-run"
    torch.save(state, places["early-state"] / "last" / "training_state.pt")
    # Leaderboard folders: another ensemble's, and one of files no command recorded.
    places["other-leaderboard"] = root / "other-leaderboard"
    places["other-leaderboard"].mkdir()
    (places["other-leaderboard"] / "sst-dev-output.csv").write_text("id \t Predicted_Sentiment \n")
    (places["other-leaderboard"] / "written-by.json").write_text(json.dumps(
        {"written_by": "the ensemble reported in /elsewhere/ensemble.json", "files": {"sst-dev-output.csv": "-"}}))
    places["unrecorded"] = root / "unrecorded"
    places["unrecorded"].mkdir()
    (places["unrecorded"] / "para-dev-output.csv").write_text("id \t Predicted_Is_Paraphrase \n")
    places["sentences.txt"] = root / "sentences.txt"
    places["sentences.txt"].write_text("a red car\nthe big dog\n")
    # The finished run as a run from before --pair-mlp existed saved it.
    places["old-run"] = Path(shutil.copytree(places["finished-run"], root / "old-run"))
    saved = json.loads((places["old-run"] / "best" / "run_config.json").read_text())
    (places["old-run"] / "best" / "run_config.json").write_text(json.dumps(
        {name: value for name, value in saved.items() if name != "pair_mlp"}))
    # The finished run as a kill after its last checkpoint leaves it (its command did not end), a line of its log
    # then overwritten with bytes that are not UTF-8.
    places["bad-log"] = Path(shutil.copytree(places["finished-run"], root / "bad-log"))
    saved = json.loads((places["bad-log"] / "run_config.json").read_text())
    (places["bad-log"] / "run_config.json").write_text(json.dumps({k: v for k, v in saved.items() if k != "finished"}))
    with open(places["bad-log"] / "metrics.jsonl", "ab") as f:
        f.write(b'{"event": "train", "step": 1, "loss": {"sst": \xff\xfe}}\n')
    # The finished run as a kill before its first save leaves it: its run config and metrics log, no checkpoint.
    places["killed-run"] = root / "killed-run"
    places["killed-run"].mkdir()
    unfinished = {k: v for k, v in saved.items() if k != "finished"}
    (places["killed-run"] / "run_config.json").write_text(json.dumps(unfinished))
    shutil.copy(places["finished-run"] / "metrics.jsonl", places["killed-run"])
    # Round six, second half (issue 62): a config file in Latin-1, one with a list for a flag of one value, a bank,
    # and a finished run whose best/ lost its run config.
    places["latin1.yaml"] = root / "latin1.yaml"
    places["latin1.yaml"].write_bytes("epochs: 1\nlr: caf\u00e9\n".encode("latin-1"))
    places["lr-list.yaml"] = root / "lr-list.yaml"
    places["lr-list.yaml"].write_text("lr: [0.001, 0.002]\n")
    places["bank.txt"] = root / "bank.txt"
    places["bank.txt"].write_text("\n".join(f"a {colour} house on the hill" for colour in ("red", "green", "blue"))
                                  + "\n")
    places["no-best-config"] = Path(shutil.copytree(places["finished-run"], root / "no-best-config"))
    (places["no-best-config"] / "best" / "run_config.json").unlink()
    ownership_places(root, places)
    loading_places(root, places, tiny_mpnet)
    return places


def ownership_places(root: Path, places: dict[str, Path]) -> None:
    """The places of the cases of what a command removes, owns and loads: a folder of the user's files that no run
    wrote; copies of the finished run: its best/ a link to the user's folder, its weights or outputs not finite, a
    head of the wrong shape, unfinished (copied-run: it finds its original where its run config says it started)."""
    from safetensors.torch import load_file, save_file

    def copy(name: str, unfinished: bool = False) -> Path:
        places[name] = Path(shutil.copytree(places["finished-run"], root / name))
        if unfinished:
            saved = json.loads((places[name] / "run_config.json").read_text())
            (places[name] / "run_config.json").write_text(json.dumps({k: v for k, v in saved.items()
                                                                      if k != "finished"}))
        return places[name]

    def changed_tensor(file: Path, name: str, value: torch.Tensor | None = None) -> None:
        """The tensor `name` of a weights file replaced by `value` (None: itself with a NaN in its first row)."""
        tensors = load_file(file)
        if value is None:
            value = tensors[name].clone()
            value[0] = float("nan")
        tensors[name] = value
        save_file(tensors, file)

    places["users-files"] = root / "users-files"
    for name, text in (("best/x.bin", "my weights"), ("metrics.jsonl", "my notes\n"), ("tensorboard/x", "my events")):
        (places["users-files"] / name).parent.mkdir(parents=True, exist_ok=True)
        (places["users-files"] / name).write_text(text)
    places["user-best"] = root / "user-best"
    places["user-best"].mkdir()
    (places["user-best"] / "mine.txt").write_text("the user's")
    shutil.rmtree(copy("linked-best") / "best")
    (places["linked-best"] / "best").symlink_to(places["user-best"])
    for name, checkpoint_folder in (("nan-run", "best"), ("nan-last", "last")):
        changed_tensor(copy(name, unfinished=name == "nan-last") / checkpoint_folder / "model.safetensors",
                       "embeddings.word_embeddings.weight")
    changed_tensor(copy("wrong-heads") / "best" / "heads.safetensors", "heads.sst.mlp.second.1.weight",
                   torch.zeros(3, 32))
    outputs = copy("nan-outputs") / "best" / "outputs-sst-dev.pt"
    saved = torch.load(outputs, weights_only=True)
    torch.save({**saved, "outputs": torch.full_like(saved["outputs"], float("nan"))}, outputs)
    copy("copied-run", unfinished=True)
    places["a-report.json"] = root / "a-report.json"
    with write_output(places["a-report.json"], "ensemble.py") as temp:  # as ensemble.py writes it, with its record
        temp.write_text(json.dumps({"method": "mean", "members": {"runs/a": {}, "runs/b": {}}, "ensemble": {},
                                    "weights": {}}))
    places["id-sentences.tsv"] = root / "id-sentences.tsv"  # a user's file, with a first line as predict.py writes
    places["id-sentences.tsv"].write_text("id\tsentence\n1\ta gorgeous film\n")
    for name, files in (("flags-as-run-config", ["run_config.json"]), ("notes-and-flags", ["run_config.json",
                                                                                       "notes.txt"])):
        places[name] = root / name  # a user's flags kept as run_config.json: no run's record in it
        places[name].mkdir()
        for file in files:
            (places[name] / file).write_text('{"epochs": 1, "lr": 0.001}' if file.endswith(".json") else "notes")
    places["precious.txt"] = root / "precious.txt"
    places["precious.txt"].write_text("the user's, outside any run")
    saved = json.loads((copy("outside-wrote") / "run_config.json").read_text())
    (places["outside-wrote"] / "run_config.json").write_text(json.dumps({
        **saved, "wrote": [str(places["precious.txt"]), *saved["wrote"]]}))  # hand-edited, or copied
    (copy("mine-in-best") / "best" / "mine.txt").write_text("the user's, put into best/ after the run saved it")
    places["link-to-notes"] = root / "link-to-notes"
    places["link-to-notes"].symlink_to(places["user-folder"] / "notes.txt")
    # Folders of --out holding a user's file of a name that analyze and silver write, and a link of such a name.
    for name, file in (("users-analysis", "curves.json"), ("users-silver", "sst-silver.csv"),
                       ("linked-analysis", "curves.json")):
        places[name] = root / name
        places[name].mkdir()
        if name.startswith("linked"):
            (places[name] / file).symlink_to(places["user-folder"] / "notes.txt")
        else:
            (places[name] / file).write_text("the user's, not a command's")


def loading_places(root: Path, places: dict[str, Path], tiny_mpnet: Path) -> None:
    """The places of the cases of what loads: copies of the finished run whose config.json says more or fewer layers
    than the weights have (in best/, or in last/ of an unfinished one), whose heads or weights are not finite (NaN,
    inf); the tiny model relabelled (roberta; mpnet without its architectures); a tiny MPNet."""
    from safetensors.torch import load_file, save_file

    def copy(name: str, unfinished: bool = False) -> Path:
        places[name] = Path(shutil.copytree(places["finished-run"], root / name))
        if unfinished:
            saved = json.loads((places[name] / "run_config.json").read_text())
            (places[name] / "run_config.json").write_text(json.dumps({k: v for k, v in saved.items()
                                                                      if k != "finished"}))
        return places[name]

    def edited_json(file: Path, **values) -> None:
        """The JSON object in `file` with these keys set (None: removed)."""
        saved = {**json.loads(file.read_text()), **values}
        file.write_text(json.dumps({k: v for k, v in saved.items() if k not in values or v is not None}))

    def with_value(file: Path, name: str, value: float) -> None:
        tensors = load_file(file)
        tensors[name][0] = value
        save_file(tensors, file)

    edited_json(copy("more-layers") / "best" / "config.json", num_hidden_layers=3)
    edited_json(copy("fewer-layers") / "best" / "config.json", num_hidden_layers=1)
    edited_json(copy("layers-in-last", unfinished=True) / "last" / "config.json", num_hidden_layers=3)
    with_value(copy("nan-heads") / "best" / "heads.safetensors", "heads.sst.mlp.second.1.weight", float("nan"))
    with_value(copy("last-heads-nan", unfinished=True) / "last" / "heads.safetensors",
               "heads.sst.mlp.second.1.weight", float("nan"))
    with_value(copy("inf-run") / "best" / "model.safetensors", "embeddings.word_embeddings.weight", float("inf"))
    for family in ("roberta", "mpnet"):
        places[f"as-{family}"] = Path(shutil.copytree(places["MODEL"], root / f"as-{family}"))
        edited_json(places[f"as-{family}"] / "config.json", model_type=family,
                    architectures=None if family == "mpnet" else ["BertModel"])
    places["tiny-mpnet"] = tiny_mpnet


def substitute(text: str, places: dict[str, Path], out: Path) -> str:
    """A case's text with its places' names, OUT and the setup's interpreter (.venv/bin/python, as the messages name
    the interpreter that runs, after the OMP_NUM_THREADS it runs with) as they are in this test."""
    for name in sorted(places, key=len, reverse=True):
        text = text.replace(name, str(places[name]))
    return text.replace("OUT", str(out)).replace(".venv/bin/python", printed_command([shown_path(sys.executable)]))


@pytest.mark.parametrize("kind, wrong, command, args, message, code", CASES, ids=[case[1] for case in CASES])
def test_bad_input_gets_one_line_and_its_exit_code(places, tmp_path, capsys, monkeypatch, request, kind, wrong,
                                                   command, args, message, code):
    if any(args[:len(flags)] == flags for flags in (TRAIN, SEARCH, SILVER)):  # a case's own flags replace these
        args = last_wins(args)
    argv = [substitute(arg, places, tmp_path) for arg in args]
    if wrong in FAULTS:
        end = FAULTS[wrong](monkeypatch, tmp_path)
        if end:
            request.addfinalizer(end)
    with pytest.raises(SystemExit) as exit_:
        cli.run(lambda: COMMANDS[command].main(argv))
    assert exit_.value.code == code
    error = capsys.readouterr().err
    assert "Traceback" not in error
    last = error.strip().splitlines()[-1]
    expected = substitute(message, places, tmp_path)
    assert expected in last, f"{last!r} does not hold {expected!r}"
    assert not (tmp_path / "run" / "last").exists(), "nothing was trained"
    if command == "search":
        assert not any(tmp_path.rglob("*")), "a refused search leaves nothing behind"
    for path in LEFT_NOTHING.get(wrong, []):
        assert not Path(substitute(path, places, tmp_path)).exists(), f"{path} is left behind"


# Each "use X" of a message above, run: (the case, X as arguments of its command). A step of training is enough to
# see the advice work.
ADVICE = [
    ("an encoder-only checkpoint (pretrain_contrastive.py's), to predict",
     ["--init", "pretrained-encoder", "--output-dir", "OUT/tuned"]),
    ("a Contrastive Tension run folder (model1/, model2/), to predict",
     ["--init", "ct-run/model2", "--output-dir", "OUT/tuned"]),
    ("a run folder given to --init", ["--init", "finished-run/best", "--output-dir", "OUT/tuned"]),
    ("a Contrastive Tension output (model1/, model2/) given to --init",
     ["--init", "ct-run/model1", "--output-dir", "OUT/tuned"]),
]


@pytest.mark.parametrize("wrong, advice", ADVICE, ids=[case for case, _ in ADVICE])
def test_the_advice_of_a_message_works(places, tmp_path, wrong, advice):
    assert any(case[1] == wrong and " ".join(advice[:2]) in case[4] for case in CASES), "the case gives this advice"
    args = last_wins([*TRAIN, "--data-dir", "edited-data", "--max-steps", "1", *advice])
    multitask_classifier.main([substitute(arg, places, tmp_path) for arg in args])
    output_dir = Path(substitute(args[args.index("--output-dir") + 1], places, tmp_path))
    assert (output_dir / "best" / "model.safetensors").is_file()


def test_a_partial_load_the_user_asks_for_loads_what_matches_and_says_what_did_not(places, tmp_path, caplog):
    """The advice of the refusals of a config.json that is not its weights': --allow-partial-load trains from them,
    and the log names what was left out."""
    assert any("or pass --allow-partial-load" in case[4] for case in CASES), "a refusal gives this advice"
    args = last_wins([*TRAIN, "--data-dir", "edited-data", "--max-steps", "1", "--init", "fewer-layers/best",
                      "--allow-partial-load", "--output-dir", "OUT/tuned"])
    multitask_classifier.main([substitute(arg, places, tmp_path) for arg in args])
    assert (tmp_path / "tuned" / "best" / "model.safetensors").is_file()
    assert "16 tensor(s) the encoder does not use (encoder.layer.1." in caplog.text


def test_a_run_config_records_no_flag_that_removes_or_continues_files(places):
    """--config RUN/run_config.json never replays --overwrite (or --resume, --allow-changed-data): the run config
    does not hold them, and a file that does is refused (the cases above)."""
    for config in (places["finished-run"] / "run_config.json", places["finished-run"] / "best" / "run_config.json"):
        recorded = json.loads(config.read_text())
        assert not set(MultitaskConfig.COMMAND_LINE_ONLY) & set(recorded)
        assert "lr" in recorded


def test_the_advice_to_a_run_killed_before_its_first_save_works_from_resume_alone(places, tmp_path, capsys):
    """`--resume --output-dir RUN`, typing nothing else, is told a command with the run's own flags (its model, not
    the default bert-base-uncased); followed, it trains the run again in RUN."""
    run = Path(shutil.copytree(places["killed-run"], tmp_path / "killed"))
    log = (run / "metrics.jsonl").read_bytes()
    with pytest.raises(SystemExit):
        cli.run(lambda: multitask_classifier.main(["--output-dir", str(run), "--resume"]))
    assert (run / "metrics.jsonl").read_bytes() == log, "a refused --resume removes no log"
    advice = capsys.readouterr().err.strip().splitlines()[-1].split("start it again: ", 1)[1]
    words = shlex.split(advice)
    assert words[words.index("--model") + 1] == str(places["MODEL"])
    assert words[words.index("--output-dir") + 1] == str(run) and words[-1] == "--overwrite"
    multitask_classifier.main(words[words.index("multitask_classifier.py") + 1:] + ["--max-steps", "1"])
    assert (run / "best" / "model.safetensors").is_file()


@pytest.mark.parametrize("spelling", ["./x", "absolute", "link"])
def test_predict_never_writes_over_its_input_however_the_file_is_named(places, tmp_path, monkeypatch, capsys,
                                                                       spelling):
    """--input x with --output ./x, with its absolute path, or through a symbolic link to it: one file, refused, and
    the file as it was."""
    monkeypatch.chdir(tmp_path)
    source = tmp_path / "x"
    source.write_text("a red car\nthe big dog\n")
    (tmp_path / "link").symlink_to(source)
    output = {"./x": "./x", "absolute": str(source), "link": "link"}[spelling]
    with pytest.raises(SystemExit):
        cli.run(lambda: predict.main([str(places["finished-run"]), "--task", "sst", "--input", "x", "--output",
                                      output]))
    assert f"--output {output}: the file --input reads" in capsys.readouterr().err  # as typed
    assert source.read_text() == "a red car\nthe big dog\n"


def test_predictions_for_a_device_leave_it_as_it_was(places, capsys):
    """--output naming a device (here through a link to /dev/null) is refused before anything is written: the link
    is still there, to the same device (a file written whole and moved into place would have replaced it)."""
    assert stat.S_ISCHR(os.stat(places["a-device"]).st_mode)
    with pytest.raises(SystemExit):
        cli.run(lambda: predict.main([str(places["finished-run"]), "--sst", "a film", "--output",
                                      str(places["a-device"])]))
    assert "a device, not a regular file or folder" in capsys.readouterr().err
    assert places["a-device"].is_symlink() and os.readlink(places["a-device"]) == os.devnull


def test_a_predictions_file_ends_every_line_with_one_newline(places, tmp_path):
    """predict.py --output: the header and the rows alike end in LF, never CRLF."""
    output = tmp_path / "out.tsv"
    predict.main([str(places["finished-run"]), "--task", "sst", "--input", str(places["sentences.txt"]),
                  "--output", str(output)])
    data = output.read_bytes()
    assert b"\r" not in data and data.count(b"\n") == 3  # the header and the file's two sentences


def test_a_refused_resume_leaves_the_runs_log_as_it_was(places, tmp_path, capsys):
    log = places["user-note"] / "metrics.jsonl"
    before = log.read_bytes()
    args = last_wins([*TRAIN, "--data-dir", "edited-data", "--output-dir", "user-note", "--resume",
                      "--allow-changed-data"])
    with pytest.raises(SystemExit):
        cli.run(lambda: multitask_classifier.main([substitute(arg, places, tmp_path) for arg in args]))
    assert log.read_bytes() == before
    assert "provenance" not in json.loads((places["user-note"] / "run_config.json").read_text()) or \
        not json.loads((places["user-note"] / "run_config.json").read_text())["provenance"].get("resumed")


class FailsToStart(Callback):
    """A user's callback that raises as the loop begins, before the first step."""

    def on_train_begin(self, state, control):
        raise RuntimeError("my callback failed")


def copy_of_finished_run(places, tmp_path) -> tuple[Path, Path]:
    """The finished run and its leaderboard folder, copied: the old run an --overwrite would replace."""
    run = Path(shutil.copytree(places["finished-run"], tmp_path / "old"))
    predictions = Path(shutil.copytree(places["finished-run"].parent / "finished" / "predictions",
                                       tmp_path / "old-predictions"))
    return run, predictions


@pytest.mark.parametrize("failure", ["a model that cannot load", "a data file that does not parse",
                                     "a callback that raises before the first step"])
def test_an_overwrite_that_cannot_start_leaves_the_old_run_as_it_was(places, tmp_path, capsys, failure):
    """--overwrite removes the old run only once the new one can train: a start that fails before its first step
    leaves every file of the old run, and its leaderboard folder, byte for byte."""
    run, predictions = copy_of_finished_run(places, tmp_path)
    before = (contents(run), contents(predictions))
    args = last_wins([*TRAIN, "--data-dir", "edited-data", "--output-dir", str(run), "--predictions-dir",
                      str(predictions), "--overwrite", "--max-steps", "1"]
                     + {"a model that cannot load": ["--model", "broken-config"],
                        "a data file that does not parse": ["--data-dir", "bad-test-row"]}.get(failure, []))
    argv = [substitute(arg, places, tmp_path) for arg in args]
    if failure == "a callback that raises before the first step":
        with pytest.raises(RuntimeError, match="my callback failed"):
            multitask_classifier.main(argv, callbacks=[FailsToStart()])
    else:
        with pytest.raises(SystemExit) as exit_:
            cli.run(lambda: multitask_classifier.main(argv))
        assert exit_.value.code == 2
        error = capsys.readouterr().err
        assert "Traceback" not in error and error.strip().splitlines()[-1].startswith("error: ")
    assert (contents(run), contents(predictions)) == before


def test_a_resume_that_cannot_start_leaves_the_runs_log_and_config_as_they_were(places, tmp_path):
    """--resume cuts metrics.jsonl back to its checkpoint's step and records itself in the run config only once the
    run goes on: a resume that fails before its first step leaves both byte for byte."""
    run = Path(shutil.copytree(places["finished-run"], tmp_path / "interrupted"))
    saved = json.loads((run / "run_config.json").read_text())  # its command did not end
    (run / "run_config.json").write_text(json.dumps({k: v for k, v in saved.items() if k != "finished"}))
    with open(run / "metrics.jsonl", "a") as log:  # a line logged after the checkpoint, before a kill
        log.write(json.dumps({"event": "train", "step": 999, "loss": {"sst": 1.0}}) + "\n")
    before = contents(run)
    args = last_wins([*TRAIN, "--data-dir", "edited-data", "--output-dir", str(run), "--resume",
                      "--allow-changed-data", "--predictions-dir", str(run / "predictions")])  # a copy's own
    with pytest.raises(RuntimeError, match="my callback failed"):
        multitask_classifier.main([substitute(arg, places, tmp_path) for arg in args], callbacks=[FailsToStart()])
    assert contents(run) == before


def test_an_overwrite_that_starts_removes_the_old_run(places, tmp_path):
    """Once the new run trains, --overwrite removes what the old one recorded writing: its log lines, its
    checkpoints, its TensorBoard file; the new run's own TensorBoard file stays, and so does a file of the user's."""
    run, predictions = copy_of_finished_run(places, tmp_path)
    (run / "tensorboard").mkdir()
    (run / "tensorboard" / "events.out.tfevents.old").write_bytes(b"the old run's")
    (run / "tensorboard" / "notes.txt").write_text("the user's")
    recorded = json.loads((run / "run_config.json").read_text())  # as the old run recorded its TensorBoard file
    recorded["wrote"].append("tensorboard/events.out.tfevents.old")
    (run / "run_config.json").write_text(json.dumps(recorded))
    old_best = (run / "best" / "model.safetensors").read_bytes()
    args = last_wins([*TRAIN, "--data-dir", "edited-data", "--output-dir", str(run), "--predictions-dir",
                      str(predictions), "--overwrite", "--max-steps", "1", "--report-to", "tensorboard"])
    multitask_classifier.main([substitute(arg, places, tmp_path) for arg in args])
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps and max(steps) == 1, "the old run's lines went"
    assert (run / "best" / "model.safetensors").read_bytes() != old_best
    assert json.loads((run / "last" / "run_config.json").read_text())["max_steps"] == 1
    events = [path.name for path in (run / "tensorboard").iterdir() if path.name != "notes.txt"]
    assert "events.out.tfevents.old" not in events and len(events) == 1
    assert (run / "tensorboard" / "notes.txt").read_text() == "the user's"


def catalogue_table() -> str:
    lines = ["| kind | what is wrong | command | what you get (exit code 2) |", "|---|---|---|---|"]
    for kind, wrong, command, _, message, code in CASES:
        assert code == 2 or "stopped by" in wrong, "only a signal's stop exits with another code"
        other_code = f" (exit code {code})" if code != 2 else ""
        lines.append(f"| {kind} | {wrong} | `{SCRIPTS[command]}` | `{message}`{other_code} |")
    return "\n".join(lines)


def test_docs_table_is_the_catalogue():
    assert catalogue_table() in (ROOT / "docs" / "bad-input.md").read_text(), \
        "docs/bad-input.md's table differs: paste `.venv/bin/python tests/test_bad_inputs.py` into it"


if __name__ == "__main__":
    print(catalogue_table())
