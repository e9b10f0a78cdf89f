"""A checkpoint of ours, the one module that knows its files: multitask_classifier.py's best/ and last/, and
pretrain_contrastive.py's output folder(s). save() writes one; load() rebuilds the multitask model from one.

    config.json, model.safetensors, tokenizer files   the encoder, in Hugging Face's layout (models/checkpoint.py):
                                                      --model FOLDER loads it anywhere, transformers' BertModel too
    heads.safetensors                                 the task heads (a multitask checkpoint)
    run_config.json, metrics.json                     every flag it was trained with, the head flags among them
                                                      (they say what the heads compute), and how it scored
    modules.json, 1_Pooling/, README.md, ...          what sentence-transformers reads, and a model card
                                                      (models/shareable.py)
"""
import dataclasses
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from minbert.common import run_folder
from minbert.common.cli import as_flag
from minbert.common.errors import CheckpointError
from minbert.common.files import load_or_fail
from minbert.model import MultitaskModel, build_model
from minbert.model_config import ModelConfig, parse_pair_encoding
from minbert.models import BertModel, Tokenizer
from minbert.models.checkpoint import write_encoder_folder
from minbert.models.compile import compile_encoder
from minbert.models.loading import check_finite
from minbert.models.shareable import write_shareable_files

HEADS = "heads.safetensors"
ENCODER_PREFIX = "encoder."  # the encoder's tensors in a MultitaskModel's state dict (they go to model.safetensors)


def has_heads(folder: str | Path) -> bool:
    return (Path(folder) / HEADS).is_file()


def save(folder: Path, encoder: BertModel, tokenizer: Tokenizer, record: dict, *, model: nn.Module | None = None,
         run_config: dict | None = None, **card) -> None:
    """Write a checkpoint into an existing (temporary) folder: the encoder; the heads, where `model` (a module
    holding the encoder, a MultitaskModel) has them; the run config (None: the run folder's save writes it);
    metrics.json (record); the sentence-transformers files and the model card (card: write_shareable_files'
    arguments)."""
    write_encoder_folder(folder, encoder, tokenizer, run_config, record)
    if model is not None:
        heads = {name: tensor for name, tensor in model.state_dict().items() if not name.startswith(ENCODER_PREFIX)}
        save_file(_without_aliases(heads), folder / HEADS)
    write_shareable_files(folder, **card)


def _without_aliases(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    # Heads may share a layer (one tensor under two names); safetensors stores each tensor once,
    # and loading into either name fills both.
    seen, unique = set(), {}
    for name, tensor in tensors.items():
        key = (tensor.data_ptr(), tensor.shape)
        if key not in seen:
            seen.add(key)
            unique[name] = tensor.detach().contiguous().cpu()
    return unique


def model_config(folder: str | Path) -> ModelConfig:
    """The model flags a multitask checkpoint was trained with (every head flag recorded, or it is refused)."""
    head_flags(folder)  # every one recorded
    saved = run_folder.read_config(folder)
    try:
        return ModelConfig(**{f.name: saved[f.name] for f in dataclasses.fields(ModelConfig) if f.name in saved})
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{run_folder.config_file(folder)}: not a multitask run's configuration "
                              f"({error})") from None


def load(folder: str | Path, config: ModelConfig, *, heads: bool = True, device: torch.device | str = "cpu",
         attention: str = "auto", compile: bool = False, static_shapes: bool = False,
         cuda_graphs: bool = False, partial: bool = False) -> MultitaskModel:
    """The multitask model of config's flags with the checkpoint's encoder and, where it has them (and heads is
    True), its heads, once its run config shows they were trained with config's head flags; on `device`, its
    encoder run as --attention and --compile say (and models.compile_encoder's static_shapes and cuda_graphs).
    `folder` may be a hub id or all-MiniLM-L6-v2 with heads=False (a run's --model: new heads). partial:
    --allow-partial-load, for the encoder's weights."""
    model = build_model(config, folder, partial)
    if heads and has_heads(folder):
        check_head_flags(config, Path(folder))
        _load_heads(model, Path(folder) / HEADS)
    model.to(device)
    model.encoder.attention = attention
    if compile or cuda_graphs:  # in place, on the device: the parameters keep their names
        compile_encoder(model.encoder, static_shapes, cuda_graphs, inductor=compile)
    return model


def head_flags(folder: str | Path) -> dict:
    """The head flags a checkpoint's heads were trained with, from its run config. A checkpoint that does not
    record one (saved before the flag existed) is refused: the heads' tensors alone do not say what they compute."""
    if not run_folder.has_config(folder):
        raise CheckpointError(f"{folder}: heads without {run_folder.RUN_CONFIG}, which says what they compute")
    saved = run_folder.read_config(folder)
    missing = [name for name in ModelConfig.HEAD_FIELDS if name not in saved]
    if missing:
        raise CheckpointError(f"{run_folder.config_file(folder)}: records no --{missing[0].replace('_', '-')} (saved "
                              f"before the flag existed), and what its heads compute depends on it; add "
                              f"\"{missing[0]}\" with the value they were trained with")
    return {name: saved[name] for name in ModelConfig.HEAD_FIELDS}


def check_head_flags(config: ModelConfig, folder: Path) -> None:
    """Refuse a checkpoint whose heads were trained under other head flags."""
    saved, ours = head_flags(folder), dataclasses.asdict(config)

    def comparable(name, value):  # "para=cross" and "para=cross,sts=bi" are the same encodings
        return parse_pair_encoding(value) if name == "pair_encoding" else value

    differ = [name for name in ModelConfig.HEAD_FIELDS if comparable(name, saved[name]) != comparable(name, ours[name])]
    if differ:
        flags = " ".join(as_flag(name, saved[name]) for name in differ)
        raise CheckpointError(f"{folder}: its heads were trained with {flags}; start with the same flags to use them")


def _load_heads(model: MultitaskModel, file: Path) -> None:
    tensors = load_or_fail(file, load_file, "the heads")
    state = model.state_dict()
    wrong = next((name for name, tensor in tensors.items() if name in state and state[name].shape != tensor.shape),
                 None)
    if wrong is not None:
        raise CheckpointError(f"{file}: {wrong} has shape {tuple(tensors[wrong].shape)}, where the head flags of its "
                              f"run config make it {tuple(state[wrong].shape)}; these heads are not the ones their run "
                              f"config describes")
    check_finite(tensors, str(file))
    expected = {name for name in state if not name.startswith(ENCODER_PREFIX)}
    result = model.load_state_dict(tensors, strict=False)
    aliases = {name for name in expected - set(tensors)
               if any(state[name].data_ptr() == state[saved].data_ptr() for saved in tensors)}
    missing = set(result.missing_keys) & expected - aliases
    if missing or result.unexpected_keys:
        raise CheckpointError(f"{file}: heads do not match this model (missing {sorted(missing)}, "
                              f"unexpected {sorted(result.unexpected_keys)}); train with the same head flags")
