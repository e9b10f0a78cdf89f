"""Checkpoint resolution and weight loading: folders, packaged names, hub ids offline, bad files."""
import json
import pickle
import re
import shutil
from pathlib import Path

import pytest
import torch
import transformers

from minbert.data.splits import encode_views
from minbert.models import BertConfig, BertModel, CheckpointError, Tokenizer, from_pretrained
from minbert.common import cli
from minbert.models import loading
from minbert.models.loading import load_weights, resolve_checkpoint

TINY = dict(vocab_size=99, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
            max_position_embeddings=64)


def test_packaged_name_resolves_to_installed_package(minilm_dir):
    assert resolve_checkpoint("all-MiniLM-L6-v2") == minilm_dir
    assert from_pretrained("all-MiniLM-L6-v2").config.num_hidden_layers == 6


def test_hub_id_offline_says_how_to_use_a_local_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # nothing cached: the hub must be asked, and fails
    with pytest.raises(CheckpointError) as error:
        from_pretrained("bert-base-uncased")
    message = str(error.value)
    assert "could not get 'bert-base-uncased'" in message and "--local-dir" in message
    # One line, naming the flag value that runs without the network.
    assert "\n" not in message and "without the network, run with `--model all-MiniLM-L6-v2`" in message


def test_missing_folder_is_named(tmp_path):
    with pytest.raises(CheckpointError, match="checkpoint folder not found: .*no-such-model"):
        from_pretrained(str(tmp_path / "no-such-model"))


@pytest.fixture
def runs_here(tmp_path, monkeypatch):
    """The current folder holds runs/multitask and runs/simcse-nli; the hub, if asked, says so."""
    monkeypatch.chdir(tmp_path)
    for name in ("multitask", "simcse-nli"):
        (tmp_path / "runs" / name).mkdir(parents=True)

    def hub(repo_id):
        raise CheckpointError(f"asked the hub for {repo_id}")

    monkeypatch.setattr(loading, "_download", hub)
    return tmp_path


@pytest.mark.parametrize("spec, message", [
    ("runs/nonexistent", "runs/nonexistent; the closest existing folder is runs/, which holds multitask/, simcse-nli/"),
    ("runs/multitsak", "runs/multitsak; the closest existing folder is runs/, which holds multitask/, simcse-nli/"),
    ("runs/simcse-nil/best", "runs/simcse-nil/best; the closest existing folder is runs/, which holds simcse-nli/, "
                             "multitask/"),
    ("./nonexistent", "nonexistent; the closest existing folder is the current folder, which holds runs/"),
    ("../runs/x", "../runs/x; the closest existing folder is ../, which holds"),
    ("org/name/best", "org/name/best; the closest existing folder is the current folder, which holds runs/"),
    ("runs\\multitask", "runs\\multitask; the closest existing folder is the current folder, which holds runs/"),
])
def test_a_path_that_looks_local_is_looked_up_here_only(runs_here, spec, message):
    with pytest.raises(CheckpointError) as error:
        resolve_checkpoint(spec)
    assert str(error.value).startswith(f"checkpoint folder not found: {message}")


@pytest.mark.parametrize("spec", ["bert-base-uncased", "google/bert_uncased_L-2_H-128_A-2", "sentence-transformers/x"])
def test_a_hub_id_goes_to_the_hub(runs_here, spec):
    with pytest.raises(CheckpointError, match=f"asked the hub for {spec}"):
        resolve_checkpoint(spec)


def test_a_mistyped_run_folder_is_one_line_and_exit_code_2(runs_here, capsys):
    import multitask_classifier

    with pytest.raises(SystemExit) as exit_:
        cli.run(lambda: multitask_classifier.main(["--model", "runs/nonexistent", "--output-dir", "out",
                                                  "--predictions-dir", "out/predictions", "--device", "cpu"]))
    error = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and error == [
        "error: checkpoint folder not found: runs/nonexistent; the closest existing folder is runs/, which holds "
        "multitask/, simcse-nli/"]


def save_tiny(folder, state_dict, name="pytorch_model.bin"):
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", **TINY}))
    torch.save(state_dict, folder / name)


def test_bin_with_prefix_gamma_beta_and_heads_loads(tmp_path):
    torch.manual_seed(0)
    source = BertModel(BertConfig(**TINY))
    state = {}
    for name, tensor in source.state_dict().items():
        # Old TensorFlow conversions: "bert." prefix, LayerNorm gamma/beta, MLM head alongside.
        name = name.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        state["bert." + name] = tensor
    state["cls.predictions.bias"] = torch.zeros(99)
    save_tiny(tmp_path / "ckpt", state)
    loaded = from_pretrained(tmp_path / "ckpt")
    for name, tensor in source.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


