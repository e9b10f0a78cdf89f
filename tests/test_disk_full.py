"""A disk that fills up at any write of a checkpoint: one line naming the folder and the space it needs, exit code 2,
no half-written folder left, and the previous checkpoint as it was.

Each writer a checkpoint save calls (JSON files and the model card, safetensors, the tokenizer's files, torch.save)
fails, one write at a time, as it fails on a full disk: having written part of its file, with the error it raises
there (measured on a full tmpfs: torch.save's does not say the disk is full; the device then has no byte free).
"""
import errno
import pathlib
import random
import shutil
import weakref
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError

from minbert import checkpoint
import minbert.models.checkpoint
import minbert.models.shareable
from minbert.common import cli
from minbert.common.run_folder import LOCK
from tests.conftest import contents, write_course_files
from minbert.training.contrastive import Pretraining
from minbert.engine.engine import Engine
from minbert.training.methods import ContrastiveConfig
from minbert.training.multitask import MultitaskRun
from minbert.training.multitask_config import MultitaskConfig


class FullDisk:
    """Makes the k-th write into a temporary folder of `name` (.name.*.tmp, where a save writes a checkpoint before it
    takes its place) fail as on a full disk; count() says how many writes a save makes."""

    def __init__(self, monkeypatch, tokenizer_class):
        self.name, self.fail_at, self.writes, self.kinds, self.full = "", 0, 0, set(), False
        usage = shutil.disk_usage
        monkeypatch.setattr(shutil, "disk_usage",
                            lambda path: usage(path)._replace(free=0) if self.full else usage(path))
        write_text = pathlib.Path.write_text
        monkeypatch.setattr(pathlib.Path, "write_text", lambda path, text, *a, **k: self.write(
            "json", path, lambda: write_text(path, text, *a, **k), OSError(errno.ENOSPC, "No space left on device")))
        save_file = minbert.models.checkpoint.save_file
        safetensors_full = SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
        for module in (checkpoint, minbert.models.checkpoint, minbert.models.shareable):
            monkeypatch.setattr(module, "save_file", lambda tensors, file, *a, **k: self.write(
                "safetensors", file, lambda: save_file(tensors, file, *a, **k), safetensors_full))
        save_pretrained = tokenizer_class.save_pretrained
        monkeypatch.setattr(tokenizer_class, "save_pretrained", lambda tokenizer, folder, *a, **k: self.write(
            "tokenizer", Path(folder) / "tokenizer.json", lambda: save_pretrained(tokenizer, folder, *a, **k),
            Exception("No space left on device (os error 28)")))
        save = torch.save
        monkeypatch.setattr(torch, "save", lambda obj, file, *a, **k: self.write(
            "torch.save", file, lambda: save(obj, file, *a, **k),
            RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")))

    def write(self, kind: str, path, write, error: Exception):
        if not any(part.startswith(f".{self.name}.") and part.endswith(".tmp") for part in Path(path).parts):
            return write()
        self.writes += 1
        self.kinds.add(kind)
        if self.writes != self.fail_at:
            return write()
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).open("wb").write(b"\0" * 100)  # what fitted before the disk was full
        self.full = True
        raise error

    def count(self, name: str, save) -> int:
        self.name, self.fail_at, self.writes, self.kinds = name, 0, 0, set()
        save()
        return self.writes

    def fail(self, name: str, k: int, save, capsys) -> str:
        """Run save with its k-th write failing; the one line the command prints."""
        self.name, self.fail_at, self.writes, self.full = name, k, 0, False
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_:
            cli.run(save)
        self.full = False
        assert exit_.value.code == 2
        error = capsys.readouterr().err
        assert "Traceback" not in error
        return error.strip().splitlines()[-1]


def hidden(folder: Path) -> list[str]:
    """Temporary and half-written entries: ours all start with a dot (the running command's lock is none of them)."""
    return [path.name for path in folder.iterdir() if path.name.startswith(".") and path.name != LOCK]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_course_files(tmp_path_factory.mktemp("data"), random.Random(0), train_rows=16)


@pytest.fixture
def multitask_trainer(tiny_model, data, tmp_path, one_thread):
    argv = ["--model", str(tiny_model), "--data-dir", str(data), "--output-dir", str(tmp_path / "run"),
            "--predictions-dir", str(tmp_path / "predictions"), "--epochs", "1", "--batch-size", "8", "--device", "cpu"]
    config = cli.parse_config(MultitaskConfig, "", argv)
    engine = Engine(config)
    run = MultitaskRun(config, engine)
    engine._prepare(run, total_steps=1)  # the optimizer and schedule a save of last/ holds
    return run, engine


ALL_WRITERS = {"json", "safetensors", "tokenizer", "torch.save"}


def assert_every_failed_write_keeps_the_previous(name: str, save, engine, monkeypatch, capsys, tokenizer) -> None:
    """Fail each write of saving OUTPUT_DIR/name/ in turn: one line, the previous folder byte for byte, no leftovers."""
    disk = FullDisk(monkeypatch, type(tokenizer.backend))
    writes = disk.count(name, save)  # this save is the previous checkpoint
    # torch.save: last/'s training state; best/'s dev soft outputs, saved inside it with its weights.
    assert disk.kinds == ALL_WRITERS
    folder = engine.folder.path / name
    before = contents(folder)
    for k in range(1, writes + 1):
        line = disk.fail(name, k, save, capsys)
        assert line.startswith(f"error: {folder}: no space left on the device; the previous {name} is intact "
                               f"(it needs about "), (k, line)
        assert line.endswith(" free)")
        assert contents(folder) == before, f"write {k}: {name}/ changed"
        assert hidden(engine.folder.path) == [], f"write {k}: half-written entries left"


def test_a_full_disk_at_each_write_of_last_leaves_the_previous_one(multitask_trainer, monkeypatch, capsys):
    run, engine = multitask_trainer
    assert_every_failed_write_keeps_the_previous("last", lambda: engine.save_last(run), engine, monkeypatch, capsys,
                                                 run.tokenizer)


def test_a_full_disk_at_each_write_of_best_leaves_the_previous_one(multitask_trainer, monkeypatch, capsys):
    run, engine = multitask_trainer

    def evaluate_and_save():  # an evaluation's dev outputs, saved as best/
        run.evaluate()
        engine._save_best(run)

    assert_every_failed_write_keeps_the_previous("best", evaluate_and_save, engine, monkeypatch, capsys,
                                                 run.tokenizer)


def test_a_full_disk_at_each_write_of_a_pretrained_checkpoint_leaves_the_folder_as_it_was(tiny_model, data, tmp_path,
                                                                                           monkeypatch, capsys,
                                                                                           one_thread):
    out = tmp_path / "simcse"
    argv = ["--model", str(tiny_model), "--data-dir", str(data), "--data", "sst", "--output-dir", str(out),
            "--max-steps", "1", "--batch-size", "4", "--device", "cpu"]
    config = cli.parse_config(ContrastiveConfig, "", argv)
    pretraining = Pretraining(config, Engine(config))
    disk = FullDisk(monkeypatch, type(pretraining.tokenizer.backend))
    writes = disk.count("files", pretraining.run)  # the final save: the checkpoint's files as one set
    assert disk.kinds == {"json", "safetensors", "tokenizer"}
    (out / "notes.txt").write_text("the user's")  # not the command's: it stays whatever happens
    before = contents(out)
    assert "model.safetensors" in before
    for k in range(1, writes + 1):
        line = disk.fail("files", k, pretraining.run, capsys)
        assert line.startswith(f"error: {out}: no space left on the device; the files in {out} are as they were "
                               f"(it needs about "), (k, line)
        assert contents(out) == before, f"write {k}: the folder changed"
        assert hidden(out) == [], f"write {k}: half-written entries left"


def test_the_free_space_said_after_a_failed_write_is_what_the_failed_write_took_back(tmp_path, monkeypatch):
    from minbert.common import files

    capacity, held, real_usage = 10_000, [], shutil.disk_usage

    def usage(path):  # a device whose space a file takes while it exists, or while it is open
        taken = sum(file.stat().st_size for file in tmp_path.rglob("*") if file.is_file())
        taken += sum(100 for ref in held if ref() is not None and not ref().closed)
        return real_usage(tmp_path)._replace(free=capacity - taken)

    monkeypatch.setattr(shutil, "disk_usage", usage)

    def writer(path):  # torch.save's way: the file open in the writer's frame when the disk is full
        handle = open(path, "wb")
        held.append(weakref.ref(handle))
        raise OSError(errno.ENOSPC, "No space left on device")

    (tmp_path / "kept.bin").write_bytes(b"\0" * 1000)
    with pytest.raises(files.DiskFullError) as error:
        with files.atomic_file(tmp_path / "new.bin") as temp:
            writer(temp)
    assert str(error.value).endswith("(9.0 kB free)"), str(error.value)  # all but kept.bin's 1,000 bytes
