"""Pictures and tables for a report. Each subcommand writes a PNG, a Markdown table (.md) and its numbers
as JSON into --out (default runs/analysis/SUBCOMMAND).

    python -m evaluation.analyze layers --models all-MiniLM-L6-v2,runs/multitask/best --max-pairs 500
    python -m evaluation.analyze spread --models all-MiniLM-L6-v2,runs/multitask/best
    python -m evaluation.analyze embeddings --models all-MiniLM-L6-v2,runs/multitask/best --poolings cls,mean
    python -m evaluation.analyze errors --run runs/multitask
    python -m evaluation.analyze curves --runs runs/multitask,runs/mtdnn-minilm

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

`python -m evaluation.analyze SUBCOMMAND --help` lists a subcommand's flags. A missing file or folder ends
with one line naming it and exit code 2.
"""
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from common import cli
from common.cli import flag
from common.errors import DataError
from common.files import DEFAULT_DATA, write_json
from common.tables import markdown_table
from data.readers import read_sts, sample_records
from evaluation.analysis import (NUM_BUCKETS, bucket_statistics, classification_errors, cross_task_overlap,
                                 layer_spearman, paraphrase_errors, read_metrics, run_curves, sentence_errors,
                                 short_names, similarity_errors, spearman_x100)
from evaluation.outputs import dev_records, load_member
from evaluation.plots import (POOLING_NAMES, plot_alignment_uniformity, plot_curve, plot_errors, plot_layers,
                              plot_spread)
from evaluation.sts_benchmark import EVAL_SETS, alignment_and_uniformity, pair_cosines, read_sets
from heads.similarity import lowest_bucket_mean_cosine
from models import POOLINGS, TOKEN_POOLINGS, Tokenizer, from_pretrained
from tasks import REGISTRY, Classification, Paraphrase

STS_SETS = (*EVAL_SETS, "sts-dev")
METRIC_AXES = {"accuracy": "accuracy (fraction of dev examples)", "pearson": "Pearson r of predicted and gold scores"}
# metric -> (title, y axis, table header): each task's own, then the course's two scores (tasks.summary)
DEV_METRICS = {
    **{name: (f"Dev {task.title} {task.metric_name}", METRIC_AXES[task.metric_name],
              f"{task.title} {'acc' if task.metric_name == 'accuracy' else 'r'}") for name, task in REGISTRY.items()},
    "overall": ("Dev overall score (the course leaderboard's)", "mean(SST acc, Quora acc, (STS r + 1) / 2)",
                "overall"),
    "mean": ("Dev mean of the three metrics", "mean(SST acc, Quora acc, STS r)", "mean")}
FEW_SHARED = 30  # below this many sentences shared by two dev sets, their errors say nothing about each other


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _distinct(flag_name: str, items: list[str], allowed: tuple[str, ...] | None = None) -> list[str]:
    if not items:
        raise ValueError(f"{flag_name}: name at least one")
    twice = [item for number, item in enumerate(items) if item in items[:number]]
    if twice:
        raise ValueError(f"{flag_name}: {twice[0]!r} is listed twice")
    unknown = [item for item in items if allowed and item not in allowed]
    if unknown:
        raise ValueError(f"{flag_name}: {unknown[0]!r} is not one of {', '.join(allowed)}")
    return items


# ---- the subcommands' flags (each docstring is the subcommand's --help) ----

@dataclass
class EncoderFlags:
    """Flags of the subcommands that embed sentences with one or more encoders."""
    models: str = flag("all-MiniLM-L6-v2", "encoders, comma-separated: all-MiniLM-L6-v2, a hub id, or a "
                                           "checkpoint folder such as runs/multitask/best")
    data_dir: str = flag(str(DEFAULT_DATA), "folder with sts-train.csv, sts-dev.csv and sts-eval/")
    max_pairs: int = flag(0, "use at most this many pairs of each set, drawn at random (the same for every "
                             "encoder); 0: all of them")
    max_length: int = flag(128, "tokens per sentence")
    batch_size: int = flag(64, "sentences per batch")
    device: str = flag("auto", "cpu, cuda, ... (auto: cuda when present)")
    POOLING_CHOICES = (*POOLINGS, "max")
    poolings: str = flag("mean", f"sentence embeddings, comma-separated: any of {', '.join(POOLING_CHOICES)}")

    def __post_init__(self):
        self.model_list = _distinct("--models", _items(self.models))
        self.pooling_list = _distinct("--poolings", _items(self.poolings), self.POOLING_CHOICES)
        if self.max_pairs < 0:
            raise ValueError("--max-pairs must be 0 (all pairs) or more")


