"""layers: how well every layer's embeddings (0 = the embedding layer) score on STS, with mean, [CLS] and max
pooling: Contrastive Tension (Carlsson et al., 2021), Figures 1, 2 and 5; the layer x pooling survey of SG-BERT
(Kim, Yoo and Lee, 2021)."""
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from matplotlib.figure import Figure

from minbert.analysis.figures import (POOLING_NAMES, integer_ticks, legend_outside, model_style, new_figure, pooling_panels,
                                      poolings_in)
from minbert.analysis.flags import LayersConfig
from minbert.analysis.report import Report, encoders, short_names, spearman_x100
from minbert.common.precision import Precision
from minbert.common.tables import markdown_table
from minbert.data.readers import PairExample, sample_records
from minbert.evaluation.sts_benchmark import distinct_sentences, read_sets
from minbert.models import BertModel, Tokenizer, embed_sentences_every_layer

# ---- compute ----

def layer_cosines(encoder: BertModel, tokenizer: Tokenizer, pairs: list[PairExample], poolings: Sequence[str],
                  max_length: int = 128, batch_size: int = 64, progress: str = "",
                  precision: str = "fp32") -> dict[str, torch.Tensor]:
    """pooling -> [layers + 1, pairs]: the cosine similarity of each pair's two sentences at every layer;
    progress: what a progress bar calls the work ("" for none)."""
    sentences, first, second = distinct_sentences(pairs)
    autocast = Precision(precision, next(encoder.parameters()).device).autocast
    embeddings = embed_sentences_every_layer(encoder, tokenizer, sentences, tuple(poolings), batch_size, max_length,
                                             progress, autocast)
    return {pooling: F.cosine_similarity(e[:, first], e[:, second], dim=-1) for pooling, e in embeddings.items()}


def layer_spearman(encoder: BertModel, tokenizer: Tokenizer, sets: dict[str, list[PairExample]],
                   poolings: Sequence[str], max_length: int = 128,
                   batch_size: int = 64, model_name: str = "",
                   precision: str = "fp32") -> dict[str, list[dict[str, float]]]:
    """pooling -> one row per layer (0 = embeddings): Spearman x 100 of cosine against gold per set, and "mean"
    (over the sets); model_name: the encoder's, for the progress lines ("" for none)."""
    rows = {pooling: [{} for _ in range(encoder.config.num_hidden_layers + 1)] for pooling in poolings}
    for number, (name, pairs) in enumerate(sets.items(), 1):
        gold = [p.label for p in pairs]
        progress = model_name and f"layers of {model_name}, {name} ({number}/{len(sets)})"
        for pooling, cosines in layer_cosines(encoder, tokenizer, pairs, poolings, max_length, batch_size,
                                              progress, precision).items():
            for layer, layer_cosine in enumerate(cosines):
                rows[pooling][layer][name] = spearman_x100(layer_cosine, gold)
    for layer_rows in rows.values():
        for row in layer_rows:
            row["mean"] = sum(row[name] for name in sets) / len(sets)
    return rows


# ---- draw ----

def draw_layers(results: dict[str, dict[str, list[float]]], ylabel: str, title: str, note: str = "") -> Figure:
    """results[encoder][pooling] = one value per layer: a panel per pooling, on the same axes, and in each a line
    per encoder in that encoder's colour, line style and marker (model_style), so that the lines of encoders that
    score alike stay apart; `note` goes under the panels."""
    poolings = poolings_in(results)
    figure = new_figure(max(9.0, 2.5 + 4.5 * len(poolings)), 5.5)
    panels = pooling_panels(figure, poolings)
    for panel, pooling in zip(panels, poolings):
        for number, (encoder, by_pooling) in enumerate(results.items()):
            if pooling in by_pooling:
                panel.plot(range(len(by_pooling[pooling])), by_pooling[pooling], **model_style(number), label=encoder)
        panel.set(xlabel="layer (0 = embedding layer)", title=POOLING_NAMES[pooling])
        integer_ticks(panel.xaxis)
        panel.grid(alpha=0.3)
    panels[0].set(ylabel=ylabel)
    figure.suptitle(title)
    if note:
        figure.supxlabel(note, fontsize="small", color="0.3")
    legend_outside(figure, panels[0])  # on the right: the note is below
    return figure


# ---- the subcommand: compute and draw ----

def build(config: LayersConfig) -> Report:
    sets = {name: sample_records(pairs, config.max_pairs)
            for name, pairs in read_sets(config.data_dir, tuple(config.set_list)).items()}
    results = {name: layer_spearman(encoder, tokenizer, sets, config.pooling_list, config.max_length,
                                    config.batch_size, name, config.precision)
               for name, encoder, tokenizer in encoders(config)}
    y_name = "STS dev" if list(sets) == ["sts-dev"] else f"mean over {len(sets)} STS sets"
    sizes = sorted({len(pairs) for pairs in sets.values()})
    pairs_note = f"{sizes[0]:,} pairs per set" if len(sizes) == 1 else f"{sizes[0]:,}-{sizes[-1]:,} pairs per set"
    note = f"{', '.join(sets)}; {pairs_note}."
    if "cls" in config.pooling_list:
        note += " [CLS] has no layer-0 point: that vector is the same for every sentence."
    picture = draw_layers({encoder: {pooling: [row["mean"] for row in rows] for pooling, rows in by_pooling.items()}
                           for encoder, by_pooling in results.items()},
                          ylabel=f"Spearman ρ × 100 ({y_name})",
                          title=f"STS by layer: Spearman of cosine similarity, {y_name}", note=note)
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
    return Report({"layers.png": picture}, "\n".join(sections), numbers)
