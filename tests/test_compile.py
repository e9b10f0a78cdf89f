"""compile_encoder: training losses equal eager ones, batches of new shapes compile nothing new, and where torch
cannot compile, one clear line."""
import copy

import pytest
import torch
from torch import nn

from minbert.common.errors import FlagError
from minbert.models import AdamW, BertConfig, BertModel
from minbert.models import compile as compiling
from minbert.models.compile import compile_encoder
from minbert.models.sentence_embedding import masked_mean

pytestmark = pytest.mark.usefixtures("one_thread")

SHAPES = [(4, 9), (3, 7), (5, 12), (2, 16)]  # (rows, tokens): each step a new shape, as length-grouped batches are


def tiny_encoder() -> BertModel:
    torch.manual_seed(0)
    # No dropout: compiled code draws its random numbers differently from eager code.
    return BertModel(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                intermediate_size=32, max_position_embeddings=32, hidden_dropout_prob=0.0,
                                attention_probs_dropout_prob=0.0), attention="padded")


def batch(rows: int, tokens: int, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, tokens + 1, (rows,), generator=generator)
    lengths[0] = tokens  # the longest row sets the width
    return {"input_ids": torch.randint(1, 50, (rows, tokens), generator=generator),
            "attention_mask": (torch.arange(tokens) < lengths[:, None]).long()}


def train(encoder: BertModel, no_recompiling: bool = False) -> list[float]:
    """Losses of a few steps on batches of SHAPES; no_recompiling: compiling again after the first step is an error."""
    torch.manual_seed(1)
    head = nn.Linear(16, 1)
    optimizer = AdamW([*encoder.parameters(), *head.parameters()], lr=1e-3)
    losses = []
    for step, shape in enumerate(SHAPES):
        inputs = batch(*shape, seed=step)
        with torch.compiler.set_stance("fail_on_recompile" if no_recompiling and step else "default"):
            prediction = head(masked_mean(encoder(**inputs).last_hidden_state, inputs["attention_mask"])).squeeze(1)
            loss = (prediction - torch.linspace(-1, 1, len(prediction))).pow(2).mean()
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def test_compiled_training_matches_eager_and_new_shapes_reuse_the_compiled_graph():
    eager = tiny_encoder().train()
    compiled = compile_encoder(copy.deepcopy(eager))
    assert compiled.state_dict().keys() == eager.state_dict().keys(), "checkpoints keep their tensor names"

    eager_losses = train(eager)
    compiled_losses = train(compiled, no_recompiling=True)  # the first step compiled for shapes of any size
    assert max(abs(a - b) for a, b in zip(eager_losses, compiled_losses)) <= 1e-4
    assert eager_losses[0] != eager_losses[-1], "the steps train: the losses move"


def test_compile_where_torch_cannot_is_one_clear_line(monkeypatch):
    def no_compiler(function, **options):
        def compiled(*args):  # torch.compile fails at the first call, as a missing C compiler makes it
            raise RuntimeError("CppCompileError: C++ compile error\nCommand:\ng++ /tmp/x.cpp -o /tmp/x.so\n"
                               "g++: not found")
        return compiled

    monkeypatch.setattr(compiling.torch, "compile", no_compiler)
    encoder = tiny_encoder()
    with pytest.raises(FlagError) as caught:
        compile_encoder(encoder)
    message = str(caught.value)
    assert "\n" not in message
    assert message == ("torch cannot compile on this machine (cpu): RuntimeError: CppCompileError: C++ compile "
                       "error; run without compiling")
    assert not hasattr(encoder.encoder, "_compiled_call_impl") or encoder.encoder._compiled_call_impl is None


@pytest.mark.parametrize("options, expected", [
    (dict(), dict(dynamic=True)),  # --compile: one graph for every shape
    (dict(static_shapes=True), dict(dynamic=False)),  # --compile --length-buckets: a graph a bucket
    (dict(static_shapes=True, cuda_graphs=True, inductor=False), dict(dynamic=False, backend="cudagraphs")),
    (dict(static_shapes=True, cuda_graphs=True), dict(dynamic=False, mode="reduce-overhead")),  # and --compile
])
def test_each_setting_compiles_as_it_should(monkeypatch, options, expected):
    """What compile_encoder asks torch.compile for: the graphs themselves need a GPU (benchmarks/gpu_suite.sh)."""
    asked, probed = [], []
    monkeypatch.setattr(compiling, "check_can_compile", lambda device: probed.append(device))
    encoder = tiny_encoder()
    monkeypatch.setattr(encoder.encoder, "compile", lambda **kwargs: asked.append(kwargs))
    with torch._dynamo.config.patch(recompile_limit=8):
        compile_encoder(encoder, **options)
        # A graph a shape: buckets' widths times the rows of training's and evaluation's batches, past Dynamo's 8.
        static = options.get("static_shapes") or options.get("cuda_graphs")
        assert torch._dynamo.config.recompile_limit == (compiling.STATIC_GRAPHS if static else 8)
    assert asked == [expected]
    assert bool(probed) == options.get("inductor", True), "only Inductor needs a C compiler"


def test_static_shapes_compile_once_a_shape_and_train_as_eager():
    eager = tiny_encoder().train()
    compiled = compile_encoder(copy.deepcopy(eager), static_shapes=True)
    assert max(abs(a - b) for a, b in zip(train(eager), train(compiled))) <= 1e-4