def test_bin_holding_more_than_tensors_is_refused(tmp_path):
    class Payload:  # any pickled object that is not a tensor container
        def __reduce__(self):
            return (print, ("unpickled!",))

    folder = tmp_path / "evil"
    save_tiny(folder, {})
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps({"embeddings.word_embeddings.weight": Payload()}))
    with pytest.raises(CheckpointError, match="cannot read weights"):
        from_pretrained(folder)


def test_missing_and_unexpected_tensors_are_refused_naming_the_first_few():
    model = BertModel(BertConfig(**TINY))
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("encoder.layer.1.")}
    state["extra.weight"] = torch.zeros(2)
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    with pytest.raises(CheckpointError) as error:
        load_weights(model, state, source="test")
    # Layer 1's 16 tensors, in name order: the first three named, the rest counted.
    assert str(error.value).startswith(
        "test: its weights do not match its config.json: 16 encoder tensor(s) missing "
        "(encoder.layer.1.attention.output.LayerNorm.bias, encoder.layer.1.attention.output.LayerNorm.weight, "
        "encoder.layer.1.attention.output.dense.bias and 13 more); 1 tensor(s) the encoder does not use "
        "(extra.weight); correct config.json")
    assert "--allow-partial-load" in str(error.value)
    assert all(torch.equal(model.state_dict()[name], tensor) for name, tensor in before.items()), "nothing loaded"


def test_a_partial_load_is_what_the_user_asked_for_and_is_logged(caplog):
    model = BertModel(BertConfig(**TINY))
    source = BertModel(BertConfig(**TINY))
    state = {k: v for k, v in source.state_dict().items() if not k.startswith("pooler.")}
    state["extra.weight"] = torch.zeros(2)
    report = load_weights(model, state, source="test", partial=True)
    assert report.missing == ["pooler.dense.bias", "pooler.dense.weight"]
    assert report.unexpected == ["extra.weight"]
    assert torch.equal(model.state_dict()["embeddings.word_embeddings.weight"],
                       source.state_dict()["embeddings.word_embeddings.weight"])
    assert "2 encoder tensor(s) missing" in caplog.text and "extra.weight" in caplog.text


@pytest.mark.parametrize("layers", [3, 1])
def test_a_config_whose_layer_count_is_not_the_weights_is_refused(tmp_path, layers):
    """config.json says 3 layers (or 1) where the weights have 2: refused, not run with random layers (or with
    layers left over)."""
    save_tiny(tmp_path / "ckpt", BertModel(BertConfig(**TINY)).state_dict(), name="pytorch_model.bin")
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps({"model_type": "bert", **TINY,
                                                               "num_hidden_layers": layers}))
    what = ("encoder tensor(s) missing (encoder.layer.2." if layers == 3 else
            "tensor(s) the encoder does not use (encoder.layer.1.")
    with pytest.raises(CheckpointError, match=re.escape(f"16 {what}")):
        from_pretrained(tmp_path / "ckpt")
    assert from_pretrained(tmp_path / "ckpt", partial=True).config.num_hidden_layers == layers


def relabelled(folder, tmp_path, model_type, architectures=True):
    """A copy of a checkpoint folder whose config.json says another model_type (and, architectures False, names no
    class that saved it)."""
    copy = Path(shutil.copytree(folder, tmp_path / f"as-{model_type}"))
    config = json.loads((copy / "config.json").read_text())
    config["model_type"] = model_type
    if not architectures:
        config.pop("architectures", None)
    (copy / "config.json").write_text(json.dumps(config))
    return copy


@pytest.mark.parametrize("model_type", ["roberta", "mpnet"])
def test_a_bert_folder_relabelled_another_family_is_refused(minilm_dir, tmp_path, model_type):
    with pytest.raises(CheckpointError, match=f"model_type is '{model_type}', but the weights were saved by "
                                              f"BertModel \\(architectures\\), a bert model; set model_type to 'bert'"):
        from_pretrained(relabelled(minilm_dir, tmp_path, model_type))


def test_a_bert_folder_relabelled_mpnet_without_architectures_is_refused_by_its_tensors(minilm_dir, tmp_path):
    with pytest.raises(CheckpointError, match="says model_type 'mpnet', but its weights have no relative position "
                                              "bias"):
        from_pretrained(relabelled(minilm_dir, tmp_path, "mpnet", architectures=False))


@pytest.mark.parametrize("model_type", ["bert", "roberta"])
def test_an_mpnet_folder_relabelled_is_refused_by_its_tensors(tiny_mpnet, tmp_path, model_type):
    with pytest.raises(CheckpointError, match=f"says model_type '{model_type}', but its weights are of the mpnet "
                                              f"family \\(.*\\); set model_type to 'mpnet'"):
        from_pretrained(relabelled(tiny_mpnet, tmp_path, model_type, architectures=False))


def test_a_task_models_prefix_names_its_family(tmp_path):
    state = {f"roberta.{name}": tensor for name, tensor in BertModel(BertConfig(**TINY)).state_dict().items()}
    save_tiny(tmp_path / "ckpt", state)
    with pytest.raises(CheckpointError, match="says model_type 'bert', but its weights are of the roberta "
                                              "family \\(roberta.embeddings"):
        from_pretrained(tmp_path / "ckpt")