@dataclass
class LayersConfig(EncoderFlags):
    """Spearman x 100 of cosine similarity on STS for every layer's embeddings (0 = the embedding layer).

    The picture has a line per encoder and pooling: x = layer, y = the mean Spearman over the sets of
    --sets; the table and the JSON keep every set's number. As in Contrastive Tension (Carlsson et al.,
    2021, Figures 1, 2, 5) and SG-BERT's layer x pooling survey (Kim, Yoo and Lee, 2021).

        python -m evaluation.analyze layers --models all-MiniLM-L6-v2,runs/multitask/best --max-pairs 500
    """
    POOLING_CHOICES = TOKEN_POOLINGS
    poolings: str = flag("mean,cls,max", f"sentence embeddings of each layer, comma-separated: mean and max over "
                                         f"the real tokens, cls = the [CLS] vector; any of {', '.join(TOKEN_POOLINGS)}")
    sets: str = flag(",".join(STS_SETS), "STS sets, comma-separated: sts12 .. sickr (sts-eval/*.tsv) and sts-dev")
    out: str = flag("runs/analysis/layers", "folder for layers.png, layers.md and layers.json")

    def __post_init__(self):
        super().__post_init__()
        self.set_list = _distinct("--sets", _items(self.sets), STS_SETS)


@dataclass
class SpreadConfig(EncoderFlags):
    """The cosine similarity of the STS training pairs (sts-train.csv) in 20 gold-score buckets of 0.25.

    Per bucket and encoder: the mean cosine and its standard deviation (Contrastive Tension, Carlsson et
    al., 2021, Figure 3), and M, the mean cosine of the lowest bucket (gold <= 0.25): the cosine floor that
    multitask_classifier.py --sts-target cosine-range sets when it starts from that encoder with the same
    pooling (its residual pair MLP starts as the identity).

        python -m evaluation.analyze spread --models all-MiniLM-L6-v2,runs/multitask/best
    """
    out: str = flag("runs/analysis/spread", "folder for spread.png, spread.md and spread.json")


@dataclass
class EmbeddingsConfig(EncoderFlags):
    """Alignment against uniformity on STS dev (Wang and Isola, 2020), one labelled point per encoder.

    Alignment: the mean squared distance of the unit-length embeddings of pairs scored >= 4; uniformity:
    log E exp(-2 squared distance) over all sentences; lower is better for both (SimCSE's picture, Gao,
    Yao and Chen, 2021). The table adds each encoder's STS dev Spearman.

        python -m evaluation.analyze embeddings --models all-MiniLM-L6-v2,runs/multitask/best --poolings cls,mean
    """
    out: str = flag("runs/analysis/embeddings", "folder for embeddings.png, embeddings.md and embeddings.json")


@dataclass
class ErrorsConfig:
    """The dev errors of a finished multi-task run, from the outputs-{sst,para,sts}-dev.pt in its best/.

    SST-5: the confusion matrix (counts and each gold class's row as fractions) and the misclassified
    sentences; Quora: false positives and false negatives; STS: predicted against gold with Pearson r and
    the pairs with the largest errors; all lists most confident (or largest) first. Then the sentences two
    tasks' dev sets share, and whether both tasks get them wrong.

        python -m evaluation.analyze errors --run runs/multitask
    """
    run: str = flag("runs/multitask", "run folder (its best/ is read) or a checkpoint folder with outputs-*-dev.pt")
    data_dir: str = flag(str(DEFAULT_DATA), "folder with the dev files the run was evaluated on (gold labels)")
    top: int = flag(20, "rows of each list in the Markdown table (the JSON has them all)")
    sts_error: float = flag(1.0, "an STS pair counts as wrong, when comparing tasks, if its error exceeds this")
    out: str = flag("runs/analysis/errors", "folder for errors.png, errors.md and errors.json")

    def __post_init__(self):
        if self.top < 1:
            raise ValueError("--top must be at least 1")


@dataclass
class CurvesConfig:
    """Training loss per task and dev metrics over optimizer steps, one picture per metric, a line per run.

    Read from each run's metrics.jsonl: the training loss from its "train" lines (every --log-every steps),
    or, in runs without them, from the evaluation lines' train_loss (the epoch's mean so far); the dev
    metrics from the evaluation lines.

        python -m evaluation.analyze curves --runs runs/multitask,runs/mtdnn-minilm
    """
    runs: str = flag("runs/multitask", "run folders (or their metrics.jsonl files), comma-separated")
    out: str = flag("runs/analysis/curves", "folder for curves-*.png, curves.md and curves.json")

    def __post_init__(self):
        self.run_list = _distinct("--runs", _items(self.runs))


