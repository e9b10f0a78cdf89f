"""minBERT: our BERT encoder, its loading, tokenizer, pooling and AdamW."""
from common.errors import CheckpointError
from models.bert import ATTENTION, BertModel, BertOutput
from models.compile import compile_encoder
from models.config import BertConfig
from models.loading import from_pretrained
from models.optimizer import AdamW
from models.sentence_embedding import POOLINGS, TOKEN_POOLINGS, embed_sentences, embed_sentences_every_layer, pool
from models.sentence_encoder import SentenceEncoder
from models.tokenizer import Tokenizer
