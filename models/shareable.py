"""Make a checkpoint folder usable without this project: by sentence-transformers, transformers and people.

save_checkpoint writes config.json, model.safetensors and the tokenizer files; write_shareable_files adds
    modules.json, sentence_bert_config.json, 1_Pooling/config.json   SentenceTransformer(folder) computes our
                                                                     embeddings, with the run's pooling
    2_Dense/ (pooling "pooler" only)                                  BERT's pooler, tanh(dense([CLS])), as a layer
    README.md                                                         the model card
and names the architecture in config.json. Without these files SentenceTransformer(folder) still loads, but
silently mean-pools: a [CLS]-trained encoder would give other embeddings than ours.
The sentence-transformers files use its original layout (module types under sentence_transformers.models,
pooling_mode_* flags): versions 2 to 6 all read it.
"""
from pathlib import Path

import yaml
from safetensors.torch import save_file

from common.errors import CheckpointError
from common.files import atomic_file, read_json, write_json
from models.loading import PACKAGED, normalise_names, packaged_folder, read_state_dict
from models.sentence_embedding import POOLINGS

# Licenses of base models whose folders carry no model card to read them from.
KNOWN_LICENSES = {"bert-base-uncased": "apache-2.0", "google-bert/bert-base-uncased": "apache-2.0"}
# Hub ids of the short names models.from_pretrained accepts (PACKAGED).
HUB_IDS = {"all-minilm-l6-v2": "sentence-transformers/all-MiniLM-L6-v2"}
UNKNOWN_LICENSE = "unknown"
# The card's snippets load from here; whoever downloads the folder puts its path (or hub id) in its place.
FOLDER_PLACEHOLDER = "path/to/this/folder"

POOLING_WORDS = {"cls": "the final [CLS] vector", "mean": "the mean of the final token vectors (padding excluded)",
                 "pooler": "BERT's pooler output, tanh(dense([CLS]))"}
# The same pooling written out on transformers.BertModel's output, for the card.
TRANSFORMERS_POOLING = {
    "cls": "embeddings = output.last_hidden_state[:, 0]",
    "mean": 'mask = batch["attention_mask"].unsqueeze(-1).float()\n'
            "embeddings = (output.last_hidden_state * mask).sum(1) / mask.sum(1)",
    "pooler": "embeddings = output.pooler_output",
}


