"""The checkpoint's own WordPiece tokenizer, through the fast tokenizers of `transformers`."""
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from minbert.common.errors import CheckpointError
from minbert.common.files import load_or_fail
from minbert.models.config import BertConfig
from minbert.models.loading import resolve_checkpoint

log = logging.getLogger(__name__)


@dataclass
class Encoded:
    """One tokenised input ([CLS] a [SEP] or [CLS] a [SEP] b [SEP]) before padding."""
    input_ids: list[int]
    token_type_ids: list[int]


def collate(inputs: list[Encoded], pad_id: int, width: int = 0) -> dict[str, torch.Tensor]:
    """Pad to the longest input of this batch (not a global maximum), so short batches stay cheap; or to `width`
    tokens (data.batching.Buckets)."""
    width = width or max(len(e.input_ids) for e in inputs)
    input_ids = torch.full((len(inputs), width), pad_id, dtype=torch.long)
    token_type_ids = torch.zeros((len(inputs), width), dtype=torch.long)
    attention_mask = torch.zeros((len(inputs), width), dtype=torch.long)
    for row, e in enumerate(inputs):
        n = len(e.input_ids)
        input_ids[row, :n] = torch.tensor(e.input_ids)
        token_type_ids[row, :n] = torch.tensor(e.token_type_ids)
        attention_mask[row, :n] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}


class Tokenizer:
    """A checkpoint's tokenizer (transformers' fast tokenizer underneath): text to padded tensors for the encoder."""

    def __init__(self, backend: PreTrainedTokenizerBase):
        self.backend = backend
        self.pad_id = backend.pad_token_id

    @classmethod
    def from_pretrained(cls, spec: str | Path) -> "Tokenizer":
        folder = resolve_checkpoint(spec)
        if not ((folder / "vocab.txt").exists() or (folder / "tokenizer.json").exists()):
            raise CheckpointError(f"{folder}: no tokenizer files (vocab.txt or tokenizer.json)")
        # tokenizer_config.json says whether the checkpoint lower-cases (uncased) or not (cased);
        # without it BERT's tokenizer lower-cases, as bert-base-uncased does.
        # A broken tokenizer.json, vocab.txt or tokenizer_config.json: one line naming the folder.
        tokenizer = cls(load_or_fail(folder, AutoTokenizer.from_pretrained, "the tokenizer files"))
        if (folder / "config.json").is_file():
            tokenizer.check_fits(BertConfig.from_json(folder / "config.json"), folder)
        return tokenizer

    def check_fits(self, config: BertConfig, folder: Path) -> None:
        """CheckpointError where the folder's tokenizer is not its model's: token ids beyond the model's embeddings
        (an index error deep inside the first step), or, for RoBERTa and MPNet, whose positions count from the
        padding id, another padding id."""
        problems = []
        if len(self.backend) > config.vocab_size:
            problems.append(f"the tokenizer has {len(self.backend):,} tokens, the model's embeddings "
                            f"{config.vocab_size:,}")
        if config.positions_after_padding and self.pad_id != config.pad_token_id:
            problems.append(f"the tokenizer pads with id {self.pad_id}, the model with {config.pad_token_id}")
        if problems:
            raise CheckpointError(f"{folder}: its tokenizer does not match its model ({'; '.join(problems)}); put "
                                  f"the model's own tokenizer files beside its weights")

    def encode(self, texts: list[str], pairs: list[str] | None = None, max_length: int = 128,
               source: str | None = "input") -> list[Encoded]:
        """Tokenise once, truncating to max_length tokens; truncations are counted and reported as coming
        from `source` (None: not reported, the caller has reported the same texts already)."""
        batch = self.backend(texts, pairs, truncation=True, max_length=max_length,
                             return_token_type_ids=True, return_attention_mask=False)
        encoded = [Encoded(ids, types) for ids, types in zip(batch["input_ids"], batch["token_type_ids"])]
        at_limit = [i for i, e in enumerate(encoded) if len(e.input_ids) == max_length]
        if at_limit and source is not None:
            # Only inputs that reached the limit can have been cut: measure those again, untruncated.
            full = self.backend([texts[i] for i in at_limit], [pairs[i] for i in at_limit] if pairs else None,
                                truncation=False, verbose=False)["input_ids"]
            truncated = sum(len(ids) > max_length for ids in full)
            if truncated:
                log.warning("%s: %d of %d inputs longer than %d tokens were truncated",
                            source, truncated, len(texts), max_length)
        return encoded

    def __call__(self, texts: list[str], pairs: list[str] | None = None, max_length: int = 128,
                 device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
        """Padded tensors for a list of sentences (or sentence pairs), ready for the encoder."""
        return {k: v.to(device) for k, v in collate(self.encode(texts, pairs, max_length), self.pad_id).items()}
