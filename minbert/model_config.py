"""The flags that decide what the multitask model computes (ModelConfig), saved with every checkpoint so that a
checkpoint and its run config rebuild the model (model.py builds it). They load no torch: every command's --help
lists them at once."""
from dataclasses import dataclass

from minbert.common.choices import CROSS_HEADS, PAIR_ENCODINGS, PAIR_MLPS, POOLINGS, SHARE_MODES, STS_TARGETS
from minbert.common.cli import Range, check_ranges, flag, parse_task_order
from minbert.task_info import COURSE_TASKS, RECIPE_PAIR_ENCODING, SIMILARITY, TASK_NAMES, TASKS


@dataclass
class ModelConfig:
    """The flags that decide what the model computes."""
    tasks: str = flag(",".join(COURSE_TASKS), f"tasks to train, comma-separated, from {', '.join(TASK_NAMES)}")
    pooling: str = flag("mean", "sentence embedding: cls, the [CLS] vector; mean, the mean of the tokens; pooler, "
                                "BERT's pooler output",
                          choices=POOLINGS)
    pair_encoding: str = flag(RECIPE_PAIR_ENCODING, "bi: sentences embedded apart; cross: pair encoded together "
                                                    "in both orders; or per task, as the default (tasks left out: bi)")
    share: str = flag("first-layer", "the bi-encoded pair tasks' MLPs: none, one each; first-layer, their first layer shared "
                                    "(Chen's report); all, one MLP for both", choices=SHARE_MODES)
    pair_mlp: str = flag("residual", "pair tasks' MLPs (bi-encoding): residual = x + MLP(x), starting as the "
                                     "identity; plain = Chen's 2-layer MLP", choices=PAIR_MLPS)
    common_layer: bool = flag(False, "a Linear+tanh layer shared by all heads (Mohammed and Sabane's CL)")
    cross_head: str = flag("dpha", "cross-encoded pair head (Mohammed and Sabane: ph, dph, dpha)",
                             choices=CROSS_HEADS)
    sts_target: str = flag("auto", "score: regress 0-5; cosine-range: gold mapped onto [M, 1] (Contrastive "
                                   "Tension, Carlsson et al.); auto: cosine-range where STS is bi-encoded, else "
                                   "score", choices=STS_TARGETS)
    head_dropout: float = flag(0.3, "dropout before each head layer", range=Range(0, 1, high_open=True))

    # What the heads' tensors mean: heads trained under other values either fail to load (another shape) or,
    # worse, load and silently compute something else.
    HEAD_FIELDS = ("tasks", "pooling", "pair_encoding", "share", "pair_mlp", "common_layer", "cross_head",
                   "sts_target")

    def __post_init__(self):
        # The heads' checks are the task registry's, which loads torch: imported when a config is built, which
        # --help never does.
        from minbert.tasks import REGISTRY, HeadOptions

        if hasattr(super(), "__post_init__"):  # in a command's config (MultitaskConfig): its other parts' checks too
            super().__post_init__()
        else:
            check_ranges(self)  # every flag's range, those of a subclass too
        self.task_list = parse_task_order(self.tasks, TASK_NAMES, option="--tasks")
        if len(set(self.task_list)) < len(self.task_list):
            raise ValueError(f"--tasks {self.tasks!r}: a task is named twice")
        encodings = parse_pair_encoding(self.pair_encoding)
        similarity = REGISTRY[SIMILARITY]
        self.sts_target = similarity.target(self.sts_target, encodings[similarity.name])  # saved resolved
        self.head_options = HeadOptions(encodings, self.share, self.pair_mlp, self.cross_head, self.head_dropout,
                                        self.sts_target)
        for name in self.task_list:
            REGISTRY[name].check(self.head_options)


def parse_pair_encoding(text: str) -> dict[str, str]:
    """'cross' -> every pair task cross-encoded; 'para=cross,sts=bi' -> per task (pair tasks left out: bi)."""
    pair_tasks = [name for name, task in TASKS.items() if task.pair]
    if text in PAIR_ENCODINGS:
        return dict.fromkeys(pair_tasks, text)
    encodings = dict.fromkeys(pair_tasks, "bi")
    for item in text.split(","):
        task, _, encoding = (part.strip() for part in item.partition("="))
        if task not in encodings or encoding not in PAIR_ENCODINGS:
            raise ValueError(f"--pair-encoding {text!r}: expected bi, cross, or task=bi|cross for "
                             f"{' and '.join(pair_tasks)}")
        encodings[task] = encoding
    return encodings
