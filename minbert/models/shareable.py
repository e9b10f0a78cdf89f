"""Make a checkpoint folder usable without this project: by sentence-transformers, transformers and people; and read
what sentence-transformers does with a folder (sentence_convention, which models.SentenceEncoder follows).

save_checkpoint writes config.json, model.safetensors and the tokenizer files; write_shareable_files adds
    modules.json, sentence_bert_config.json, 1_Pooling/config.json   SentenceTransformer(folder) computes our
                                                                     embeddings, with the run's pooling
    2_Dense/ (pooling "pooler" only)                                  BERT's pooler, tanh(dense([CLS])), as a layer
    a Normalize module (when the base model has one)                  embeddings of length 1, as the base's
    README.md                                                         the model card
(config.json names the architecture, transformers' BertModel, RobertaModel or MPNetModel). Without these files
SentenceTransformer(folder) still loads, but silently mean-pools: a [CLS]-trained encoder would give other
embeddings than ours. The sentence-transformers files use its original layout (module types under sentence_transformers.models,
pooling_mode_* flags): versions 2 to 6 all read it.

What the folder inherits from the base model, so that users get what they got from the base:
- Normalize: all-MiniLM-L6-v2 ends in a Normalize module, so its users may compare embeddings by dot product;
  a fine-tuned copy without it would give them other scores. Read from the base folder's modules.json (the
  packaged all-MiniLM-L6-v2 ships one; a run started from one of our folders reads ours, so it carries on
  down a chain of runs); for hub ids, whose folders hold only the weights, from KNOWN_CONVENTIONS.
- max_seq_length: what the encoder takes, not the run's training crop (a contrastive run trains on 32
  tokens; sentence-transformers would truncate every input there): the base's own sentence_bert_config.json
  value if it has one, else the encoder's positions.
"""
import re
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml
from safetensors.torch import load_file, save_file

from minbert.common.errors import CheckpointError
from minbert.common.files import atomic_file, read_json, without_local_paths, write_json
from minbert.models.config import BertConfig
from minbert.models.loading import normalise_names, read_state_dict
from minbert.models.packaged import PACKAGED, packaged_folder
from minbert.models.sentence_embedding import POOLINGS

# Licenses of base models whose folders carry no model card to read them from.
KNOWN_LICENSES = {"bert-base-uncased": "apache-2.0", "google-bert/bert-base-uncased": "apache-2.0"}
# Hub ids of the short names models.from_pretrained accepts (PACKAGED).
HUB_IDS = {"all-minilm-l6-v2": "sentence-transformers/all-MiniLM-L6-v2",
           "all-mpnet-base-v2": "sentence-transformers/all-mpnet-base-v2"}
UNKNOWN_LICENSE = "unknown"
# The card's snippets load from here; whoever downloads the folder puts its path (or hub id) in its place.
FOLDER_PLACEHOLDER = "path/to/this/folder"
NORMALIZE = "sentence_transformers.models.Normalize"


@dataclass(frozen=True)
class Convention:
    """How sentence-transformers embeds with a model: length-1 embeddings or not, up to how many tokens (None: not
    said; the encoder's positions then), and the pooling, one of POOLINGS (None: one that minBERT does not
    compute, such as max pooling or a Dense layer of the folder's own). The defaults are sentence-transformers'
    own for a bare BERT folder: mean pooling, no Normalize."""
    normalize: bool = False
    max_seq_length: int | None = None
    pooling: str | None = "mean"


# Hub ids whose published sentence-transformers folder we know, for runs started from the hub id: the
# downloaded folder holds only config, weights and tokenizer. all-MiniLM-L6-v2 is published as
# Transformer (max_seq_length 256) -> Pooling (mean) -> Normalize; all-mpnet-base-v2 the same with 384.
KNOWN_CONVENTIONS = {"sentence-transformers/all-minilm-l6-v2": Convention(normalize=True, max_seq_length=256),
                     "sentence-transformers/all-mpnet-base-v2": Convention(normalize=True, max_seq_length=384)}

POOLING_WORDS = {"cls": "the final [CLS] vector", "mean": "the mean of the final token vectors (padding excluded)",
                 "pooler": "BERT's pooler output, tanh(dense([CLS]))"}