def write_shareable_files(folder: str | Path, *, pooling: str, max_length: int, base_model: str, command: str,
                          metrics: dict, data_files: list[str]) -> None:
    """Add the sentence-transformers files and a model card to a checkpoint folder written by save_checkpoint.

    pooling and max_length: the run's (SentenceTransformer(folder) then embeds as embed_sentences does);
    base_model: what the run started from (hub id, folder, or all-MiniLM-L6-v2), for the card's base model
    and license; command: the exact command line; metrics: the dev metrics to show (nested dicts are fine);
    data_files: the training data files. Each file is written atomically.
    """
    folder = Path(folder)
    if pooling not in POOLINGS:
        raise ValueError(f"pooling {pooling!r} is not one of {POOLINGS}")
    if not (folder / "config.json").is_file():
        raise CheckpointError(f"{folder}: no config.json; write the checkpoint with save_checkpoint first")
    config = read_json(folder / "config.json") | {"architectures": ["BertModel"], "model_type": "bert"}
    hidden_size = config["hidden_size"]
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    # sentence-transformers has no pooler pooling; [CLS] pooling followed by a Dense tanh layer holding the
    # pooler's weights computes exactly tanh(dense([CLS])).
    if pooling == "pooler":
        write_pooler_as_dense(folder / "2_Dense", folder, hidden_size)
        modules.append({"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    write_json(folder / "1_Pooling" / "config.json", {
        "word_embedding_dimension": hidden_size,
        "pooling_mode_cls_token": pooling in ("cls", "pooler"), "pooling_mode_mean_tokens": pooling == "mean",
        "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False})
    # Lower-casing stays the tokenizer's business (tokenizer_config.json), as in embed_sentences.
    write_json(folder / "sentence_bert_config.json", {"max_seq_length": max_length, "do_lower_case": False})
    write_json(folder / "config.json", config)
    with atomic_file(folder / "README.md") as temp:
        temp.write_text(model_card(pooling=pooling, max_length=max_length, hidden_size=hidden_size,
                                   base_model=base_model, command=command, metrics=metrics, data_files=data_files),
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


def describe_base_model(base_model: str) -> tuple[str | None, str]:
    """(hub id for the card's base_model field, license) of the model a run started from.

    A local folder, or the packaged all-MiniLM-L6-v2, is described by its own model card's front matter, so
    a checkpoint trained from one of ours inherits its base model and license. Hub ids are not looked up:
    bert-base-uncased's license is known, others are "unknown".
    """
    key = base_model.lower()
    folder = packaged_folder(PACKAGED[key]) if key in PACKAGED else Path(base_model).expanduser()
    card = front_matter(folder / "README.md") if folder is not None else {}
    if key not in PACKAGED and folder.is_dir():
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


def model_card(*, pooling: str, max_length: int, hidden_size: int, base_model: str, command: str, metrics: dict,
               data_files: list[str]) -> str:
    hub_id, license_id = describe_base_model(base_model)
    meta = {"library_name": "sentence-transformers", "pipeline_tag": "sentence-similarity",
            "tags": ["sentence-transformers", "feature-extraction", "sentence-similarity", "transformers", "minbert"],
            **({"base_model": hub_id} if hub_id else {}), "license": license_id}
    license_text = license_id if license_id != UNKNOWN_LICENSE else "unknown, see the base model"
    metric_rows = "\n".join(f"| {name} | {value:.4f} |" if isinstance(value, float) else f"| {name} | {value} |"
                            for name, value in flatten(metrics))
    data = "\n".join(f"- `{file}`" for file in data_files)
    pooling_code = TRANSFORMERS_POOLING[pooling]
    return f"""---
{yaml.safe_dump(meta, sort_keys=False).strip()}
---

# BERT sentence encoder trained with minBERT

A BERT encoder trained from `{base_model}` with the minBERT toolkit. A sentence's embedding is
{POOLING_WORDS[pooling]} ({hidden_size} numbers; inputs are truncated to {max_length} tokens); compare two
sentences by the cosine similarity of their embeddings.

## Base model

`{base_model}`; license: {license_text}.

## Training data

{data}

## Training command

```bash
{command}
```

## Dev metrics

| metric | value |
|---|---|
{metric_rows}

## Usage

Each snippet computes the same embeddings. Put this folder's path (or its hub id) in `folder`.

With minBERT (this project):

```python
from models import Tokenizer, embed_sentences, from_pretrained

folder = "{FOLDER_PLACEHOLDER}"
sentences = ["A man is playing a guitar.", "Someone plays the guitar on a stage tonight."]
encoder, tokenizer = from_pretrained(folder), Tokenizer.from_pretrained(folder)
embeddings = embed_sentences(encoder, tokenizer, sentences, pooling="{pooling}", max_length={max_length})
```

With transformers:

```python
import torch
from transformers import AutoTokenizer, BertModel

folder = "{FOLDER_PLACEHOLDER}"
sentences = ["A man is playing a guitar.", "Someone plays the guitar on a stage tonight."]
tokenizer, model = AutoTokenizer.from_pretrained(folder), BertModel.from_pretrained(folder).eval()
batch = tokenizer(sentences, padding=True, truncation=True, max_length={max_length}, return_tensors="pt")
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
    """(dotted name, value) pairs of a nested metrics dict: {"dev": {"sst": 0.5}} -> ("dev.sst", 0.5)."""
    for key, value in metrics.items():
        if isinstance(value, dict):
            yield from flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value
