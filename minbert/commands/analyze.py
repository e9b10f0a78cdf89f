"""Pictures and tables for a report. Each subcommand writes a PNG, a Markdown table (.md) and its numbers
as JSON into --out (default runs/analysis/SUBCOMMAND).

    minbert analyze layers --models all-MiniLM-L6-v2,runs/multitask/best --max-pairs 500
    minbert analyze spread --models all-MiniLM-L6-v2,runs/multitask/best
    minbert analyze embeddings --models all-MiniLM-L6-v2,runs/multitask/best --poolings cls,mean
    minbert analyze errors --run runs/multitask
    minbert analyze curves --runs runs/multitask,runs/mtdnn-minilm

layers      how well every layer's embeddings (0 = the embedding layer) score on STS, with mean, [CLS] and max
            pooling: Contrastive Tension (Carlsson et al., 2021), Figures 1, 2 and 5; the layer x pooling
            survey of SG-BERT (Kim, Yoo and Lee, 2021).
spread      the cosine similarity of the STS training pairs in each gold-score bucket: Contrastive Tension,
            Figure 3. Its lowest bucket's mean is the M of multitask_classifier.py --sts-target cosine-range.
embeddings  alignment against uniformity on STS dev (Wang and Isola, 2020), as SimCSE (Gao, Yao and Chen,
            2021) plots them.
errors      a finished multi-task run's dev errors: the SST confusion matrix, Quora's false positives and
            negatives, STS predicted against gold, and whether errors fall on the sentences the tasks share.
curves      training loss per task and dev metrics over optimizer steps, for one or several runs.

`minbert analyze SUBCOMMAND --help` lists a subcommand's flags. A missing file or folder ends with one line
naming it and exit code 2. A file in --out is replaced only if a command of ours wrote it (the record of the write
beside it, .NAME.written-by.json, says so), or with --overwrite.
"""
import importlib
from pathlib import Path

from minbert.analysis.flags import CurvesConfig, EmbeddingsConfig, ErrorsConfig, LayersConfig, SpreadConfig
from minbert.common import cli
from minbert.common.outputs import check_files, output_folder

# subcommand -> its flags; the module minbert.analysis.SUBCOMMAND computes and draws its pictures (build), and
# SUBCOMMAND.md and SUBCOMMAND.json are written beside them
SUBCOMMANDS = {"layers": LayersConfig, "spread": SpreadConfig, "embeddings": EmbeddingsConfig, "errors": ErrorsConfig,
               "curves": CurvesConfig}


def main(argv: list[str] | None = None) -> list[Path]:
    config = cli.parse_subcommand(SUBCOMMANDS, __doc__, argv, program=cli.program("analyze.py", "analyze"))
    name = next(name for name, flags in SUBCOMMANDS.items() if isinstance(config, flags))
    # The pictures load torch and matplotlib: imported once the flags are parsed, so that --help answers at once.
    build = importlib.import_module(f"minbert.analysis.{name}").build
    from minbert.analysis.report import text_files, write

    with output_folder(config.out, "--out"):  # checked and held before the work
        # The files whose names are known before the work (the pictures' are once drawn: checked as they are written)
        check_files(config.out, text_files(name), "--out", config.overwrite)
        written = write(config.out, name, build(config), config)
    print("\n".join(f"wrote {path}" for path in written))
    return written

