"""model.py: the multitask model multitask_classifier.py builds from its flags (the config object the command
builds), its parameter groups and head calibration."""
import pytest
import torch
from torch import nn

from minbert.common import cli
from minbert.data.splits import TaskSplit, encode_views
from minbert.heads.paraphrase import CrossEncodedPairHead, ParaphraseHead
from minbert.heads.similarity import MAX_COSINE_FLOOR, CrossEncodedSimilarityHead, SimilarityHead
from minbert.model import ModelConfig, build_model, encoder_depth

pytestmark = pytest.mark.usefixtures("one_thread")


def built(tiny_model, *argv: str):
    return build_model(cli.parse_config(ModelConfig, "", list(argv)), tiny_model)


def test_the_task_flags_choose_the_heads(tiny_model):
    model = built(tiny_model, "--tasks", "sts,sst")
    assert list(model.heads) == ["sts", "sst"] and model.common is None and model.pooling == "mean"
    assert [task.name for task in model.tasks] == ["sts", "sst"]


@pytest.mark.parametrize("argv, check", [
    (["--pooling", "cls"], lambda m: m.pooling == "cls"),
    (["--common-layer"], lambda m: isinstance(m.common, nn.Module)),
    (["--pair-encoding", "para=cross"], lambda m: isinstance(m.heads["para"], CrossEncodedPairHead)
     and isinstance(m.heads["sts"], SimilarityHead)),
    (["--pair-encoding", "cross"], lambda m: isinstance(m.heads["sts"], CrossEncodedSimilarityHead)),
    (["--pair-encoding", "bi"], lambda m: isinstance(m.heads["para"], ParaphraseHead)),
    # --share: how the two bi-encoded pair heads' MLPs relate
    (["--pair-encoding", "bi", "--share", "all"], lambda m: m.heads["para"].mlp is m.heads["sts"].mlp),
    (["--pair-encoding", "bi", "--share", "first-layer"], lambda m: m.heads["para"].mlp is not m.heads["sts"].mlp
     and m.heads["para"].mlp.first is m.heads["sts"].mlp.first),
    (["--pair-encoding", "bi", "--share", "none"], lambda m: m.heads["para"].mlp.first is not m.heads["sts"].mlp.first),
    (["--pair-encoding", "bi", "--pair-mlp", "plain"], lambda m: not m.heads["para"].mlp.residual),
    (["--pair-encoding", "bi", "--pair-mlp", "residual"], lambda m: m.heads["para"].mlp.residual),
    (["--pair-encoding", "cross", "--cross-head", "ph"], lambda m: not m.heads["para"].use_difference),
    (["--head-dropout", "0.15"], lambda m: {d.p for d in m.heads.modules() if isinstance(d, nn.Dropout)} == {0.15}),
])
def test_each_head_flag_reaches_the_model(tiny_model, argv, check):
    assert check(built(tiny_model, *argv))


def test_layer_depths_and_parameter_groups_by_hand(tiny_model):
    names = ("embeddings.word_embeddings.weight", "encoder.layer.0.output.dense.bias",
             "encoder.layer.1.output.dense.bias", "pooler.dense.weight")
    assert [encoder_depth(name, 2) for name in names] == [2, 1, 0, 0]
    model = built(tiny_model, "--tasks", "sst")
    groups = model.parameter_groups(lr=1e-3, head_lr=1e-2, layer_lr_decay=0.5)
    rate = {id(p): (group["lr"], "weight_decay" not in group) for group in groups for p in group["params"]}
    parameters = dict(model.named_parameters())
    assert rate[id(parameters["encoder.embeddings.word_embeddings.weight"])] == (pytest.approx(2.5e-4), True)
    assert rate[id(parameters["encoder.encoder.layer.0.output.LayerNorm.bias"])] == (pytest.approx(5e-4), False)
    assert rate[id(parameters["heads.sst.mlp.first.1.weight"])] == (pytest.approx(1e-2), True)
    assert len(rate) == len(parameters)  # each parameter in one group