# The same pooling written out on the output of transformers' model (AutoModel), for the card.
TRANSFORMERS_POOLING = {
    "cls": "embeddings = output.last_hidden_state[:, 0]",
    "mean": 'mask = batch["attention_mask"].unsqueeze(-1).float()\n'
            "embeddings = (output.last_hidden_state * mask).sum(1) / mask.sum(1)",
    "pooler": "embeddings = output.pooler_output",
}
# The card's metrics sections: the title of each kind of numbers given to write_shareable_files or update_card,
# and what they are, in words.
METRICS_TITLES = {
    "dev": "Dev metrics of the task heads",
    "sts-benchmark": "STS benchmark of the embeddings",
    "training": "Training statistics",
}
METRICS_WORDS = {
    "dev": "Scored by the task heads trained with this encoder (`heads.safetensors`, which sentence-transformers "
           "does not load): each task's prediction is its head's on top of the encoder, STS's too (a cosine after "
           "the head's own layers, or a cross-encoder), not the cosine of this folder's embeddings. "
           f"`minbert benchmark --model {FOLDER_PLACEHOLDER} --out {FOLDER_PLACEHOLDER}/"
           "benchmark.json` scores the embeddings themselves and adds them to this card.",
    "sts-benchmark": "Spearman x 100 between the cosine similarity of this folder's embeddings (as below) and the "
                     "gold scores, on STS12-16 and SICK-R (each set's parts together) and the CS224N STS dev split; "
                     "alignment and uniformity of the STS dev embeddings (Wang and Isola, 2020; lower is better). "
                     "Measured by `minbert benchmark`.",
    "training": f"Not scores. `minbert benchmark --model {FOLDER_PLACEHOLDER} --out "
                f"{FOLDER_PLACEHOLDER}/benchmark.json` scores the embeddings and adds them to this card.",
}


# pretrain_contrastive.py --eval scores the base model and the trained encoder(s): rows "before.*", "after.*".
BEFORE_AFTER_WORDS = (" Measured by `pretrain_contrastive.py --eval`: the rows `before.*` are the base model's, the "
                      "rows `after.*` the trained encoder's (Contrastive Tension: `after model1.*` and "
                      "`after model2.*`, its two encoders).")