def test_shape_mismatch_names_the_tensor():
    state = BertModel(BertConfig(**TINY)).state_dict()
    state["pooler.dense.weight"] = torch.zeros(3, 3)
    with pytest.raises(CheckpointError, match=r"pooler.dense.weight has shape \(3, 3\)"):
        load_weights(BertModel(BertConfig(**TINY)), state)


def test_config_of_another_architecture_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(CheckpointError, match="model_type is 'gpt2'"):
        from_pretrained(tmp_path)


def test_tokenizer_follows_the_checkpoints_casing(tmp_path, minilm_dir):
    uncased = Tokenizer.from_pretrained(minilm_dir)
    assert uncased.encode(["Hello World"])[0].input_ids == uncased.encode(["hello world"])[0].input_ids
    vocab = (minilm_dir / "vocab.txt").read_text(encoding="utf-8").splitlines() + ["Hello"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    transformers.BertTokenizerFast(vocab=str(tmp_path / "vocab.txt"), do_lower_case=False).save_pretrained(tmp_path)
    cased = Tokenizer.from_pretrained(tmp_path)
    assert cased.encode(["Hello"])[0].input_ids == [uncased.backend.cls_token_id, len(vocab) - 1,
                                                    uncased.backend.sep_token_id]
    assert cased.encode(["Hello"])[0].input_ids != cased.encode(["hello"])[0].input_ids


def test_vocab_only_folder_gets_an_uncased_tokenizer(tmp_path, minilm_dir):
    (tmp_path / "vocab.txt").write_bytes((minilm_dir / "vocab.txt").read_bytes())
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", **TINY, "vocab_size": 30522}))
    reference = Tokenizer.from_pretrained(minilm_dir).encode(["The Rock is destined"])[0].input_ids
    assert Tokenizer.from_pretrained(tmp_path).encode(["The Rock is destined"])[0].input_ids == reference


def test_pairs_truncation_and_padding(minilm_dir, caplog):
    tokenizer = Tokenizer.from_pretrained(minilm_dir)
    cls, sep = tokenizer.backend.cls_token_id, tokenizer.backend.sep_token_id
    pair = tokenizer.encode(["a cat"], ["a dog sat"])[0]
    assert pair.input_ids[0] == cls and pair.input_ids.count(sep) == 2
    assert pair.token_type_ids == [0] * 4 + [1] * 4  # [CLS] a cat [SEP] | a dog sat [SEP]

    # Distinct words, so that cutting the wrong end (or the wrong sentence of a pair) shows.
    words = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen".split()
    long_sentence = " ".join(words * 4)
    encoded = tokenizer.encode(["short", long_sentence, " ".join(words[:14])], max_length=16, source="demo.csv")
    assert [len(e.input_ids) for e in encoded] == [3, 16, 16]
    assert tokenizer.backend.decode(encoded[1].input_ids[1:-1]) == " ".join(words[:14])  # the end is cut
    assert encoded[1].input_ids[-1] == sep
    assert "demo.csv: 1 of 3 inputs longer than 16 tokens were truncated" in caplog.text
    # A pair loses tokens from its longer sentence's end, as transformers' tokenizer does.
    cut = tokenizer.encode([long_sentence], ["a red car"], max_length=16)[0]
    golden = transformers.AutoTokenizer.from_pretrained(minilm_dir)(long_sentence, "a red car", truncation=True,
                                                                    max_length=16)["input_ids"]
    assert cut.input_ids == golden
    assert tokenizer.backend.decode(cut.input_ids, skip_special_tokens=True) == " ".join(words[:10] + ["a red car"])

    batch = tokenizer(["short", long_sentence], max_length=16)
    assert batch["input_ids"].shape == (2, 16)
    assert batch["attention_mask"].tolist()[0] == [1, 1, 1] + [0] * 13
    assert (batch["input_ids"][0, 3:] == tokenizer.pad_id).all()


@pytest.mark.parametrize("encoding, reports", [
    ("cross", ["pairs.csv (sentence pairs): 1 of 2 inputs longer than 16 tokens were truncated"]),
    ("bi", ["pairs.csv (first sentences): 1 of 2 inputs longer than 16 tokens were truncated"])])
def test_a_truncated_pair_is_reported_once_naming_what_was_cut(minilm_dir, caplog, encoding, reports):
    # A cross-encoded pair is tokenised in both orders; the second order must not repeat the report.
    pairs = [("a cat", "a dog sat"), (" ".join(["word"] * 50), "short")]
    views = encode_views(Tokenizer.from_pretrained(minilm_dir), pairs, encoding, max_length=16, source="pairs.csv")
    assert max(len(view[1].input_ids) for view in views) == 16
    assert [record.getMessage() for record in caplog.records if record.levelname == "WARNING"] == reports
