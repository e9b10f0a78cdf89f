"""The encoder's hyperparameters, read from a checkpoint's config.json."""
import dataclasses
from dataclasses import dataclass
from pathlib import Path

from minbert.common.errors import CheckpointError
from minbert.common.files import read_json


@dataclass
class BertConfig:
    """The encoder's shape and hyperparameters, as a checkpoint's config.json gives them (bert-base's by default)."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0

    def __post_init__(self):
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of "
                             f"num_attention_heads {self.num_attention_heads}")

    @classmethod
    def from_dict(cls, values: dict) -> "BertConfig":
        # Hugging Face configs carry many more keys (architectures, torch_dtype, ...): keep only ours.
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})

    @classmethod
    def from_json(cls, path: str | Path) -> "BertConfig":
        path = Path(path)
        values = read_json(path)
        if not isinstance(values, dict):
            raise CheckpointError(f"{path}: not a BERT config (a JSON object of hidden_size, num_hidden_layers, ...)")
        model_type = values.get("model_type", "bert")
        if model_type != "bert":
            raise CheckpointError(f"{path}: model_type is {model_type!r}; this encoder loads BERT checkpoints only")
        try:
            return cls.from_dict(values)
        except (TypeError, ValueError) as error:
            raise CheckpointError(f"{path}: not a usable BERT config ({error})") from None

    def to_dict(self) -> dict:
        return {"model_type": "bert", **dataclasses.asdict(self)}
