"""What a run saves is as readable as the umask allows, like any file the user makes (and as transformers and
sentence-transformers save): folders 0777 and files 0666 less the umask, so 0755 and 0644 under the usual 022;
a teammate or a shared cluster folder can read a checkpoint."""
import os
import stat
from contextlib import contextmanager

import pytest

import multitask_classifier
from minbert.common.files import atomic_directory, atomic_file, atomic_files
from tests.conftest import multitask_argv

pytestmark = pytest.mark.usefixtures("one_thread")


@contextmanager
def umask(mask):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def modes(folder):
    """Every entry under `folder` (itself included) -> its permission bits, as `stat -c %a` prints them."""
    return {str(path.relative_to(folder.parent)): oct(stat.S_IMODE(path.stat().st_mode))[2:]
            for path in [folder, *folder.rglob("*")]}


def test_a_saved_best_folder_honours_the_umask(tiny_model, course_data, tmp_path):
    with umask(0o022):
        multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path, "--max-steps", "1", "--epochs",
                                                 "1"))
    for name in ("best", "last"):
        saved = modes(tmp_path / "run" / name)
        assert "model.safetensors" in " ".join(saved) and "heads.safetensors" in " ".join(saved)
        assert saved == {path: "755" if (tmp_path / "run" / path).is_dir() else "644" for path in saved}, saved


@pytest.mark.parametrize("mask, folder, file", [(0o027, "750", "640"), (0o077, "700", "600"), (0o002, "775", "664")])
def test_every_atomic_write_honours_the_umask(tmp_path, mask, folder, file):
    with umask(mask):
        with atomic_directory(tmp_path / "checkpoint") as temp:
            (temp / "sub").mkdir()
            (temp / "sub" / "weights").write_bytes(b"w")
            os.chmod(temp / "sub" / "weights", 0o600)  # as safetensors writes its files
        with atomic_file(tmp_path / "metrics.json") as temp:
            temp.write_text("{}")
        with atomic_files(tmp_path / "encoder") as temp:
            (temp / "model1").mkdir()
            (temp / "model1" / "config.json").write_text("{}")
    assert modes(tmp_path / "checkpoint") == {"checkpoint": folder, "checkpoint/sub": folder,
                                              "checkpoint/sub/weights": file}
    assert modes(tmp_path / "metrics.json") == {"metrics.json": file}
    assert modes(tmp_path / "encoder") == {"encoder": folder, "encoder/model1": folder,
                                           "encoder/model1/config.json": file}
