"""training/objectives.py: each method's views and loss on each kind of batch, against the losses' own functions
(themselves checked against the papers' formulas in tests/test_losses_*.py); Contrastive Tension's schedule."""
import pytest
import torch

from minbert.data.contrastive import PairBatch, SentenceBatch, TripletBatch
from minbert.losses import multiple_negatives_ranking_loss, quora_simcse_loss, simcse_loss
from minbert.models import BertConfig, BertModel, from_pretrained
from minbert.engine.lr_schedule import CT_LR_STEPS
from minbert.training.objectives import ContrastiveTension, MultipleNegatives, SimCSE


def test_simcse_and_mnrl_losses_per_batch_kind():
    encoder = BertModel(BertConfig(vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                   intermediate_size=8))
    a, b, c = torch.randn(3, 6, 8, generator=torch.Generator().manual_seed(0))
    labels = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    pairs, triplets = PairBatch("quora", {}, {}, labels), TripletBatch("nli", {}, {}, {})
    sentences = SentenceBatch("s", {})
    simcse = SimCSE(encoder, projection=False)
    assert torch.allclose(simcse.loss(pairs, a, b), quora_simcse_loss(a, b, labels, 0.05))
    assert torch.allclose(simcse.loss(triplets, a, b, c), simcse_loss(a, b, c))
    assert torch.allclose(SimCSE(encoder, projection=False, use_negative_pairs=False).loss(pairs, a, b),
                          simcse_loss(a[labels.bool()], b[labels.bool()]))
    mnrl = MultipleNegatives(encoder, scale=20.0)
    duplicates = labels.bool()
    assert torch.allclose(mnrl.loss(pairs, a, b), multiple_negatives_ranking_loss(a[duplicates], b[duplicates]))
    assert torch.allclose(mnrl.loss(sentences, a, b), multiple_negatives_ranking_loss(a, b, scale=20.0))


def test_ct_learning_rate_is_the_papers_step_schedule(tiny_model):
    ct = ContrastiveTension(from_pretrained(tiny_model))
    lr = {step: 1e-5 * ct.lr_multiplier(step, total_steps=50_000, warmup=0.0)
          for step in (0, 499, 500, 999, 1000, 1500, 1999, 2000, 49_999)}
    assert lr == pytest.approx({0: 1e-5, 499: 1e-5, 500: 8e-6, 999: 8e-6, 1000: 6e-6, 1500: 4e-6, 1999: 4e-6,
                                2000: 2e-6, 49_999: 2e-6})
    assert CT_LR_STEPS[0][0] == 500
