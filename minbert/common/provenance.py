"""What a run needs to be reproduced, saved in its run config: the command, the code, the libraries, the data."""
import logging
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

from minbert.common.errors import CheckpointError
from minbert.common.files import file_sha256
from minbert.common.files import CHECKOUT, absolute
from minbert.common.run_folder import RUN_CONFIG

log = logging.getLogger(__name__)

LIBRARIES = ("torch", "transformers", "tokenizers", "safetensors", "torchjd", "numpy", "scipy", "scikit-learn")


def git_commit() -> str | None:
    """The checkout's commit, with "+changes" when files differ from it; None outside a git checkout."""
    if CHECKOUT is None:
        return None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=CHECKOUT, capture_output=True, text=True,
                                timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=CHECKOUT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (commit + ("+changes" if dirty else "")) or None


def provenance(command: str, data_files: list[Path]) -> dict:
    versions = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    # The command's paths are relative to the folder it ran in; each data file's, absolute (--resume checks them
    # from wherever it runs).
    return {"command": command, "cwd": os.getcwd(), "git_commit": git_commit(), "versions": versions,
            "data_sha256": {absolute(path): file_sha256(path) for path in data_files if Path(path).is_file()}}


def check_data_unchanged(saved: dict, allow_changed: bool) -> None:
    """--resume: each data file the run started with (provenance `saved`, from its run config) still holds what
    it held, or the run would go on training on other data than it began with; allow_changed: go on, saying so."""
    changed = []
    for name, digest in saved.get("data_sha256", {}).items():
        if not Path(name).is_file():
            changed.append(f"{name} (now missing)")
        elif file_sha256(Path(name)) != digest:
            changed.append(name)
    if not changed:
        return
    what = f"{', '.join(changed)} changed since the run started (SHA-256 in its {RUN_CONFIG})"
    if not allow_changed:
        raise CheckpointError(f"--resume: {what}; resume with the data it started with, or add --allow-changed-data")
    log.warning("--resume --allow-changed-data: %s; going on with the files as they are now", what)
