"""The flags of the analysis subcommands (`minbert analyze SUBCOMMAND`), each config's docstring its help: the
encoders' flags the layers, spread and embeddings pictures share (EncoderFlags), and each subcommand's own. They
load neither torch nor matplotlib, so that --help answers at once; each picture's module (analysis/NAME.py) makes
its pictures from them."""
from dataclasses import dataclass

from minbert.common.choices import (ALLOW_PARTIAL_LOAD_HELP, EVAL_SETS, POOLINGS, PRECISION_HELP, PRECISIONS,
                                    TOKEN_POOLINGS)
from minbert.common.cli import AT_LEAST_0, AT_LEAST_1, Range, check_ranges, flag
from minbert.common.files import DEFAULT_DATA, in_repository


# Each subcommand's --overwrite: its files in --out are replaced without it only where a command of ours wrote them.
OVERWRITE_HELP = ("replace a file in --out, of a name this subcommand writes, that no command of ours wrote (never "
                  "a link)")


def items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def distinct(flag_name: str, listed: list[str], allowed: tuple[str, ...] | None = None) -> list[str]:
    if not listed:
        raise ValueError(f"{flag_name}: name at least one")
    twice = [item for number, item in enumerate(listed) if item in listed[:number]]
    if twice:
        raise ValueError(f"{flag_name}: {twice[0]!r} is listed twice")
    unknown = [item for item in listed if allowed and item not in allowed]
    if unknown:
        raise ValueError(f"{flag_name}: {unknown[0]!r} is not one of {', '.join(allowed)}")
    return listed


@dataclass
class EncoderFlags:
    """Flags of the subcommands that embed sentences with one or more encoders."""
    models: str = flag("all-MiniLM-L6-v2", "encoders, comma-separated: all-MiniLM-L6-v2, a hub id, or a "
                                           "checkpoint folder such as runs/multitask/best")
    data_dir: str = flag(str(DEFAULT_DATA), "folder with sts-train.csv, sts-dev.csv and sts-eval/")
    max_pairs: int = flag(0, "use at most this many pairs of each set, drawn at random (the same for every "
                             "encoder); 0: all of them", range=AT_LEAST_0)
    max_length: int = flag(128, "tokens per sentence", range=Range(3))  # [CLS], a token of the sentence, [SEP]
    batch_size: int = flag(64, "sentences per batch", range=AT_LEAST_1)
    device: str = flag("auto", "cpu, cuda, ... (auto: cuda when present)")
    precision: str = flag("auto", PRECISION_HELP, choices=PRECISIONS)
    POOLING_CHOICES = (*POOLINGS, "max")
    poolings: str = flag("mean", f"sentence embeddings, comma-separated: any of {', '.join(POOLING_CHOICES)}")
    allow_partial_load: bool = flag(False, ALLOW_PARTIAL_LOAD_HELP)

    def __post_init__(self):
        check_ranges(self)
        self.model_list = distinct("--models", items(self.models))
        self.pooling_list = distinct("--poolings", items(self.poolings), self.POOLING_CHOICES)


@dataclass
class CurvesConfig:
    """Training loss per task and dev metrics over optimizer steps, one picture per metric, a line per run
    (each run's colour, line style and marker the same in every picture; the legend counts its points).

    Read from each run's metrics.jsonl: the training loss from its "train" lines (every --log-every steps),
    or, in runs without them, from the evaluation lines' train_loss (the epoch's mean so far); the dev
    metrics from the evaluation lines.

        minbert analyze curves --runs runs/multitask,runs/mtdnn-minilm
    """
    runs: str = flag(in_repository("runs/multitask"), "run folders (or their metrics.jsonl files), comma-separated")
    out: str = flag(in_repository("runs/analysis/curves"), "folder for curves-*.png, curves.md and curves.json")
    overwrite: bool = flag(False, OVERWRITE_HELP)

    def __post_init__(self):
        self.run_list = distinct("--runs", items(self.runs))