def test_calibration_measures_the_cosine_floor_in_eval_mode(tiny_model, tokenizer):
    model = built(tiny_model, "--tasks", "sts", "--sts-target", "cosine-range")
    texts = [("a cat sat", "a dog ran"), ("the red car", "a big tree"), ("a house", "the mat")]
    split = TaskSplit("sts", ["0", "1", "2"], encode_views(tokenizer, texts, "bi", 32, source=None),
                      torch.tensor([0.0, 0.2, 4.0]))
    model.train()
    model.calibrate({"sts": split}, tokenizer.pad_id)
    assert model.training  # back in training mode
    with torch.no_grad():
        model.eval()
        embeddings = model.embed(split.batch([0, 1], tokenizer.pad_id)["inputs"])
    first, second = embeddings.chunk(2)
    expected = torch.nn.functional.cosine_similarity(model.heads["sts"].mlp(first), model.heads["sts"].mlp(second))
    assert model.heads["sts"].cosine_floor.item() == pytest.approx(expected.mean().item(), abs=1e-6)


def test_without_pairs_in_the_lowest_bucket_calibration_takes_the_lowest_bucket_that_has_some(tiny_model, tokenizer,
                                                                                                caplog):
    model = built(tiny_model, "--tasks", "sts", "--sts-target", "cosine-range")
    texts = [("a cat sat", "a dog ran"), ("the red car", "a big tree"), ("a house", "the mat"), ("a b", "c d")]
    # Nothing <= 0.25; 0.6 and 0.7 lie in the bucket (0.5, 0.75], 0.8 and 4.0 above it.
    split = TaskSplit("sts", ["0", "1", "2", "3"], encode_views(tokenizer, texts, "bi", 32, source=None),
                      torch.tensor([0.6, 4.0, 0.7, 0.8]))
    with caplog.at_level("WARNING"):
        model.calibrate({"sts": split}, tokenizer.pad_id)
    assert "none of the 4 STS training pairs used is scored <= 0.25; M is the mean cosine of the 2 scored <= 0.75" \
        in caplog.text
    with torch.no_grad():
        model.eval()
        first, second = model.embed(split.batch([0, 2], tokenizer.pad_id)["inputs"]).chunk(2)
    expected = torch.nn.functional.cosine_similarity(model.heads["sts"].mlp(first), model.heads["sts"].mlp(second))
    assert model.heads["sts"].cosine_floor.item() == pytest.approx(expected.mean().item(), abs=1e-6)


def test_an_encoder_whose_sentences_are_all_parallel_gets_the_highest_floor_and_a_warning(tiny_model, tokenizer,
                                                                                          caplog):
    """A random encoder can map unrelated sentences onto one direction: M would be 1 (or, rounded, above it) and
    the score's map would divide by zero; the run goes on with M = MAX_COSINE_FLOOR and says so."""
    model = built(tiny_model, "--tasks", "sts", "--sts-target", "cosine-range")
    texts = [("a cat sat", "a dog ran"), ("the red car", "a big tree")]
    split = TaskSplit("sts", ["0", "1"], encode_views(tokenizer, texts, "bi", 32, source=None), torch.tensor([0.0, 0.1]))

    class OneDirection(nn.Module):  # each embedding onto one direction, at its own length
        def forward(self, embedding):
            return embedding.norm(dim=-1, keepdim=True) * torch.tensor([0.3, 0.1, 0.7])

    model.heads["sts"].mlp = OneDirection()
    with caplog.at_level("WARNING"):
        model.calibrate({"sts": split}, tokenizer.pad_id)
    assert model.heads["sts"].cosine_floor.item() == pytest.approx(MAX_COSINE_FLOOR)
    assert "all but parallel" in caplog.text and f"M is capped at {MAX_COSINE_FLOOR:g}" in caplog.text
