"""The values that flags choose among, of the parts below the commands' flags: the precision, int8 quantization, the
encoder's attention layouts and poolings, how a pair is encoded, the heads' MLPs and the STS target, and the data
contrastive pretraining names.
Each part imports its own from here, a module that loads no torch, so that every command's --help lists them
without loading torch (the parts themselves do)."""
from collections.abc import Iterable

# --precision (common/precision.py).
PRECISIONS = ("auto", "fp32", "tf32", "bf16", "fp16")
PRECISION_HELP = ("auto: bf16 autocast on a GPU (fp16 on one without bf16) and on a CPU that computes bf16 natively "
                  "(AVX-512 BF16 or AMX), fp32 on other CPUs, where bf16 is emulated and slower; fp32 turns it off; "
                  "tf32: fp32 with TF32 matrix products on a GPU")
# --quantize: inference with the encoder's Linear layers in int8 (models/quantize.py).
QUANTIZATIONS = ("none", "int8")
QUANTIZE_HELP = ("int8: the encoder's Linear layers in int8, for inference on a CPU (torch's dynamic quantization: "
                 "weights int8 per output channel, each batch's activations quantized as they come; the rest fp32): "
                 "faster, outputs within int8's rounding of fp32's (docs/results.md says how close and when it "
                 "pays); none: fp32")
# --allow-partial-load (models/loading.py): a checkpoint loads exactly, every tensor its config.json implies and no
# other, unless the user says otherwise.
ALLOW_PARTIAL_LOAD_HELP = ("load a checkpoint whose weights do not match its config.json (tensors missing or left "
                           "over): what matches loads, the rest keeps random initial values; without it, such a "
                           "checkpoint is refused")
# How the encoder runs a padded batch (models/bert.py).
ATTENTION = ("auto", "padded", "packed")
# --length-buckets and --cuda-graphs (training/step_shapes.py): auto decides by the device.
SWITCHES = ("auto", "on", "off")
# Sentence embeddings (models/sentence_embedding.py): what the fine-tuning heads and contrastive pretraining use,
# and what is defined on any layer's token vectors (the pooler only on the last).
POOLINGS = ("cls", "mean", "pooler")
TOKEN_POOLINGS = ("cls", "mean", "max")
# The STS benchmark's sets, sts-eval/*.tsv of --data-dir (evaluation/sts_benchmark.py).
EVAL_SETS = ("sts12", "sts13", "sts14", "sts15", "sts16", "sickr")
# A pair's sentences embedded apart, or encoded together (--pair-encoding, model_config.py).
PAIR_ENCODINGS = ("bi", "cross")
# How the paraphrase and STS MLPs relate (Chen's CS224N report Table 3): two separate MLPs, one shared first
# layer (the paper's best), or one MLP used by both heads (heads/__init__.py).
SHARE_MODES = ("none", "first-layer", "all")
# The paraphrase and STS MLPs: Chen's CS224N report's plain 2-layer MLP, or x + MLP(x) starting as the identity.
PAIR_MLPS = ("residual", "plain")
# The cross-encoded pair head's variants, Mohammed and Sabane's CS224N report's names (heads/paraphrase.py).
CROSS_HEADS = ("ph", "dph", "dpha")
# What the STS head is trained to: the score, or the cosine range (tasks.py); auto picks by the pair encoding.
STS_TARGETS = ("auto", "score", "cosine-range")
# What contrastive pretraining's --data names besides the course's training files (data/contrastive.py).
NLI, UNLABELED, ALL_COURSE_FILES = "nli", "unlabeled", "all3"


def contrastive_data_names(course: Iterable[str]) -> tuple[str, ...]:
    """Every name --data takes, with the course's training files `course` (quora, sst, sts), in --help's order."""
    return (NLI, *course, UNLABELED, ALL_COURSE_FILES)