# ---- output ----

def _json_safe(value):
    """nan (e.g. the Spearman of constant cosines) as null: JSON has no nan."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    return value


def _write(out: str, stem: str, markdown: str, numbers: dict, config) -> list[Path]:
    folder = Path(out)
    write_json(folder / f"{stem}.json", _json_safe({"config": dataclasses.asdict(config), **numbers}))
    (folder / f"{stem}.md").write_text(markdown.rstrip() + "\n", encoding="utf-8")
    return [folder / f"{stem}.md", folder / f"{stem}.json"]


def _cell(text: str) -> str:
    """Sentences inside a Markdown table: a | would end the cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _label(encoder: str, pooling: str, poolings: list[str]) -> str:
    return encoder if len(poolings) == 1 else f"{encoder}, {POOLING_NAMES[pooling]}"


def _encoders(config: EncoderFlags):
    """(label, encoder, tokenizer), one encoder in memory at a time."""
    device = cli.resolve_device(config.device)
    for name, spec in zip(short_names(config.model_list), config.model_list):
        yield name, from_pretrained(spec).to(device), Tokenizer.from_pretrained(spec)


# ---- layers ----

def layers(config: LayersConfig) -> list[Path]:
    sets = {name: sample_records(pairs, config.max_pairs)
            for name, pairs in read_sets(config.data_dir, tuple(config.set_list)).items()}
    Path(config.out).mkdir(parents=True, exist_ok=True)
    results = {name: layer_spearman(encoder, tokenizer, sets, config.pooling_list, config.max_length,
                                    config.batch_size)
               for name, encoder, tokenizer in _encoders(config)}
    y_name = "STS dev" if list(sets) == ["sts-dev"] else f"mean over {len(sets)} STS sets"
    sizes = sorted({len(pairs) for pairs in sets.values()})
    pairs_note = f"{sizes[0]:,} pairs per set" if len(sizes) == 1 else f"{sizes[0]:,}-{sizes[-1]:,} pairs per set"
    note = f"{', '.join(sets)}; {pairs_note}."
    if "cls" in config.pooling_list:
        note += " [CLS] has no layer-0 point: that vector is the same for every sentence."
    picture = plot_layers({encoder: {pooling: [row["mean"] for row in rows] for pooling, rows in by_pooling.items()}
                           for encoder, by_pooling in results.items()},
                          Path(config.out) / "layers.png", ylabel=f"Spearman ρ × 100 ({y_name})",
                          title=f"STS by layer: Spearman of cosine similarity, {y_name}",
                          note=note)
    deepest = max(len(rows) for by_pooling in results.values() for rows in by_pooling.values())
    summary = {}
    for encoder, by_pooling in results.items():
        for pooling, rows in by_pooling.items():
            scored = [(row["mean"], layer) for layer, row in enumerate(rows) if not math.isnan(row["mean"])]
            summary[f"{encoder}, {POOLING_NAMES[pooling]}"] = {
                **{str(layer): row["mean"] for layer, row in enumerate(rows)},
                "best": f"layer {max(scored)[1]}" if scored else "-"}
    sections = [(f"# STS by layer: Spearman x 100 of cosine similarity\n\n"
                 f"Pairs per set: {', '.join(f'{name} {len(pairs)}' for name, pairs in sets.items())}. Layer 0 is the "
                 f"embedding layer. nan: the cosines are all equal (layer 0's [CLS] vector is the same for every "
                 f"sentence).\n\n## {y_name} (the picture)\n"),
                markdown_table(summary, [*map(str, range(deepest)), "best"], label="encoder, pooling",
                               headers=[*(f"L{layer}" for layer in range(deepest)), "best"])]
    for encoder, by_pooling in results.items():
        for pooling, rows in by_pooling.items():
            sections.append(f"\n## {encoder}, {POOLING_NAMES[pooling]}\n")
            sections.append(markdown_table({f"layer {layer}": row for layer, row in enumerate(rows)},
                                           [*sets, "mean"], label="layer"))
    numbers = {"y": y_name, "pairs": {name: len(pairs) for name, pairs in sets.items()},
               "models": dict(zip(short_names(config.model_list), config.model_list)), "results": results}
    return [picture, *_write(config.out, "layers", "\n".join(sections), numbers, config)]


