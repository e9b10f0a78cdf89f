"""What the pictures' subcommands share: the encoders they embed with (their flags: analysis/flags.py), labels,
Spearman x 100, and what they make (a Report: pictures, Markdown, numbers) and write."""
import dataclasses
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from matplotlib.figure import Figure
from scipy.stats import ConstantInputWarning

from minbert.analysis.figures import POOLING_NAMES, save
from minbert.analysis.flags import EncoderFlags
from minbert.common import cli
from minbert.common.files import write_json
from minbert.common.metrics import spearman
from minbert.common.outputs import check_files, write_outputs
from minbert.common.run_folder import BEST, LAST
from minbert.models import Tokenizer, from_pretrained


def encoders(config: EncoderFlags):
    """(label, encoder, tokenizer), one encoder in memory at a time."""
    device = cli.resolve_device(config.device)
    for name, spec in zip(short_names(config.model_list), config.model_list):
        yield name, from_pretrained(spec, config.allow_partial_load).to(device), Tokenizer.from_pretrained(spec)


def short_names(specs: Sequence[str]) -> list[str]:
    """Labels for encoders and runs: a packaged name or hub id as given; for a folder, as many of its last path
    parts as make the labels distinct, and never a bare best/ or last/, which says nothing on its own."""
    parts = [Path(spec).expanduser().resolve().parts if Path(spec).expanduser().exists() else (spec,)
             for spec in specs]
    for depth in range(1, max(len(p) for p in parts) + 1):
        labels = ["/".join(p[-(depth + (p[-1] in (BEST, LAST) and len(p) > 1)):]) for p in parts]
        if len(set(labels)) == len(labels):
            return labels
    return list(specs)


def label(encoder: str, pooling: str, poolings: list[str]) -> str:
    """An encoder's label, with its pooling where the picture has several."""
    return encoder if len(poolings) == 1 else f"{encoder}, {POOLING_NAMES[pooling]}"


def title_note(poolings: list[str]) -> str:
    """What a title adds of the pooling: its name where the picture has one pooling, nothing where it has several
    (their panels or labels name them)."""
    return "" if len(poolings) > 1 else f", {POOLING_NAMES[poolings[0]]}"


def spearman_x100(cosines: torch.Tensor, gold: Sequence[float]) -> float:
    """Spearman x 100; nan, quietly, where the cosines are all equal (layer 0's [CLS] vector is the same
    for every sentence: the [CLS] token at position 0)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConstantInputWarning)
        return 100 * spearman(cosines, gold)


def json_safe(value):
    """nan (e.g. the Spearman of constant cosines) as null: JSON has no nan."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


@dataclass
class Report:
    """What a subcommand makes, before anything is written: its pictures (file name -> Figure, for a test to look
    at), its Markdown and its numbers (the JSON)."""
    figures: dict[str, Figure]
    markdown: str
    numbers: dict


WRITER = "minbert analyze"  # who wrote the files of --out, as their records say (common.outputs.write_outputs)


def text_files(stem: str) -> list[str]:
    """The files every subcommand writes beside its pictures (whose names are known once they are drawn)."""
    return [f"{stem}.md", f"{stem}.json"]


def write(out: str, stem: str, report: Report, config) -> list[Path]:
    """OUT/the pictures, OUT/STEM.md and OUT/STEM.json (the numbers, and the flags that made them); a file of
    those names that no command of ours wrote is refused unless --overwrite, before any is written."""
    folder = Path(out)
    check_files(folder, [*report.figures, *text_files(stem)], "--out", config.overwrite)
    with write_outputs(folder, WRITER) as temp:  # one set: a command that dies half-way leaves the folder as it was
        for name, figure in report.figures.items():
            save(figure, temp / name)
        write_json(temp / f"{stem}.json", json_safe({"config": dataclasses.asdict(config), **report.numbers}))
        (temp / f"{stem}.md").write_text(report.markdown.rstrip() + "\n", encoding="utf-8")
    return [folder / name for name in [*report.figures, *text_files(stem)]]
