"""A model's sentence embeddings as sentence-transformers computes them:

    SentenceEncoder.from_pretrained("runs/multitask/best").encode(["A man plays a guitar."])   # [1, 384]

equals SentenceTransformer(folder).encode(...) on the same folder (tests/test_sentence_encoder.py): the folder's
pooling (its 1_Pooling/, and the pooler written as 2_Dense/), its Normalize (length-1 embeddings where the
model's are) and its max_seq_length, read by models.shareable.sentence_convention.
"""
from pathlib import Path

import torch
import torch.nn.functional as F

from minbert.common.errors import CheckpointError
from minbert.common.precision import Precision
from minbert.models.bert import BertModel
from minbert.models.loading import from_pretrained
from minbert.models.quantize import inference_precision, quantize_encoder
from minbert.models.sentence_embedding import POOLINGS, embed_sentences
from minbert.models.shareable import sentence_convention
from minbert.models.tokenizer import Tokenizer


class SentenceEncoder:
    """An encoder, its tokenizer, and how a sentence becomes one vector: pooling (cls | mean | pooler), whether
    the vector is scaled to length 1, and up to how many tokens of a sentence are read."""

    def __init__(self, encoder: BertModel, tokenizer: Tokenizer, pooling: str = "mean", normalize: bool = False,
                 max_length: int = 128, precision: str = "fp32", quantize: str = "none"):
        """precision: as --precision (common/precision.py; auto: bf16 autocast where the device computes bf16);
        quantize: as --quantize (models/quantize.py; int8: the encoder's Linear layers quantized in place)."""
        if pooling not in POOLINGS:
            raise ValueError(f"pooling {pooling!r} is not one of {POOLINGS}")
        self.encoder, self.tokenizer, self.pooling = encoder, tokenizer, pooling
        self.normalize, self.max_length, self.quantize = normalize, max_length, quantize
        device = next(encoder.parameters()).device
        self.precision = Precision(inference_precision(quantize, device, precision), device)
        self.quantized_layers = quantize_encoder(encoder, quantize)

    @classmethod
    def from_pretrained(cls, model: str | Path, pooling: str | None = None, max_length: int = 0,
                        device: str | torch.device = "cpu", precision: str = "fp32",
                        quantize: str = "none", partial: bool = False) -> "SentenceEncoder":
        """A folder, hub id or all-MiniLM-L6-v2 with its sentence-transformers settings; pooling and max_length
        (0: the model's) replace the model's own; partial: --allow-partial-load."""
        inference_precision(quantize, device, precision)  # FlagError before any loading
        convention = sentence_convention(str(model))
        pooling = pooling or convention.pooling
        if pooling is None:
            raise CheckpointError(f"{model}: its sentence-transformers modules pool in a way minBERT does not "
                                  f"compute (only {', '.join(POOLINGS)}); name one to use instead")
        encoder = from_pretrained(model, partial).to(device)
        positions = encoder.config.longest_input
        max_length = min(max_length or convention.max_seq_length or positions, positions)
        return cls(encoder, Tokenizer.from_pretrained(model), pooling, convention.normalize, max_length, precision,
                   quantize)

    def encode(self, sentences: list[str], batch_size: int = 64, progress: str = "") -> torch.Tensor:
        """[len(sentences), hidden] embeddings (in eval mode, on the CPU); progress: what a progress bar calls
        the work ("" for none)."""
        embeddings = embed_sentences(self.encoder, self.tokenizer, sentences, self.pooling, batch_size,
                                     self.max_length, progress, self.precision.autocast)
        return F.normalize(embeddings, dim=-1) if self.normalize else embeddings