# ---- spread ----

def spread(config: SpreadConfig) -> list[Path]:
    path = Path(config.data_dir) / "sts-train.csv"
    pairs = sample_records(read_sts(path)[0], config.max_pairs)
    gold = torch.tensor([p.label for p in pairs])
    Path(config.out).mkdir(parents=True, exist_ok=True)
    buckets, lowest = {}, {}
    for name, encoder, tokenizer in _encoders(config):
        for pooling in config.pooling_list:
            first, second = pair_cosines(encoder, tokenizer, pairs, pooling, config.max_length, config.batch_size)
            cosines = (first * second).sum(-1)
            label = _label(name, pooling, config.pooling_list)
            buckets[label] = bucket_statistics(cosines, gold)
            lowest[label] = lowest_bucket_mean_cosine(cosines, gold) if buckets[label][0]["count"] else None
    pooling_note = "" if len(config.pooling_list) > 1 else f", {POOLING_NAMES[config.pooling_list[0]]}"
    picture = plot_spread(buckets, lowest, Path(config.out) / "spread.png",
                          title=f"Cosine similarity of {len(pairs):,} STS training pairs by gold score{pooling_note}")
    rows = {}
    for bucket in range(NUM_BUCKETS):
        first = next(iter(buckets.values()))[bucket]
        rows[f"{'[' if bucket == 0 else '('}{first['low']:.2f}, {first['high']:.2f}]"] = {
            "pairs": first["count"],
            **{label: "-" if s[bucket]["mean"] is None else f"{s[bucket]['mean']:.3f} ± {s[bucket]['std']:.3f}"
               for label, s in buckets.items()}}
    m_line = "; ".join(f"{label} {'-' if m is None else f'{m:.4f}'}" for label, m in lowest.items())
    markdown = (f"# Cosine similarity of STS training pairs by gold score{pooling_note}\n\n"
                f"{len(pairs):,} pairs of {path.name}; each cell: mean ± standard deviation of the pairs' cosines.\n\n"
                f"M (mean cosine of the pairs scored <= 0.25, the cosine floor of --sts-target cosine-range): "
                f"{m_line}\n\n" + markdown_table(rows, ["pairs", *buckets], label="gold score"))
    numbers = {"pairs": len(pairs), "M": lowest, "buckets": buckets,
               "models": dict(zip(short_names(config.model_list), config.model_list))}
    return [picture, *_write(config.out, "spread", markdown, numbers, config)]


# ---- embeddings ----

def embeddings(config: EmbeddingsConfig) -> list[Path]:
    pairs = sample_records(read_sets(config.data_dir, ("sts-dev",))["sts-dev"], config.max_pairs)
    Path(config.out).mkdir(parents=True, exist_ok=True)
    points = {}
    for name, encoder, tokenizer in _encoders(config):
        for pooling in config.pooling_list:
            first, second = pair_cosines(encoder, tokenizer, pairs, pooling, config.max_length, config.batch_size)
            points.setdefault(name, {})[pooling] = {
                **alignment_and_uniformity(first, second, pairs),
                "sts-dev": spearman_x100((first * second).sum(-1), [p.label for p in pairs])}
    rows = {_label(name, pooling, config.pooling_list): point
            for name, by_pooling in points.items() for pooling, point in by_pooling.items()}
    pooling_note = "" if len(config.pooling_list) > 1 else f", {POOLING_NAMES[config.pooling_list[0]]}"
    picture = plot_alignment_uniformity(points, Path(config.out) / "embeddings.png",
                                        title=f"Alignment and uniformity of {len(pairs)} STS dev pairs{pooling_note}")
    positives = sum(p.label >= 4 for p in pairs)
    markdown = (f"# Alignment and uniformity on STS dev{pooling_note}\n\n{len(pairs)} pairs; alignment over the "
                f"{positives} scored >= 4, uniformity over all their sentences; lower is better for both. sts-dev: "
                f"Spearman x 100 of cosine similarity.\n\n"
                + markdown_table(rows, ["alignment", "uniformity", "sts-dev"], label="encoder", digits=3))
    numbers = {"pairs": len(pairs), "positive_pairs": positives, "points": points,
               "models": dict(zip(short_names(config.model_list), config.model_list))}
    return [picture, *_write(config.out, "embeddings", markdown, numbers, config)]


# ---- errors ----

