"""The multitask model: one shared encoder, pooled sentence embeddings, one head per task."""
import torch
from torch import nn

from heads import CommonLayer, pair_mlps
from heads.paraphrase import CrossEncodedPairHead, ParaphraseHead
from heads.sentiment import SentimentHead
from heads.similarity import CrossEncodedSimilarityHead, SimilarityHead
from models.bert import BertModel
from models.sentence_embedding import pool


class MultitaskModel(nn.Module):
    """Task outputs from batches of data.tasks.TaskSplit.batch:

    sst:  [B, 5] class logits
    para: [B] paraphrase logits
    sts:  [B] similarity scores in [0, 5]
    """

    def __init__(self, encoder: BertModel, pooling: str = "cls", para_encoding: str = "bi", sts_encoding: str = "bi",
                 share: str = "first-layer", common_layer: bool = False, head_dropout: float = 0.3,
                 cross_head: str = "dpha", pair_mlp: str = "residual"):
        super().__init__()
        hidden = encoder.config.hidden_size
        self.encoder, self.pooling = encoder, pooling
        self.common = CommonLayer(hidden) if common_layer else None
        self.sentiment = SentimentHead(hidden, dropout=head_dropout)
        # The paraphrase and STS MLPs can only be shared when both tasks embed sentences apart.
        both_bi = para_encoding == sts_encoding == "bi"
        paraphrase_mlp, similarity_mlp = pair_mlps(share if both_bi else "none", hidden, dropout=head_dropout,
                                                   kind=pair_mlp)
        self.paraphrase = (ParaphraseHead(paraphrase_mlp) if para_encoding == "bi"
                           else CrossEncodedPairHead(hidden, cross_head, head_dropout))
        self.similarity = (SimilarityHead(similarity_mlp) if sts_encoding == "bi"
                           else CrossEncodedSimilarityHead(hidden, cross_head, head_dropout))

    def embed(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        embedding = pool(self.encoder(**inputs), inputs["attention_mask"], self.pooling)
        return embedding if self.common is None else self.common(embedding)

    def forward(self, task: str, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        embeddings = self.embed(inputs)
        if task == "sst":
            return self.sentiment(embeddings)
        first, second = embeddings.chunk(2)  # the two views of each pair (see TaskSplit.batch)
        return (self.paraphrase if task == "para" else self.similarity)(first, second)

    def head_parameters(self) -> dict[str, list[nn.Parameter]]:
        """Each task's own head parameters (shared pair-MLP layers appear under both pair tasks)."""
        return {"sst": list(self.sentiment.parameters()), "para": list(self.paraphrase.parameters()),
                "sts": list(self.similarity.parameters())}

    def shared_parameters(self) -> list[nn.Parameter]:
        """What every task uses: the encoder and the optional common layer."""
        return list(self.encoder.parameters()) + (list(self.common.parameters()) if self.common else [])
