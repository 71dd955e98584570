"""Shared fixtures: tiny GGUF models written once per test session (see edgespec/testing/tiny_gguf.py),
the endless tiny pair for subprocess tests, and the built-in real pair loaded once per session."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

import edgespec.decoding.costs.saved
import edgespec.engine.engine
from edgespec.engine.engine import Engine
from edgespec.engine.options import EngineOptions
from edgespec.models.registry import PairConfig
from edgespec.models.store import Store
from edgespec.testing.tiny_gguf import DRAFT, write_tiny_gguf
from edgespec.util import unsaved
from tests.edgespec_process import endless_pair_env


@pytest.fixture(autouse=True, scope="session")
def no_user_calibration_file(tmp_path_factory: pytest.TempPathFactory):
    """Module fixtures that run engines (set up before any test's own fixtures) calibrate into a
    session file, never into the user's EDGESPEC_HOME."""
    path = tmp_path_factory.mktemp("calibration") / "calibration.json"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(edgespec.decoding.costs.saved, "calibration_file", lambda: path)
        yield


@pytest.fixture(autouse=True)
def own_calibration_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test reads and writes its own calibration file: never the user's, and no test's
    costs (fake backends share one cache key) leak into another's."""
    path = tmp_path / "calibration.json"
    monkeypatch.setattr(edgespec.decoding.costs.saved, "calibration_file", lambda: path)
    return path


@pytest.fixture(autouse=True)
def engine_notices_unsaid(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Engines made in a test say nothing on stderr of the machine's speed (`Engine.notice`): a
    calibration is said when it lasts a second or more, which a busy machine makes of even the tiny
    models', so a test counting stderr lines would depend on the load. Returns the real sink, for
    the tests of those lines."""
    said = edgespec.engine.engine.say_on_stderr
    monkeypatch.setattr(edgespec.engine.engine, "say_on_stderr", lambda message: None)
    return said


@pytest.fixture(autouse=True)
def no_history_or_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands under test neither keep their calls in a history nor index the checkout they run in
    (a test of those sources turns them back on, in its own home): one test's replies must not
    change another's drafts, and the checkout's files would take seconds to index per command."""
    monkeypatch.setenv("EDGESPEC_NO_HISTORY", "1")
    monkeypatch.setenv("EDGESPEC_NO_REPOSITORY", "1")


@pytest.fixture(autouse=True)
def nothing_said_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts as a new process does: no file it could not save said yet (`unsaved`), said on stderr."""
    unsaved.forget()
    monkeypatch.setattr(unsaved, "say", unsaved.say)


@pytest.fixture(scope="session")
def read_only() -> Callable[[Path, list[str]], list[str]]:
    """`read_only(folder, argv)`: argv wrapped to run with `folder` really unwritable. As root, whom
    file modes do not stop, `folder` is bind-mounted read-only in a private mount namespace
    (`unshare -m`: the writes fail with EROFS, as on a read-only mount); as another user, the
    folder tree loses its write bits (EACCES). Skips where root cannot make a mount namespace."""
    if os.geteuid() != 0:

        def by_mode(folder: Path, argv: list[str]) -> list[str]:
            for d in [folder, *(p for p in folder.rglob("*") if p.is_dir())]:
                d.chmod(0o555)
            return argv

        return by_mode
    namespace = shutil.which("unshare") and subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    if not namespace or namespace.returncode != 0:
        pytest.skip("root without a mount namespace: no read-only folder to test with")

    def by_mount(folder: Path, argv: list[str]) -> list[str]:
        script = 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" "$0" && exec "$@"'
        return ["unshare", "-m", "sh", "-c", script, str(folder), *argv]

    return by_mount


@pytest.fixture(scope="session")
def tiny_gguf_factory(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """`factory(seed=0, n_vocab_extra=0, eos_token="<|endoftext|>", like=None, similarity=0.0, fim=False)`.

    Returns the path of a tiny GGUF with those parameters, written on first use and reused for the
    rest of the session. A different `seed` gives a different model over the same vocabulary (a
    draft); `like=target_seed, similarity=s` gives a draft that partly agrees with that target.
    """
    folder = tmp_path_factory.mktemp("tiny_gguf")
    written: dict[tuple, Path] = {}

    def factory(
        seed: int = 0,
        n_vocab_extra: int = 0,
        eos_token: str = "<|endoftext|>",
        like: int | None = None,
        similarity: float = 0.0,
        fim: bool = False,
    ) -> Path:
        key = (seed, n_vocab_extra, eos_token, like, similarity, fim)
        if key not in written:
            tag = eos_token.strip("<|>")
            name = f"tiny-s{seed}-x{n_vocab_extra}-{tag}" + (f"-like{like}-{similarity:g}" if like is not None else "")
            written[key] = write_tiny_gguf(
                folder / f"{name}{'-fim' * fim}.gguf",
                seed=seed,
                n_vocab_extra=n_vocab_extra,
                eos_token=eos_token,
                like=like,
                similarity=similarity,
                fim=fim,
            )
        return written[key]

    return factory


@pytest.fixture(scope="session")
def tiny_gguf(tiny_gguf_factory: Callable[..., Path]) -> Path:
    """The default tiny target model (seed 0, eos `<|endoftext|>`)."""
    return tiny_gguf_factory()


@pytest.fixture(scope="session")
def tiny_draft_gguf(tiny_gguf_factory: Callable[..., Path]) -> Path:
    """A draft for `tiny_gguf`: same vocabulary, ~72% greedy agreement (edgespec.testing.tiny_gguf.DRAFT)."""
    return tiny_gguf_factory(**DRAFT)


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny transformers models built from configs, a folder per architecture (edgespec.testing.tiny_hf),
    for the hf backend's tests (tests/hf_models.py loads them)."""
    from edgespec.testing.tiny_hf import ARCHS, build_tiny_hf

    root = tmp_path_factory.mktemp("tiny_hf")
    return {arch: build_tiny_hf(root / arch, arch) for arch in ARCHS}


@pytest.fixture(scope="module")
def one_thread():
    """torch on one thread for a module of tiny-model tests (`usefixtures("one_thread")`). Tiny matmuls
    gain nothing from threads, and on a busy 2-core machine OpenMP workers waiting for a descheduled
    peer turn milliseconds into hundreds of them."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def tiny_cli_home(tmp_path, monkeypatch, tiny_gguf, tiny_draft_gguf):
    """An empty home and a models.toml naming the tiny pair (and a pair whose file is gone)."""
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    config = tmp_path / "models.toml"
    config.write_text(
        f'default = "tiny"\n[models.t]\nformat = "gguf"\npath = "{tiny_gguf}"\n'
        f'[models.d]\nformat = "gguf"\npath = "{tiny_draft_gguf}"\n'
        f'[models.gone]\nformat = "gguf"\npath = "{tmp_path / "nope.gguf"}"\n'
        '[pairs.tiny]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "d"\ncontext = 256\n'
        '[pairs.missing]\nbackend = "llamacpp"\ntarget = "gone"\ndrafter = "none"\ncontext = 256\n'
    )
    monkeypatch.setenv("EDGESPEC_CONFIG", str(config))
    return tmp_path


@pytest.fixture(scope="module")
def endless_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of an `edgespec` subprocess on the endless tiny pair (tests/edgespec_process.py),
    one per test module."""
    return endless_pair_env(tmp_path_factory.mktemp("endless"))


@pytest.fixture(scope="session")
def real_pair() -> PairConfig:
    """The built-in pair with its published target file, whatever layout `models pull` chose for this
    machine: the in-process tests find positions and replies in that file's distributions, which must
    not depend on the machine the suite runs on. Skipped where its files are not in the store (`make
    test` pulls them)."""
    pair = replace(EngineOptions().check().pair, layout="published")
    store = Store()
    if not all(store.state(m).present for m in (pair.target, pair.draft)):
        pytest.skip("default pair not pulled (`make test` pulls it)")
    return pair


@pytest.fixture(scope="session")
def real_pair_engine(real_pair: PairConfig) -> Iterator[Engine]:
    """The built-in pair, loaded once for the whole session: every in-process test of the real pair
    shares it. A test that swaps a part of it (its target, its prompt cache) puts it back. Tests take
    it as `real_engine`; a module fixture that takes it directly finds what earlier tests left in its
    caches."""
    engine, _ = EngineOptions(pair=real_pair).check().open()
    yield engine
    engine.close()


@pytest.fixture
def real_engine(real_pair_engine: Engine) -> Iterator[Engine]:
    """The session's real pair as a new process finds it: empty KV caches, no prompt cache."""

    def reset() -> None:
        for backend in (real_pair_engine.target, real_pair_engine.draft):
            backend.truncate(0)
        real_pair_engine.cache = None

    reset()
    yield real_pair_engine
    reset()


@pytest.fixture
def generations(live) -> Iterator[list]:
    """The constraints of the generations the engine of `live` (a module's served tiny pair, see
    tests/live_server.py) began while the test ran: a request refused before queueing adds none."""
    engine, started = live.worker.engine, []
    real = engine.generate_tokens

    def counting(*args, **kwargs):
        started.append(args[1].constraint)
        return real(*args, **kwargs)

    engine.generate_tokens = counting
    yield started
    del engine.generate_tokens
