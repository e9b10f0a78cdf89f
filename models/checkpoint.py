"""Checkpoints: written atomically, readable by every command, resumable.

A checkpoint is a folder in the Hugging Face layout, so `--model FOLDER` loads its encoder anywhere
(transformers' BertModel.from_pretrained too):
    config.json, model.safetensors, tokenizer files   the encoder
    heads.safetensors                                  task heads / anything beyond the encoder (optional)
    the run config, metrics.json                       how it was trained and how it scored (common/run_folder.py)
    the training state                                 in last/: what --resume needs (training/engine.py)
Files and folders are written to a temporary name and renamed into place, so a run that dies while
saving leaves the previous checkpoint, never half of a new one.
"""
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from common.errors import CheckpointError
from common.files import atomic_directory, load_or_fail, write_json
from common.run_folder import write_config
from models.bert import BertModel
from models.tokenizer import Tokenizer

ENCODER_PREFIX = "encoder."


def tensor_bytes(tensors) -> int:
    """The bytes of these tensors, as a checkpoint holds them: about the disk space a save of them needs."""
    return sum(tensor.numel() * tensor.element_size() for tensor in tensors)


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


def write_encoder_folder(folder: Path, encoder: BertModel, tokenizer: Tokenizer, run_config: dict | None,
                         metrics: dict | None = None, extra_modules: nn.Module | None = None) -> None:
    """Write a checkpoint's files into an existing (temporary) folder. extra_modules: a module holding `encoder`
    (its other tensors go to heads.safetensors). run_config None: the caller writes the run config itself."""
    write_json(folder / "config.json", encoder.config.to_dict())
    save_file({k: v.detach().contiguous().cpu() for k, v in encoder.state_dict().items()},
              folder / "model.safetensors")
    tokenizer.backend.save_pretrained(folder)
    if extra_modules is not None:
        rest = {k: v for k, v in extra_modules.state_dict().items() if not k.startswith(ENCODER_PREFIX)}
        save_file(_without_aliases(rest), folder / "heads.safetensors")
    if run_config is not None:
        write_config(folder, run_config)
    write_json(folder / "metrics.json", metrics or {})


def save_checkpoint(path: str | Path, encoder: BertModel, tokenizer: Tokenizer, run_config: dict,
                    metrics: dict | None = None, extra_modules: nn.Module | None = None) -> Path:
    """Write a checkpoint folder atomically (see write_encoder_folder)."""
    path = Path(path)
    with atomic_directory(path) as temp:
        write_encoder_folder(temp, encoder, tokenizer, run_config, metrics, extra_modules)
    return path


def load_heads(module: nn.Module, path: str | Path) -> None:
    """Load heads.safetensors into `module` (the encoder is loaded by models.from_pretrained)."""
    file = Path(path) / "heads.safetensors"
    tensors = load_or_fail(file, load_file, "the heads")
    expected = {k for k in module.state_dict() if not k.startswith(ENCODER_PREFIX)}
    result = module.load_state_dict(tensors, strict=False)
    aliases = {k for k in expected - set(tensors)
               if any(module.state_dict()[k].data_ptr() == module.state_dict()[t].data_ptr() for t in tensors)}
    missing = set(result.missing_keys) & expected - aliases
    if missing or result.unexpected_keys:
        raise CheckpointError(f"{file}: heads do not match this model (missing {sorted(missing)}, "
                         f"unexpected {sorted(result.unexpected_keys)}); train with the same head flags")