def _error_sections(task: str, result: dict, top: int) -> list[str]:
    spec = REGISTRY[task]
    if isinstance(spec, Classification):
        names = [f"{number} {name}" for number, name in enumerate(spec.class_names)]
        counts = {names[g]: dict(zip(names, row)) for g, row in enumerate(result["confusion"])}
        fractions = {names[g]: dict(zip(names, row)) for g, row in enumerate(result["confusion_normalised"])}
        wrong = {e["id"]: {**e, "sentence": _cell(e["sentence"]), "gold": names[e["gold"]],
                           "predicted": names[e["predicted"]]} for e in result["misclassified"][:top]}
        return [f"## {spec.title}: accuracy {result['accuracy']:.4f}\n", "Counts (rows: gold class, columns: predicted):\n",
                markdown_table(counts, names, label="gold \\ predicted"),
                "\nEach gold class's row as fractions (recall on the diagonal):\n",
                markdown_table(fractions, names, label="gold \\ predicted", digits=3),
                (f"\n{len(result['misclassified'])} misclassified; the {min(top, len(wrong))} most confident "
                 f"(confidence: the predicted class's probability):\n"),
                markdown_table(wrong, ["sentence", "gold", "predicted", "confidence"], label="id", digits=3)]
    if isinstance(spec, Paraphrase):
        sections = [f"## {spec.title}: accuracy {result['accuracy']:.4f}\n"]
        for kind, words in (("false_positives", "false positives (gold: not paraphrase)"),
                            ("false_negatives", "false negatives (gold: paraphrase)")):
            rows = {e["id"]: {**e, "sentence1": _cell(e["sentence1"]), "sentence2": _cell(e["sentence2"])}
                    for e in result[kind][:top]}
            sections += [f"\n{len(result[kind])} {words}; the {len(rows)} most confident:\n",
                         markdown_table(rows, ["sentence1", "sentence2", "p_paraphrase"], label="id", digits=3,
                                        headers=["question 1", "question 2", "P(paraphrase)"])]
        return sections
    rows = {e["id"]: {**e, "sentence1": _cell(e["sentence1"]), "sentence2": _cell(e["sentence2"])}
            for e in result["largest_errors"][:top]}
    return [f"## {spec.title}: Pearson r {result['pearson']:.4f}\n", f"The {len(rows)} pairs with the largest absolute error:\n",
            markdown_table(rows, ["sentence1", "sentence2", "gold", "predicted", "error"], label="id")]


def _overlap_section(overlap: list[dict], sts_error: float) -> list[str]:
    rows = {}
    for row in overlap:
        a, b = row["tasks"].split(" & ")
        rows[f"{REGISTRY[a].title} & {REGISTRY[b].title}"] = {
            "shared": row["shared"], "both": row["both_wrong"], "only a": row[f"only_{a}_wrong"],
            "only b": row[f"only_{b}_wrong"], "neither": row["neither_wrong"],
            "rate a": row[f"{a}_error_rate"], "rate b": row[f"{b}_error_rate"]}
    most = max((row["shared"] for row in overlap), default=0)
    if most == 0:
        verdict = "No two dev sets share a sentence: there is nothing to say about coinciding errors."
    elif most < FEW_SHARED:
        verdict = f"No two dev sets share more than {most} sentences: too few to say whether errors coincide."
    else:
        verdict = "Where 'both' is well above shared x rate a x rate b, errors coincide more than chance."
    return ["\n## Sentences in more than one task's dev set\n",
            (f"Sentences compared lower-cased, spaces collapsed; a sentence is wrong in a pair task if any pair "
             f"holding it is (Quora: misclassified; STS: error > {sts_error:g}). a and b: the two tasks in the "
             f"row's order; rate: the share of each task's own sentences that are wrong. {verdict}\n"),
            markdown_table(rows, ["shared", "both", "only a", "only b", "neither", "rate a", "rate b"],
                           label="tasks", digits=3,
                           headers=["shared sentences", "wrong in both", "only a wrong", "only b wrong",
                                    "neither wrong", "error rate a", "error rate b"])]


