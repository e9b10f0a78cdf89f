"""minBERT: our BERT encoder, its loading, tokenizer, pooling and AdamW."""
from minbert.common.errors import CheckpointError
from minbert.models.bert import ATTENTION, BertModel, BertOutput
from minbert.models.compile import compile_encoder
from minbert.models.config import BertConfig
from minbert.models.loading import from_pretrained
from minbert.models.optimizer import AdamW
from minbert.models.sentence_embedding import (
    POOLINGS, TOKEN_POOLINGS, embed_sentences, embed_sentences_every_layer, pool)
from minbert.models.sentence_encoder import SentenceEncoder
from minbert.models.tokenizer import Tokenizer
