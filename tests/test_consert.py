"""training/consert.py: ConSERT's views."""
import torch

from data.contrastive import SentenceBatch
from models import from_pretrained
from training.consert import ConsertUnsupervised


def test_consert_unsupervised_turns_berts_dropout_off(tiny_model, tokenizer):
    encoder = from_pretrained(tiny_model).train()
    inputs = tokenizer(["the cat sat on the mat", "a dog"])
    assert not torch.equal(encoder(**inputs).last_hidden_state, encoder(**inputs).last_hidden_state)
    objective = ConsertUnsupervised(encoder, aug1="none", aug2="none").train()
    first, second = (view.embed(view.inputs) for view in objective.views(SentenceBatch("s", inputs)))
    assert torch.equal(first, second)  # only the augmentations make views differ
    shuffled = ConsertUnsupervised(encoder, aug1="shuffle", aug2="token-cutoff").train()
    first, second = (view.embed(view.inputs) for view in shuffled.views(SentenceBatch("s", inputs)))
    assert not torch.allclose(first, second)