def write_shareable_files(folder: str | Path, *, pooling: str, max_length: int, base_model: str, command: str,
                          metrics: dict, data_files: list[str], metrics_kind: str = "dev",
                          eval_sample: int = 0, metric_names: dict[str, str] | None = None) -> None:
    """Add the sentence-transformers files and a model card to a checkpoint folder written by save_checkpoint.

    pooling: the run's (SentenceTransformer(folder) then pools as embed_sentences does); max_length: the run's
    training crop, said on the card (the folder's max_seq_length is the encoder's, see the module's doc);
    base_model: what the run started from (hub id, folder, or all-MiniLM-L6-v2), for the card's base model,
    the license and the base's Normalize and max_seq_length; command: the exact command line; metrics: the
    numbers to show (nested dicts are fine), of the kind metrics_kind names (METRICS_TITLES); eval_sample: the
    --max-eval-examples the dev metrics were scored with (0: the full dev sets); data_files: the training
    data files; metric_names: what each metric is, in words, for the card's table (keys without one are shown
    as they are). Each file is written atomically.
    """
    folder = Path(folder)
    if pooling not in POOLINGS:
        raise ValueError(f"pooling {pooling!r} is not one of {POOLINGS}")
    if metrics_kind not in METRICS_TITLES:
        raise ValueError(f"metrics_kind {metrics_kind!r} is not one of {tuple(METRICS_TITLES)}")
    if not (folder / "config.json").is_file():
        raise CheckpointError(f"{folder}: no config.json; write the checkpoint with save_checkpoint first")
    config = BertConfig.from_json(folder / "config.json")
    hidden_size, positions = config.hidden_size, config.longest_input
    convention = sentence_convention(base_model)
    # Never less than the run trained on, never more than the encoder's positions.
    max_seq_length = min(max(convention.max_seq_length or positions, max_length), positions)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    # sentence-transformers has no pooler pooling; [CLS] pooling followed by a Dense tanh layer holding the
    # pooler's weights computes exactly tanh(dense([CLS])).
    if pooling == "pooler":
        write_pooler_as_dense(folder / "2_Dense", folder, hidden_size)
        modules.append({"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    if convention.normalize:  # Normalize has no weights and no config: modules.json naming it is all it takes
        index = len(modules)
        modules.append({"idx": index, "name": str(index), "path": f"{index}_Normalize", "type": NORMALIZE})
    write_json(folder / "1_Pooling" / "config.json", {
        "word_embedding_dimension": hidden_size,
        "pooling_mode_cls_token": pooling in ("cls", "pooler"), "pooling_mode_mean_tokens": pooling == "mean",
        "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False})
    # Lower-casing stays the tokenizer's business (tokenizer_config.json), as in embed_sentences.
    write_json(folder / "sentence_bert_config.json", {"max_seq_length": max_seq_length, "do_lower_case": False})
    with atomic_file(folder / "README.md") as temp:
        temp.write_text(model_card(pooling=pooling, max_length=max_length, max_seq_length=max_seq_length,
                                   normalize=convention.normalize, hidden_size=hidden_size, base_model=base_model,
                                   command=command, metrics=metrics, metrics_kind=metrics_kind,
                                   eval_sample=eval_sample, data_files=data_files, metric_names=metric_names or {}),
                        encoding="utf-8")
    write_json(folder / "modules.json", modules)  # last: a folder with modules.json has all the parts it names


def write_pooler_as_dense(dense_folder: Path, checkpoint: Path, hidden_size: int) -> None:
    """The checkpoint's pooler layer as a sentence-transformers Dense module (linear + tanh)."""
    tensors, _ = normalise_names(read_state_dict(checkpoint))
    if "pooler.dense.weight" not in tensors or "pooler.dense.bias" not in tensors:
        raise CheckpointError(f"{checkpoint}: no pooler weights (pooler.dense.*), so pooling 'pooler' cannot be "
                              f"written for sentence-transformers")
    with atomic_file(dense_folder / "model.safetensors") as temp:
        save_file({"linear.weight": tensors["pooler.dense.weight"].contiguous(),
                   "linear.bias": tensors["pooler.dense.bias"].contiguous()}, temp)
    write_json(dense_folder / "config.json", {"in_features": hidden_size, "out_features": hidden_size, "bias": True,
                                              "activation_function": "torch.nn.modules.activation.Tanh"})


def base_folder(base_model: str) -> Path | None:
    """The local folder of the model a run started from, where there is one to read (not for hub ids)."""
    key = base_model.lower()
    if key in PACKAGED:
        return packaged_folder(key)
    folder = Path(base_model).expanduser()
    return folder if folder.is_dir() else None


def sentence_convention(model: str) -> Convention:
    """What sentence-transformers does with a model (the one reader of its files here): its folder's modules.json,
    Pooling, Dense and Normalize modules and sentence_bert_config.json where it has them, else what is known of its
    hub id, else sentence-transformers' defaults for a bare BERT folder (Convention())."""
    folder = base_folder(model)
    if folder is not None and (folder / "modules.json").is_file():
        modules = read_json(folder / "modules.json")
        settings = folder / "sentence_bert_config.json"
        return Convention(normalize=any(module_kind(module) == "Normalize" for module in modules),
                          max_seq_length=read_json(settings).get("max_seq_length") if settings.is_file() else None,
                          pooling=folder_pooling(folder, modules))
    hub_id = HUB_IDS.get(model.lower(), model)
    return KNOWN_CONVENTIONS.get(hub_id.lower(), Convention())


def module_kind(module: dict) -> str:
    """sentence_transformers.models.Pooling -> Pooling."""
    return module.get("type", "").rsplit(".", 1)[-1]


# The sentence-transformers pooling modes minBERT computes, by the one mode flag set in a Pooling config.
POOLING_MODES = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean"}


def folder_pooling(folder: Path, modules: list[dict]) -> str | None:
    """cls, mean or pooler, as the folder's modules compute it: Transformer, Pooling (one mode), optionally a
    Dense that is BERT's own pooler after [CLS] (what write_shareable_files writes for pooler), optionally
    Normalize. None for any other chain of modules."""
    kinds = [module_kind(module) for module in modules]
    if kinds and kinds[-1] == "Normalize":
        kinds, modules = kinds[:-1], modules[:-1]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Dense"]):
        return None
    pooling_config = folder / modules[1]["path"] / "config.json"
    modes = {key for key, value in read_json(pooling_config).items()
             if key.startswith("pooling_mode") and value is True}
    pooling = POOLING_MODES.get(modes.pop()) if len(modes) == 1 else None
    if len(kinds) == 2 or pooling is None:
        return pooling
    return "pooler" if pooling == "cls" and is_bert_pooler(folder / modules[2]["path"], folder) else None


def is_bert_pooler(dense_folder: Path, checkpoint: Path) -> bool:
    """Whether a Dense module computes tanh(pooler.dense(x)) with the checkpoint's own pooler weights."""
    settings, weights = dense_folder / "config.json", dense_folder / "model.safetensors"
    if not (settings.is_file() and weights.is_file()):
        return False
    if not read_json(settings).get("activation_function", "").endswith(".Tanh"):
        return False
    dense, (tensors, _) = load_file(weights), normalise_names(read_state_dict(checkpoint))
    return all(name in dense and f"pooler.dense.{part}" in tensors
               and torch.equal(dense[name], tensors[f"pooler.dense.{part}"])
               for name, part in (("linear.weight", "weight"), ("linear.bias", "bias")))


def describe_base_model(base_model: str) -> tuple[str | None, str]:
    """(hub id for the card's base_model field, license) of the model a run started from.

    A local folder, or the packaged all-MiniLM-L6-v2, is described by its own model card's front matter, so
    a checkpoint trained from one of ours inherits its base model and license. Hub ids are not looked up:
    bert-base-uncased's license is known, others are "unknown".
    """
    key = base_model.lower()
    folder = base_folder(base_model)
    card = front_matter(folder / "README.md") if folder is not None else {}
    if key not in PACKAGED and folder is not None:
        hub_id = card.get("base_model")  # a local path means nothing on the hub
    else:
        hub_id = HUB_IDS.get(key, base_model)
    return hub_id, card.get("license") or KNOWN_LICENSES.get(key, UNKNOWN_LICENSE)


def front_matter(card: Path) -> dict:
    """The YAML between a model card's opening '---' lines; {} when there is no such card."""
    if not card.is_file():
        return {}
    text = card.read_text(encoding="utf-8")
    if not text.startswith("---"):
        return {}
    return yaml.safe_load(text.split("---", 2)[1]) or {}


def format_number(value) -> str:
    """Scores to 4 decimals; numbers below 0.01 (learning rates, small losses) to 4 significant digits, so that
    5e-05 stays 5e-05 instead of rounding to 0.0001."""
    if isinstance(value, bool) or not isinstance(value, float):
        return str(value)
    return f"{value:.4g}" if value and abs(value) < 0.01 else f"{value:.4f}"


def model_card(*, pooling: str, max_length: int, max_seq_length: int, normalize: bool, hidden_size: int,
               base_model: str, command: str, metrics: dict, metrics_kind: str, eval_sample: int,
               data_files: list[str], metric_names: dict[str, str]) -> str:
    hub_id, license_id = describe_base_model(base_model)
    meta = {"library_name": "sentence-transformers", "pipeline_tag": "sentence-similarity",
            "tags": ["sentence-transformers", "feature-extraction", "sentence-similarity", "transformers", "minbert"],
            **({"base_model": hub_id} if hub_id else {}), "license": license_id}
    license_text = license_id if license_id != UNKNOWN_LICENSE else "unknown, see the base model"
    if base_folder(base_model) is not None and base_model.lower() not in PACKAGED:
        base_text = f"the local checkpoint `{Path(base_model).name}`" + (f", itself from `{hub_id}`" if hub_id else "")
    else:
        base_text = f"`{hub_id}`"
    data = "\n".join(f"- `{Path(file).name}`" for file in data_files)
    length_words = (", scaled to length 1 as the base model's are: their dot product is their cosine"
                    if normalize else "")
    normalize_code = "\nembeddings = torch.nn.functional.normalize(embeddings, dim=-1)" if normalize else ""
    pooling_code = TRANSFORMERS_POOLING[pooling] + normalize_code
    return f"""---
{yaml.safe_dump(meta, sort_keys=False).strip()}
---

# BERT sentence encoder trained with minBERT

A BERT encoder trained from {base_text} with the minBERT toolkit. A sentence's embedding is
{POOLING_WORDS[pooling]} ({hidden_size} numbers{length_words}); compare two sentences by the cosine
similarity of their embeddings. Inputs longer than {max_seq_length} tokens are truncated; in training they
were cut at {max_length} tokens.

## Base model

{base_text}; license: {license_text}.

## Training data

{data}

## Training command

Local paths are shortened to their last part.

```bash
{without_local_paths(command)}
```

{metrics_section(metrics_kind, metrics, metric_names, eval_sample)}
## Usage

Each snippet computes the same embeddings. Put this folder's path (or its hub id) in `folder`.

With minBERT (this project, from its repository root):

```python
from minbert.models import SentenceEncoder

folder = "{FOLDER_PLACEHOLDER}"
sentences = ["A man is playing a guitar.", "Someone plays the guitar on a stage tonight."]
embeddings = SentenceEncoder.from_pretrained(folder).encode(sentences)
```

With transformers:

```python
import torch
from transformers import AutoModel, AutoTokenizer

folder = "{FOLDER_PLACEHOLDER}"
sentences = ["A man is playing a guitar.", "Someone plays the guitar on a stage tonight."]
tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
batch = tokenizer(sentences, padding=True, truncation=True, max_length={max_seq_length}, return_tensors="pt")
with torch.no_grad():
    output = model(**batch)
{pooling_code}
```

With sentence-transformers:

```python
from sentence_transformers import SentenceTransformer

folder = "{FOLDER_PLACEHOLDER}"
sentences = ["A man is playing a guitar.", "Someone plays the guitar on a stage tonight."]
embeddings = SentenceTransformer(folder).encode(sentences, convert_to_tensor=True)
```
"""


def flatten(metrics: dict, prefix: str = ""):
    """(dotted name, value) pairs of a nested metrics dict: {"after": {"sts12": 77.1}} -> ("after.sts12", 77.1)."""
    for key, value in metrics.items():
        if isinstance(value, dict):
            yield from flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def metrics_section(kind: str, metrics: dict, metric_names: dict[str, str] | None = None, eval_sample: int = 0) -> str:
    """The card's section of one kind of numbers (METRICS_TITLES): its title, what they are, and their table."""
    metric_names = metric_names or {}
    rows = "\n".join(f"| {metric_names[name]} (`{name}`) | {format_number(value)} |" if name in metric_names
                     else f"| {name} | {format_number(value)} |" for name, value in flatten(metrics))
    sample = (f" Scored on a random sample of at most {eval_sample:,} examples of each dev set "
              f"(`--max-eval-examples {eval_sample}`), not on the full dev sets." if eval_sample and kind == "dev"
              else "")
    words = METRICS_WORDS[kind] + (BEFORE_AFTER_WORDS if kind == "sts-benchmark" and "before" in metrics else "")
    return f"## {METRICS_TITLES[kind]}\n\n{words}{sample}\n\n| metric | value |\n|---|---|\n{rows}\n"


def update_card(folder: str | Path, kind: str, metrics: dict) -> bool:
    """Write the section of `kind` into the model card of one of our folders: in place of the section of that kind
    it has, else before its usage. False, and nothing written, when the folder holds no card of ours."""
    card = Path(folder) / "README.md"
    if "minbert" not in front_matter(card).get("tags", []):
        return False
    section = metrics_section(kind, metrics) + "\n"
    parts = re.split(r"(?m)^(?=## )", card.read_text(encoding="utf-8"))  # each part a heading and its text
    titles = [part.splitlines()[0] for part in parts]
    title = section.splitlines()[0]
    if title in titles:
        parts[titles.index(title)] = section
    else:
        parts.insert(titles.index("## Usage"), section)
    with atomic_file(card) as temp:
        temp.write_text("".join(parts), encoding="utf-8")
    return True
