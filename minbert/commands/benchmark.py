"""The STS benchmark of an encoder's sentence embeddings (SimCSE's protocol, "all" setting): Spearman correlation
between the cosine similarity of each pair's embeddings and the gold score on STS12-16, SICK-R and the course's STS
dev split, their mean, and on STS dev the alignment and uniformity of Wang & Isola (2020). The embeddings are those
sentence-transformers computes from the folder: its pooling, Normalize and max_seq_length, unless --pooling or
--max-length say otherwise.

    minbert benchmark --model all-MiniLM-L6-v2 --pooling cls
    minbert benchmark --model runs/simcse-nli --out runs/simcse-nli/benchmark.json
        # --out inside the folder: its model card gets the results too
"""
import logging
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from minbert.common import cli
from minbert.common.choices import (ALLOW_PARTIAL_LOAD_HELP, POOLINGS, PRECISION_HELP, PRECISIONS, QUANTIZATIONS,
                                    QUANTIZE_HELP)
from minbert.common.cli import AT_LEAST_0, AT_LEAST_1, check_ranges, flag
from minbert.common.outputs import output_file, write_output
from minbert.common.files import DEFAULT_DATA, without_local_paths, write_json
from minbert.common.tables import markdown_table

log = logging.getLogger(__name__)


@dataclass
class StsBenchmarkConfig:
    model: str = flag("all-MiniLM-L6-v2", "encoder to evaluate: hub id, checkpoint folder, or all-MiniLM-L6-v2")
    pooling: str | None = flag(None, "sentence embedding: cls = the final [CLS] vector; mean = the mean of the "
                                     "final token vectors; pooler = BERT's pooler output, tanh(dense([CLS])) "
                                     "(default: the folder's own, from its sentence-transformers files, as "
                                     "sentence-transformers computes it; mean for a folder without them)",
                               choices=POOLINGS)
    data_dir: str = flag(str(DEFAULT_DATA), "folder with sts-eval/ and sts-dev.csv")
    max_length: int = flag(0, "tokens per sentence (0: the folder's max_seq_length, as sentence-transformers reads "
                              "it; else the encoder's positions)", range=AT_LEAST_0)
    batch_size: int = flag(128, "sentences per batch", range=AT_LEAST_1)
    device: str = flag("auto", "cpu, cuda, ... (auto: cuda when present)")
    precision: str = flag("auto", PRECISION_HELP, choices=PRECISIONS)
    quantize: str = flag("none", QUANTIZE_HELP, choices=QUANTIZATIONS)
    allow_partial_load: bool = flag(False, ALLOW_PARTIAL_LOAD_HELP)
    out: str = flag("", "also write the results as JSON to this file (left out: printed only); a file in the "
                        "model's own folder also adds them to the folder's model card (README.md); a file that "
                        "exists is replaced only if a command of ours wrote it, or with --overwrite")
    overwrite: bool = flag(False, "replace an --out file that no command of ours wrote (never an input, a "
                                  "checkpoint's file or a link)")
    COMMAND_LINE_ONLY = ("overwrite",)  # typed each time, never taken from a --config file

    def __post_init__(self):
        check_ranges(self)


def main(argv: list[str] | None = None) -> dict[str, float]:
    config = cli.parse_config(StsBenchmarkConfig, __doc__, argv,
                              program=cli.program("-m minbert benchmark", "benchmark"))
    # The one exception to the rule of outputs: the benchmark file added to the model's own folder, which its model
    # card reads (a new file there: never one of the checkpoint's).
    in_model = bool(config.out) and Path(config.out).expanduser().resolve().parent == Path(
        config.model).expanduser().resolve()
    with output_file(config.out, "--out", {"--data-dir": config.data_dir}, config.overwrite,
                     checkpoint=Path(config.model) if in_model else None) if config.out else nullcontext():
        return benchmark(config)


def benchmark(config: StsBenchmarkConfig) -> dict[str, float]:
    # The benchmark loads torch: imported once the flags are parsed, so that --help answers at once.
    from minbert.evaluation.sts_benchmark import TABLE_COLUMNS, sts_benchmark
    from minbert.models import SentenceEncoder
    from minbert.models.shareable import update_card

    model = SentenceEncoder.from_pretrained(config.model, config.pooling, config.max_length,
                                            cli.resolve_device(config.device), config.precision, config.quantize,
                                            config.allow_partial_load)
    log.info("STS benchmark of %s: %s pooling%s, up to %d tokens a sentence; precision %s%s", config.model,
             model.pooling, ", length 1" if model.normalize else "", model.max_length, model.precision.describe(),
             f"; --quantize int8: the encoder's {model.quantized_layers} Linear layers in int8"
             if model.quantized_layers else "")
    results = sts_benchmark(model, config.data_dir, config.batch_size)
    quantized = "" if config.quantize == "none" else f", {config.quantize}"
    print(markdown_table({f"{config.model} ({model.pooling}{quantized})": results}, TABLE_COLUMNS))
    if config.out:
        # Without the folders above the model's: the file may lie in the model's own folder, which is shared.
        with write_output(config.out, "minbert benchmark") as temp:
            write_json(temp, {"model": without_local_paths(config.model), "pooling": model.pooling,
                              "max_length": model.max_length, "quantize": config.quantize, "results": results})
        folder = Path(config.model).expanduser()
        # The card tells the model's own scores: an int8 benchmark's go to --out only.
        if config.quantize == "none" and Path(config.out).expanduser().resolve().parent == folder.resolve() and \
                update_card(folder, "sts-benchmark", results):
            log.info("added the results to the model card %s", folder / "README.md")
    return results