@dataclass
class ErrorsConfig:
    """The dev errors of a finished multi-task run, from the outputs-{sst,para,sts}-dev.pt in its best/.

    SST-5: the confusion matrix (counts and each gold class's row as fractions) and the misclassified
    sentences; Quora: false positives and false negatives; STS: predicted against gold with Pearson r and
    the pairs with the largest errors; all lists most confident (or largest) first. Then the sentences two
    tasks' dev sets share, and whether both tasks get them wrong.

        minbert analyze errors --run runs/multitask
    """
    run: str = flag(in_repository("runs/multitask"),
                    "run folder (its best/ is read) or a checkpoint folder with outputs-*-dev.pt")
    data_dir: str = flag(str(DEFAULT_DATA), "folder with the dev files the run was evaluated on (gold labels)")
    top: int = flag(20, "rows of each list in the Markdown table (the JSON has them all)", range=AT_LEAST_1)
    sts_error: float = flag(1.0, "an STS pair counts as wrong, when comparing tasks, if its error exceeds this",
                            range=AT_LEAST_0)
    out: str = flag(in_repository("runs/analysis/errors"), "folder for errors.png, errors.md and errors.json")
    overwrite: bool = flag(False, OVERWRITE_HELP)

    def __post_init__(self):
        check_ranges(self)


STS_SETS = (*EVAL_SETS, "sts-dev")


@dataclass
class LayersConfig(EncoderFlags):
    """Spearman x 100 of cosine similarity on STS for every layer's embeddings (0 = the embedding layer).

    The picture has a panel per pooling and in each a line per encoder: x = layer, y = the mean Spearman over
    the sets of --sets; the table and the JSON keep every set's number. As in Contrastive Tension (Carlsson et al.,
    2021, Figures 1, 2, 5) and SG-BERT's layer x pooling survey (Kim, Yoo and Lee, 2021).

        minbert analyze layers --models all-MiniLM-L6-v2,runs/multitask/best --max-pairs 500
    """
    POOLING_CHOICES = TOKEN_POOLINGS
    poolings: str = flag("mean,cls,max", f"sentence embeddings of each layer, comma-separated: mean and max over "
                                         f"the real tokens, cls = the [CLS] vector; any of {', '.join(TOKEN_POOLINGS)}")
    sets: str = flag(",".join(STS_SETS), "STS sets, comma-separated: sts12 .. sickr (sts-eval/*.tsv) and sts-dev")
    out: str = flag(in_repository("runs/analysis/layers"), "folder for layers.png, layers.md and layers.json")
    overwrite: bool = flag(False, OVERWRITE_HELP)

    def __post_init__(self):
        super().__post_init__()
        self.set_list = distinct("--sets", items(self.sets), STS_SETS)


@dataclass
class SpreadConfig(EncoderFlags):
    """The cosine similarity of the STS training pairs (sts-train.csv) in 20 gold-score buckets of 0.25.

    Per bucket and encoder: the mean cosine and its standard deviation (Contrastive Tension, Carlsson et
    al., 2021, Figure 3), drawn in a panel per encoder and pooling; and M, the mean cosine of the lowest
    bucket (gold <= 0.25): the cosine floor that multitask_classifier.py --sts-target cosine-range sets when
    it starts from that encoder with the same pooling (its residual pair MLP starts as the identity).

        minbert analyze spread --models all-MiniLM-L6-v2,runs/multitask/best
    """
    out: str = flag(in_repository("runs/analysis/spread"), "folder for spread.png, spread.md and spread.json")
    overwrite: bool = flag(False, OVERWRITE_HELP)


@dataclass
class EmbeddingsConfig(EncoderFlags):
    """Alignment against uniformity on STS dev (Wang and Isola, 2020), a point per encoder, a panel per pooling.

    Alignment: the mean squared distance of the unit-length embeddings of pairs scored >= 4; uniformity:
    log E exp(-2 squared distance) over both sentences of every pair; lower is better for both (SimCSE's
    picture, Gao, Yao and Chen, 2021). The table adds each encoder's STS dev Spearman.

        minbert analyze embeddings --models all-MiniLM-L6-v2,runs/multitask/best --poolings cls,mean
    """
    out: str = flag(in_repository("runs/analysis/embeddings"),
                    "folder for embeddings.png, embeddings.md and embeddings.json")
    overwrite: bool = flag(False, OVERWRITE_HELP)
