"""An encoder's checkpoint files, written atomically: the Hugging Face layout, so `--model FOLDER` loads the encoder
anywhere (transformers' BertModel.from_pretrained too):
    config.json, model.safetensors, tokenizer files   the encoder
    the run config, metrics.json                       how it was trained and how it scored (common/run_folder.py)
A checkpoint of ours adds its heads and what sentence-transformers reads (checkpoint.py), and in last/ the training
state (engine/engine.py). Files and folders are written to a temporary name and renamed into place, so a run that
dies while saving leaves the previous checkpoint, never half of a new one.
"""
from pathlib import Path

from safetensors.torch import save_file

from minbert.common.files import atomic_directory, write_json
from minbert.common.run_folder import write_config
from minbert.models.bert import BertModel
from minbert.models.loading import checkpoint_names
from minbert.models.tokenizer import Tokenizer

def tensor_bytes(tensors) -> int:
    """The bytes of these tensors, as a checkpoint holds them: about the disk space a save of them needs."""
    return sum(tensor.numel() * tensor.element_size() for tensor in tensors)


def write_encoder_folder(folder: Path, encoder: BertModel, tokenizer: Tokenizer, run_config: dict | None,
                         metrics: dict | None = None) -> None:
    """Write an encoder's checkpoint files into an existing (temporary) folder. run_config None: the caller writes
    the run config itself."""
    write_json(folder / "config.json", encoder.config.to_dict())
    tensors = checkpoint_names(encoder.state_dict(), encoder.config.model_type)
    save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, folder / "model.safetensors")
    tokenizer.backend.save_pretrained(folder)
    if run_config is not None:
        write_config(folder, run_config)
    write_json(folder / "metrics.json", metrics or {})


def save_checkpoint(path: str | Path, encoder: BertModel, tokenizer: Tokenizer, run_config: dict,
                    metrics: dict | None = None) -> Path:
    """Write an encoder's checkpoint folder atomically (see write_encoder_folder)."""
    path = Path(path)
    with atomic_directory(path) as temp:
        write_encoder_folder(temp, encoder, tokenizer, run_config, metrics)
    return path
