"""ConSERT augmentations: what moves, what is zeroed, how many, and what stays untouched."""
import pytest
import torch

from minbert.losses.augmentations import embedding_dropout, feature_cutoff, token_cutoff, token_shuffle

# Right padding (4 and 2 real tokens) and a left-padded row (3 real tokens), 6 positions each.
MASK = torch.tensor([[1, 1, 1, 1, 0, 0],
                     [1, 1, 0, 0, 0, 0],
                     [0, 0, 0, 1, 1, 1]])


def generator(seed):
    return torch.Generator().manual_seed(seed)


def embeddings_without_zeros(batch=3, tokens=6, hidden=10):
    return torch.rand(batch, tokens, hidden, generator=generator(123)) + 1.0


@pytest.mark.parametrize("keep_special_tokens", [False, True])
def test_shuffle_permutes_only_real_positions(keep_special_tokens):
    for seed in range(5):
        position_ids = token_shuffle(MASK, generator(seed), keep_special_tokens=keep_special_tokens)
        for row in range(3):
            real = [t for t in range(6) if MASK[row, t] == 1]
            padding = [t for t in range(6) if MASK[row, t] == 0]
            assert [position_ids[row, t].item() for t in padding] == padding
            assert sorted(position_ids[row, t].item() for t in real) == real
            if keep_special_tokens:  # [CLS] and [SEP] stay at their own positions
                assert position_ids[row, real[0]].item() == real[0]
                assert position_ids[row, real[-1]].item() == real[-1]


def test_shuffle_changes_the_order_and_depends_on_the_seed():
    mask = torch.ones(1, 8, dtype=torch.long)
    shuffles = {tuple(token_shuffle(mask, generator(seed))[0].tolist()) for seed in range(5)}
    assert any(order != tuple(range(8)) for order in shuffles)
    assert len(shuffles) > 1


def test_token_cutoff_zeroes_floor_of_rate_times_real_tokens():
    embeddings = embeddings_without_zeros()
    out = token_cutoff(embeddings, MASK, rate=0.5, generator=generator(0))
    for row, expected_cut in enumerate([2, 1, 1]):  # floor(0.5 * 4), floor(0.5 * 2), floor(0.5 * 3)
        zeroed = [t for t in range(6) if (out[row, t] == 0).all()]
        assert len(zeroed) == expected_cut
        assert all(MASK[row, t] == 1 for t in zeroed)  # only real tokens are cut
        for t in range(6):
            if t not in zeroed:
                assert torch.equal(out[row, t], embeddings[row, t])  # whole other rows untouched


def test_token_cutoff_rounds_down():
    out = token_cutoff(embeddings_without_zeros(), MASK, rate=0.15, generator=generator(0))
    assert torch.equal(out, embeddings_without_zeros())  # floor(0.15 * 4) = 0 tokens


def test_feature_cutoff_zeroes_floor_of_rate_times_hidden_dimensions_at_every_token():
    embeddings = embeddings_without_zeros(hidden=10)
    out = feature_cutoff(embeddings, MASK, rate=0.25, generator=generator(0))
    for row in range(3):
        zeroed = [d for d in range(10) if (out[row, :, d] == 0).all()]
        assert len(zeroed) == 2  # floor(0.25 * 10)
        kept = [d for d in range(10) if d not in zeroed]
        assert torch.equal(out[row][:, kept], embeddings[row][:, kept])


def test_embedding_dropout_zeroes_floor_of_rate_times_real_elements_without_rescaling():
    embeddings = embeddings_without_zeros(hidden=5)
    out = embedding_dropout(embeddings, MASK, rate=0.25, generator=generator(0))
    for row, real_tokens in enumerate([4, 2, 3]):
        zeroed = out[row] == 0
        assert zeroed.sum().item() == int(0.25 * real_tokens * 5)  # 5, 2, 3 elements
        assert not zeroed[MASK[row] == 0].any()  # padding untouched
        assert torch.equal(out[row][~zeroed], embeddings[row][~zeroed])  # the rest is not rescaled


@pytest.mark.parametrize("augment", [token_cutoff, feature_cutoff, embedding_dropout])
def test_cutoffs_are_random_per_seed_and_reproducible(augment):
    embeddings = embeddings_without_zeros()
    def zero_pattern(seed):
        return augment(embeddings, MASK, rate=0.5, generator=generator(seed)) == 0
    assert torch.equal(zero_pattern(1), zero_pattern(1))
    assert any(not torch.equal(zero_pattern(1), zero_pattern(seed)) for seed in range(2, 6))