def errors(config: ErrorsConfig) -> list[Path]:
    folder = Path(config.run)
    if not folder.is_dir():
        raise DataError(f"{folder}: run folder not found")
    member = load_member(folder)
    results, sentences, panels = {}, {}, {}
    for name, saved in ((name, member[name]["dev"]) for name in REGISTRY if name in member):
        task = REGISTRY[name]
        records = dev_records(config.data_dir, name, saved["ids"])
        outputs = saved["outputs"].float()
        gold = np.array([r.label for r in records])
        if isinstance(task, Classification):
            result = classification_errors(task, records, outputs)
            panels[name] = ("confusion", {"counts": np.array(result["confusion"]), "title": task.title,
                                          "fractions": np.array(result["confusion_normalised"]),
                                          "classes": list(task.class_names), "accuracy": result["accuracy"]})
        elif isinstance(task, Paraphrase):
            result = paraphrase_errors(task, records, outputs)
            panels[name] = ("paraphrase", {"p_paraphrase": outputs.numpy(), "gold": gold, "title": task.title,
                                           "accuracy": result["accuracy"]})
        else:
            result = similarity_errors(records, outputs, config.sts_error)
            panels[name] = ("similarity", {"predicted": outputs.numpy(), "gold": gold, "title": task.title,
                                           "r": result["pearson"]})
        sentences[name] = sentence_errors(records, result.pop("wrong"))
        results[name] = result
    Path(config.out).mkdir(parents=True, exist_ok=True)
    picture = plot_errors(Path(config.out) / "errors.png", f"Dev errors of {short_names([config.run])[0]}",
                          list(panels.values()))
    overlap = cross_task_overlap(sentences)
    sections = [f"# Dev errors of {config.run}"]
    for task, result in results.items():
        sections += ["", *_error_sections(task, result, config.top)]
    if len(sentences) > 1:
        sections += _overlap_section(overlap, config.sts_error)
    numbers = {"results": results, "cross_task": overlap}
    return [picture, *_write(config.out, "errors", "\n".join(sections), numbers, config)]


# ---- curves ----

def curves(config: CurvesConfig) -> list[Path]:
    paths = [Path(spec) if spec.endswith(".jsonl") else Path(spec) / "metrics.jsonl" for spec in config.run_list]
    runs = {name: run_curves(*read_metrics(path))
            for name, path in zip(short_names([str(path.parent) for path in paths]), paths)}
    Path(config.out).mkdir(parents=True, exist_ok=True)
    pictures = []
    for task, spec in REGISTRY.items():
        series = {f"{name} (epoch mean so far)" if run.train_loss_from == "eval lines" else name:
                  run.train_loss[task] for name, run in runs.items() if run.train_loss.get(task)}
        if series:
            pictures.append(plot_curve(series, Path(config.out) / f"curves-train-loss-{task}.png",
                                       ylabel=f"training loss: {spec.loss_description}",
                                       title=f"{spec.title} training loss"))
    for metric, (title, ylabel, _) in DEV_METRICS.items():
        series = {name: run.dev[metric] for name, run in runs.items() if run.dev.get(metric)}
        if series:
            pictures.append(plot_curve(series, Path(config.out) / f"curves-dev-{metric}.png", ylabel=ylabel,
                                       title=title))
    rows = {}
    for name, run in runs.items():
        overall = run.dev.get("overall", [])
        best_step, best = max(overall, key=lambda point: point[1]) if overall else (None, None)
        rows[name] = {"train lines": run.train_lines, "eval lines": run.eval_lines, "loss from": run.train_loss_from,
                      **{metric: series[-1][1] for metric, series in run.dev.items()},
                      "best overall": best, "at step": best_step if best_step is not None else "-"}
    markdown = ("# Training curves\n\nThe dev columns are each run's last evaluation; training loss is read from "
                "the train lines, or (runs without them) from the evaluation lines' mean loss of the epoch so far.\n\n"
                + markdown_table(rows, ["train lines", "eval lines", "loss from", *DEV_METRICS, "best overall",
                                        "at step"], label="run", digits=4,
                                 headers=["train lines", "eval lines", "loss from",
                                          *(header for _, _, header in DEV_METRICS.values()), "best overall",
                                          "at step"]))
    numbers = {"runs": {name: dataclasses.asdict(run) for name, run in runs.items()},
               "pictures": [path.name for path in pictures]}
    return [*pictures, *_write(config.out, "curves", markdown, numbers, config)]


COMMANDS = {"layers": LayersConfig, "spread": SpreadConfig, "embeddings": EmbeddingsConfig, "errors": ErrorsConfig,
            "curves": CurvesConfig}
RUNS = {LayersConfig: layers, SpreadConfig: spread, EmbeddingsConfig: embeddings, ErrorsConfig: errors,
        CurvesConfig: curves}


def main(argv: list[str] | None = None) -> list[Path]:
    config = cli.parse_subcommand(COMMANDS, __doc__, argv)
    written = RUNS[type(config)](config)
    print("\n".join(f"wrote {path}" for path in written))
    return written


if __name__ == "__main__":
    cli.run(main)
