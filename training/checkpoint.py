"""Checkpoints: written atomically, readable by every command, resumable.

A checkpoint is a folder in the Hugging Face layout, so `--model FOLDER` loads its encoder anywhere
(transformers' BertModel.from_pretrained too):
    config.json, model.safetensors, tokenizer files   the encoder
    heads.safetensors                                  task heads / anything beyond the encoder (optional)
    run_config.json, metrics.json                      how it was trained and how it scored
    training_state.pt                                  optimizer, schedule, position and RNG (for --resume)
Files and folders are written to a temporary name and renamed into place, so a run that dies while
saving leaves the previous checkpoint, never half of a new one.
"""
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from models.bert import BertModel
from models.loading import CheckpointError
from models.tokenizer import Tokenizer

ENCODER_PREFIX = "encoder."


@contextmanager
def atomic_file(path: str | Path):
    """Yield a temporary path next to `path`; on success it replaces `path` in one rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        yield Path(temp)
        os.chmod(temp, 0o644)  # mkstemp makes 0600 files; outputs are meant to be shared
        os.replace(temp, path)
    finally:
        Path(temp).unlink(missing_ok=True)


@contextmanager
def atomic_directory(path: str | Path):
    """Yield a temporary folder; on success it takes the place of `path` (the old one is removed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        yield temp
        old = path.with_name(f".{path.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        if path.exists():
            path.rename(old)
        temp.rename(path)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def write_json(path: str | Path, value) -> None:
    with atomic_file(path) as temp:
        temp.write_text(json.dumps(value, indent=2, default=str) + "\n", encoding="utf-8")


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


def save_checkpoint(path: str | Path, encoder: BertModel, tokenizer: Tokenizer, run_config: dict,
                    metrics: dict | None = None, extra_modules: nn.Module | None = None,
                    training_state: dict | None = None) -> Path:
    """Write a checkpoint folder. extra_modules: a module holding `encoder` (its other tensors are saved)."""
    path = Path(path)
    with atomic_directory(path) as temp:
        (temp / "config.json").write_text(json.dumps(encoder.config.to_dict(), indent=2) + "\n")
        save_file({k: v.detach().contiguous().cpu() for k, v in encoder.state_dict().items()},
                  temp / "model.safetensors")
        tokenizer.backend.save_pretrained(temp)
        if extra_modules is not None:
            rest = {k: v for k, v in extra_modules.state_dict().items() if not k.startswith(ENCODER_PREFIX)}
            save_file(_without_aliases(rest), temp / "heads.safetensors")
        (temp / "run_config.json").write_text(json.dumps(run_config, indent=2, default=str) + "\n")
        (temp / "metrics.json").write_text(json.dumps(metrics or {}, indent=2) + "\n")
        if training_state is not None:
            torch.save(training_state, temp / "training_state.pt")
    return path


def load_heads(module: nn.Module, path: str | Path) -> None:
    """Load heads.safetensors into `module` (the encoder is loaded by models.from_pretrained)."""
    file = Path(path) / "heads.safetensors"
    tensors = load_file(file)
    expected = {k for k in module.state_dict() if not k.startswith(ENCODER_PREFIX)}
    result = module.load_state_dict(tensors, strict=False)
    aliases = {k for k in expected - set(tensors)
               if any(module.state_dict()[k].data_ptr() == module.state_dict()[t].data_ptr() for t in tensors)}
    missing = set(result.missing_keys) & expected - aliases
    if missing or result.unexpected_keys:
        raise CheckpointError(f"{file}: heads do not match this model (missing {sorted(missing)}, "
                         f"unexpected {sorted(result.unexpected_keys)}); train with the same head flags")


def read_json(path: str | Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def load_training_state(path: str | Path) -> dict:
    # Tensors, numbers, strings and containers only: weights_only refuses anything executable.
    return torch.load(Path(path) / "training_state.pt", map_location="cpu", weights_only=True)
