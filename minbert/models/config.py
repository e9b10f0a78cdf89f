"""The encoder's hyperparameters, read from a checkpoint's config.json.

One encoder serves three families of checkpoints; what sets them apart is a few fields here, each with its
family's value filled in from `model_type` when the config.json leaves it out:
- bert (Devlin et al., 2019): learned positions 0..T-1, token types (sentence A or B);
- roberta (Liu et al., 2019): the same layers, positions counted from pad_token_id + 1 (fairseq's convention);
- mpnet (Song et al., 2020): RoBERTa's positions, no token types, and a T5-style relative position bias
  (relative_attention_num_buckets buckets per head) computed once and added to every layer's attention scores.
"""
import dataclasses
from dataclasses import dataclass
from pathlib import Path

from minbert.common.errors import CheckpointError
from minbert.common.files import read_json

# What each family's config.json leaves to its model class, and the values that class assumes.
FAMILY_DEFAULTS = {
    "bert": {},
    "roberta": {"positions_after_padding": True},
    "mpnet": {"positions_after_padding": True, "type_vocab_size": 0, "relative_attention_num_buckets": 32},
}
FAMILIES = tuple(FAMILY_DEFAULTS)
# transformers' model class for each family, named in a saved config.json (AutoModel reads it).
ARCHITECTURES = {"bert": "BertModel", "roberta": "RobertaModel", "mpnet": "MPNetModel"}


def architecture_family(name) -> str | None:
    """The family of a transformers class named in config.json's architectures (BertForMaskedLM: bert), or None for
    a class of none of ours."""
    return next((family for family, model in ARCHITECTURES.items()
                 if isinstance(name, str) and name.startswith(model.removesuffix("Model"))), None)


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
    type_vocab_size: int = 2  # 0: no token-type embeddings (MPNet)
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    model_type: str = "bert"  # the family: its parameter names in a checkpoint, and the defaults below
    positions_after_padding: bool = False  # a real token's position is pad_token_id + 1 + its index (RoBERTa, MPNet)
    relative_attention_num_buckets: int = 0  # > 0: MPNet's relative position bias, in that many buckets a head

    def __post_init__(self):
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of "
                             f"num_attention_heads {self.num_attention_heads}")
        if self.model_type not in FAMILY_DEFAULTS:
            raise ValueError(f"model_type is {self.model_type!r}; this encoder loads {', '.join(FAMILIES)}")

    @property
    def first_position(self) -> int:
        """The position of an input's first token: 0, or RoBERTa's and MPNet's pad_token_id + 1 (fairseq's)."""
        return self.pad_token_id + 1 if self.positions_after_padding else 0

    @property
    def longest_input(self) -> int:
        """The most tokens an input may have: the positions from first_position on (512 of all-mpnet-base-v2's 514)."""
        return self.max_position_embeddings - self.first_position

    @classmethod
    def from_dict(cls, values: dict) -> "BertConfig":
        # Hugging Face configs carry many more keys (architectures, torch_dtype, ...): keep only ours.
        known = {f.name for f in dataclasses.fields(cls)}
        family = FAMILY_DEFAULTS.get(values.get("model_type", "bert"), {})
        return cls(**{**family, **{k: v for k, v in values.items() if k in known}})

    @classmethod
    def from_json(cls, path: str | Path) -> "BertConfig":
        path = Path(path)
        values = read_json(path)
        if not isinstance(values, dict):
            raise CheckpointError(f"{path}: not an encoder config (a JSON object of hidden_size, num_hidden_layers, ...)")
        model_type = values.get("model_type", "bert")
        if model_type not in FAMILY_DEFAULTS:
            raise CheckpointError(f"{path}: model_type is {model_type!r}; this encoder loads "
                                  f"{', '.join(FAMILIES)} checkpoints only")
        saved_by = [name for name in values.get("architectures") or [] if architecture_family(name) not in
                    (None, model_type)]
        if saved_by:  # a folder relabelled by hand: its weights are another family's
            raise CheckpointError(f"{path}: model_type is {model_type!r}, but the weights were saved by "
                                  f"{saved_by[0]} (architectures), a {architecture_family(saved_by[0])} model; set "
                                  f"model_type to {architecture_family(saved_by[0])!r}")
        try:
            return cls.from_dict(values)
        except (TypeError, ValueError) as error:
            raise CheckpointError(f"{path}: not a usable {model_type} config ({error})") from None

    def to_dict(self) -> dict:
        """config.json's contents: loadable by us and by transformers' class for the family (AutoModel)."""
        return {"architectures": [ARCHITECTURES[self.model_type]], **dataclasses.asdict(self)}
