"""Our encoder against transformers.BertModel on the same checkpoint and the same padded batch of real sentences."""
import pytest
import torch
import transformers

from minbert.data.readers import read_sts
from minbert.models import Tokenizer, from_pretrained

TOLERANCE = 1e-5


def real_sentences(data_dir, count=8):
    records, _ = read_sts(data_dir / "sts-dev.csv")
    # Sentences of clearly different lengths, so the batch is padded; the same ones every run (a set's order
    # changes with the process's string hashing).
    sentences = sorted({r.sentence1 for r in records}, key=lambda sentence: (len(sentence), sentence))
    step = len(sentences) // count
    return [sentences[i * step] for i in range(count - 1)] + [sentences[-1]]


def assert_same_outputs(ours, theirs, batch, reference_inputs=None, padded=True):
    """reference_inputs: what `theirs` takes, where not `batch` (MPNet takes no token types); padded: the batch mixes
    lengths (else it has no padding: the encoder's other branch)."""
    ours.eval(), theirs.eval()
    with torch.no_grad():
        mine = ours(**batch, output_hidden_states=True)
        reference = theirs(**(reference_inputs or batch), output_hidden_states=True)
    real = batch["attention_mask"].bool()
    if padded:
        assert real.sum(1).min() < real.sum(1).max(), "the batch should mix lengths"
    else:
        assert real.all(), "the batch should have no padding"
    assert len(mine.hidden_states) == len(reference.hidden_states) == ours.config.num_hidden_layers + 1
    def assert_close(a, b, what):
        # fp32 rounds each value to about 1e-7 of its size, and the two sides sum in other orders: 1e-5, or 1e-5 of
        # the largest value where the values are larger than 1 (all-mpnet-base-v2's reach about 10).
        assert (a - b).abs().max() <= TOLERANCE * max(1.0, float(b.abs().max())), what

    for layer, (a, b) in enumerate(zip(mine.hidden_states, reference.hidden_states)):
        assert_close(a[real], b[real], f"hidden state {layer}")
    assert_close(mine.last_hidden_state[real], reference.last_hidden_state[real], "last hidden state")
    assert_close(mine.pooler_output, reference.pooler_output, "pooler output")


@pytest.mark.parametrize("attention", ["padded", "packed"])
def test_minilm_matches_transformers(minilm_dir, data_dir, attention):
    tokenizer = Tokenizer.from_pretrained("all-MiniLM-L6-v2")
    batch = tokenizer(real_sentences(data_dir))
    ours = from_pretrained("all-MiniLM-L6-v2")
    ours.attention = attention
    assert_same_outputs(ours, transformers.BertModel.from_pretrained(minilm_dir), batch)


def test_bert_base_shaped_checkpoint_matches_transformers(tmp_path, minilm_dir, data_dir):
    # The bert-base-uncased path offline: a random bert-base-shaped model with its MLM/NSP heads, saved by
    # transformers (tensor names carry the "bert." prefix), loaded back from the folder by both sides.
    torch.manual_seed(0)
    config = transformers.BertConfig()  # bert-base: 12 layers, hidden 768, 12 heads, 30522 tokens
    assert (config.num_hidden_layers, config.hidden_size) == (12, 768)
    transformers.BertForPreTraining(config).save_pretrained(tmp_path)
    transformers.AutoTokenizer.from_pretrained(minilm_dir).save_pretrained(tmp_path)  # the uncased vocab

    tokenizer = Tokenizer.from_pretrained(tmp_path)
    batch = tokenizer(real_sentences(data_dir), [s.upper() for s in real_sentences(data_dir)][::-1])
    assert batch["token_type_ids"].max() == 1, "sentence pairs exercise the token-type embeddings"
    assert_same_outputs(from_pretrained(tmp_path), transformers.BertModel.from_pretrained(tmp_path), batch)
