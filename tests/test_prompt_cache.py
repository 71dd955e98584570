"""The prompt cache on tiny GGUFs: a hit replies as a cold run does and reads only the rest; bad
entries are ignored, removed and said once; the budget evicts the least recently used; writers
racing on one entry leave one whole entry; the memory tier keeps alternating prompts warm. Through
the front ends (`run`, the budget's settings, the folder's modes): tests/test_prompt_cache_cli.py."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from edgespec.backends.llamacpp import LlamaCppBackend
from edgespec.decoding.backend import BackendError, exact_end
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.events import Summary, Token
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.engine.engine import Engine, GenerateSettings
from edgespec.engine.prompt_cache import MIN_TOKENS, PromptCache
from edgespec.engine.prompt_cache_files import MAGIC, digest, read_entry
from edgespec.models.registry import ModelSpec, PairConfig
from tests.cached_prompts import FILE, LONGER, load
from tests.fakes import fake_engine

SETTINGS = GenerateSettings(max_tokens=24, draft=DraftChoice.MODEL, policy=PolicyChoice.parse("3"))


@pytest.fixture
def open_engine(tiny_gguf, tiny_draft_gguf):
    """`open_engine(cache)`: a fresh tiny pair (new backends, as in a new process) using `cache`."""
    engines = []
    pair = PairConfig("tiny", "llamacpp", ModelSpec("t", "gguf"), ModelSpec("d", "gguf"), "model", 256)

    def make(cache: PromptCache | None) -> Engine:
        engines.append(Engine(pair, load(tiny_gguf), load(tiny_draft_gguf), cache=cache))
        return engines[-1]

    yield make
    for engine in engines:
        engine.close()


def reply(engine: Engine, text: str) -> tuple[list[int], Summary]:
    events = list(engine.generate_tokens(engine.target.tokenize(text), SETTINGS))
    return [e.id for e in events if isinstance(e, Token)], events[-1]


def counting_reads(backend) -> list[int]:
    """Record how many tokens each eval call of `backend` reads."""
    reads: list[int] = []
    evaluate = backend.eval

    def eval(tokens, n_logits):
        reads.append(len(tokens))
        return evaluate(tokens, n_logits)

    backend.eval = eval
    return reads


@pytest.fixture
def notes() -> list[str]:
    return []


@pytest.fixture
def cache(tmp_path, notes) -> PromptCache:
    return PromptCache(tmp_path / "cache", warn=notes.append)


def test_a_hit_in_a_new_process_reads_only_the_rest_and_replies_as_a_cold_run(open_engine, cache):
    _, first = reply(open_engine(cache), FILE + "\n\nExplain f1.")
    assert first.prompt_cached == 0
    assert len(list(cache.folder.glob("*.kv"))) == 2  # the target's state and the draft's

    cold_ids, cold = reply(open_engine(None), FILE + "\n\nAdd type hints.")
    warm_engine = open_engine(cache)
    draft_reads = counting_reads(warm_engine.draft)
    warm_ids, warm = reply(warm_engine, FILE + "\n\nAdd type hints.")
    assert warm_ids == cold_ids
    shared = len(warm_engine.target.tokenize(FILE + "\n\n"))
    assert cold.prompt_cached == 0
    # all of it up to where the read chunk holding the shared prefix's end starts, or its tail chunk
    # where both prompts end in the same read chunk (a merge across "\n\n" may differ)
    chunk, tail = warm_engine.target.read_chunk, warm_engine.target.tail_chunk
    same_last_chunk = first.prompt_tokens // chunk == warm.prompt_tokens // chunk
    step = tail if same_last_chunk and shared % chunk >= tail else chunk
    assert shared - 2 - step < warm.prompt_cached <= shared and warm.prompt_cached % step == 0
    # the draft model read only the rest too, at its first draft (with the first token)
    assert draft_reads[0] == warm.prompt_tokens - warm.prompt_cached + 1


def test_asking_again_covers_the_entry_and_a_longer_file_replaces_it(open_engine, cache):
    engine = open_engine(cache)
    reply(engine, FILE + "\n\nExplain f1.")
    before = sorted(p.name for p in cache.folder.glob("*.kv"))
    reply(open_engine(cache), FILE + "\n\nExplain f2.")  # the same file: its state is kept as it was
    assert sorted(p.name for p in cache.folder.glob("*.kv")) == before
    reply(open_engine(cache), LONGER + "\n\nExplain g1.")  # near-duplicates replace each other
    after = sorted(p.name for p in cache.folder.glob("*.kv"))
    assert len(after) == 2 and not set(after) & set(before)


def damage_state(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF
    path.write_bytes(data)


def damage_token(path: Path) -> None:
    data = bytearray(path.read_bytes())
    at = len(MAGIC) + 4 + int.from_bytes(data[len(MAGIC) : len(MAGIC) + 4], "little") + 8  # the third token id
    data[at] ^= 0x01
    path.write_bytes(data)


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def garble_header(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[30:40] = b"\xff" * 10
    path.write_bytes(data)


@pytest.mark.parametrize(
    "damage, said",
    [(damage_state, "checksum"), (damage_token, "checksum"), (truncate, "truncated"), (garble_header, "bad header")],
)
def test_a_damaged_entry_is_ignored_removed_and_said_once(open_engine, cache, notes, damage, said):
    reply(open_engine(cache), FILE + "\n\nExplain f1.")
    for path in cache.folder.glob("*.kv"):
        damage(path)
    cold_ids, _ = reply(open_engine(None), FILE + "\n\nAdd type hints.")
    ids, summary = reply(open_engine(cache), FILE + "\n\nAdd type hints.")
    assert ids == cold_ids and summary.prompt_cached == 0
    assert len(notes) == 1 and said in notes[0] and "removed" in notes[0]  # two bad entries, one line
    # what is left is this reply's own states, whole
    assert all(read_entry(p, with_state=True, limit=1 << 40).state for p in cache.folder.glob("*.kv"))


def test_an_entry_of_another_model_under_this_models_name_is_removed(
    open_engine, cache, notes, tiny_gguf_factory, tiny_gguf
):
    other = LlamaCppBackend(tiny_gguf_factory(seed=5), 256, threads=2)
    mine = load(tiny_gguf)
    try:
        other.eval(other.tokenize(FILE), 1)
        cache.save(other)
        mine.eval(mine.tokenize(FILE), 1)
        (theirs,) = cache.folder.glob("*.kv")
        cache.save(mine)
        (ours,) = set(cache.folder.glob("*.kv")) - {theirs}
        ours.unlink()
        theirs.rename(ours)  # the name says it is this model's
        mine.truncate(0)
        assert cache.warm(mine, mine.tokenize(FILE + "more")) == 0
        assert mine.cached == [] and not ours.exists()
        assert len(notes) == 1 and "another model" in notes[0]
    finally:
        other.close()
        mine.close()


def test_a_state_llama_cpp_refuses_leaves_an_empty_cache_and_an_error(tiny_gguf):
    backend = load(tiny_gguf)
    ids = backend.tokenize(FILE)
    backend.eval(ids, 1)
    with pytest.raises(BackendError):
        backend.load_state(b"not a state" * 10, ids)
    assert backend.cached == []
    backend.close()


def prompt(i: int) -> str:
    """Prompts sharing no prefix, each over MIN_TOKENS."""
    return f"{'ABC'[i]} file\n" + FILE


def test_the_budget_evicts_the_least_recently_used(tmp_path, tiny_gguf, notes):
    backend = load(tiny_gguf)
    probe = PromptCache(tmp_path / "probe")
    backend.eval(backend.tokenize(prompt(0)), 1)
    probe.save(backend)
    (one,) = probe.folder.glob("*.kv")
    cache = PromptCache(tmp_path / "cache", budget=int(one.stat().st_size * 2.5), warn=notes.append)

    def save(i: int) -> None:
        backend.truncate(0)
        backend.eval(backend.tokenize(prompt(i)), 1)
        cache.save(backend)

    save(0)
    save(1)
    backend.truncate(0)
    assert cache.warm(backend, backend.tokenize(prompt(0) + "x")) > MIN_TOKENS  # 0 is now the most recent
    save(2)
    kept = {tuple(read_entry(p, with_state=False, limit=1 << 40).tokens) for p in cache.folder.glob("*.kv")}
    assert kept == {tuple(backend.tokenize(prompt(i))[: exact_end(backend)]) for i in (0, 2)}
    assert notes == []
    backend.close()


def test_a_state_larger_than_the_budget_is_not_saved(tmp_path, tiny_gguf, notes):
    backend = load(tiny_gguf)
    backend.eval(backend.tokenize(FILE), 1)
    cache = PromptCache(tmp_path / "cache", budget=1000, warn=notes.append)
    cache.save(backend)
    cache.save(backend)
    assert not list(cache.folder.glob("*.kv")) and len(notes) == 1 and "budget" in notes[0]
    backend.close()


WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from edgespec.backends.llamacpp import READ_CHUNK, LlamaCppBackend
    from edgespec.engine.prompt_cache import PromptCache
    from edgespec.engine.prompt_cache_files import Entry
    backend = LlamaCppBackend(Path(sys.argv[1]), 256, threads=2, read_chunk=32)
    backend.eval(backend.tokenize(sys.argv[3]), 1)
    backend.truncate(backend.exact + backend.exact_tail)  # what the cache saves: the exact read
    cache = PromptCache(Path(sys.argv[2]))
    state = backend.save_state()
    go = Path(sys.argv[2]).parent / "go"
    while not go.exists():
        time.sleep(0.001)
    for _ in range(20):  # the same entry, over and over, while the other process does the same
        cache._write(Entry(backend.cache_identity(), list(backend.cached)), state, [])
""")


@pytest.mark.subprocess
def test_two_processes_writing_one_entry_leave_one_whole_entry(tmp_path, tiny_gguf):
    folder = tmp_path / "cache"
    folder.mkdir()
    root = Path(__file__).resolve().parents[1]
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tiny_gguf), str(folder), FILE],
            cwd=root,
            env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        )
        for _ in range(2)
    ]
    (tmp_path / "go").touch()
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    (entry,) = folder.iterdir()  # no temporary file left beside it
    assert entry.suffix == ".kv"
    backend = load(tiny_gguf)
    tokens = backend.tokenize(FILE)
    assert len(tokens) // backend.read_chunk == (len(tokens) + 1) // backend.read_chunk  # both end in one chunk
    assert PromptCache(folder).warm(backend, tokens + [10]) == len(tokens) - len(tokens) % backend.tail_chunk
    backend.close()


def test_an_unwritable_folder_costs_only_the_disk_and_memory_keeps_alternating_prompts_warm(
    tmp_path, open_engine, notes
):
    (tmp_path / "file").write_text("")
    cache = PromptCache(tmp_path / "file" / "cache", memory_entries=4, warn=notes.append)  # cannot be created
    engine = open_engine(cache)
    first = [reply(engine, prompt(i) + "\n\nExplain it.")[1] for i in (0, 1)]
    again = [reply(engine, prompt(i) + "\n\nAdd hints.")[1] for i in (0, 1)]
    assert [s.prompt_cached for s in first] == [0, 0]
    assert all(s.prompt_cached > len(engine.target.tokenize(prompt(0))) - engine.target.read_chunk for s in again)
    assert len(notes) == 1 and "cannot save" in notes[0]


def test_a_backend_without_saved_states_is_left_alone(tmp_path):
    cache = PromptCache(tmp_path / "cache")
    engine = fake_engine()
    engine.cache = cache
    ids = engine.target.tokenize(FILE)
    list(engine.generate_tokens(ids, GenerateSettings(max_tokens=8)))
    assert cache.warm(engine.target, ids) == 0 and not cache.folder.exists()


# -- what the folder may hold under an entry's name ----------------------------------------------


def within(seconds: float, call):
    """`call()`'s result, or a failure when it has not returned after `seconds` (a hang detector:
    generous, as a busy machine is slow; the stuck thread is a daemon and dies with the session)."""
    result: list = []
    worker = threading.Thread(target=lambda: result.append(call()), daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        pytest.fail(f"still running after {seconds} s")
    return result[0]


def entry_bytes(identity: str, n_tokens: int, state_size: int) -> bytes:
    """The start of an entry whose header claims `n_tokens` and `state_size`, with nothing after it."""
    header = json.dumps(
        {"identity": identity, "n_tokens": n_tokens, "state_size": state_size, "tokens_crc32": 0, "state_crc32": 0}
    ).encode()
    return MAGIC + len(header).to_bytes(4, "little") + header


def plant_fifo(path: Path, identity: str, elsewhere: Path) -> None:
    os.mkfifo(path)


def plant_folder(path: Path, identity: str, elsewhere: Path) -> None:
    path.mkdir()


def plant_link_to_a_whole_entry(path: Path, identity: str, elsewhere: Path) -> None:
    (whole,) = elsewhere.glob("*.kv")
    path.symlink_to(whole)


def header_claiming(n_tokens: int, state_size: int):
    def plant(path: Path, identity: str, elsewhere: Path) -> None:
        path.write_bytes(entry_bytes(identity, n_tokens, state_size))

    return plant


def plant_deep_header(path: Path, identity: str, elsewhere: Path) -> None:
    path.write_bytes(MAGIC + (60_000).to_bytes(4, "little") + b"[" * 60_000)


@pytest.mark.parametrize(
    "plant, said, removed",
    [
        (plant_fifo, "not a regular file", True),
        (plant_link_to_a_whole_entry, "a link", True),
        (plant_folder, "not a regular file", False),
        (header_claiming(2**62, 0), "truncated", True),
        (header_claiming(10**11, 0), "truncated", True),
        (header_claiming(0, 2**62), "truncated", True),
        (plant_deep_header, "bad header", True),
    ],
    ids=["fifo", "link", "folder", "tokens-2**62", "tokens-10**11", "state-2**62", "deep-header"],
)
def test_what_is_not_a_whole_regular_entry_is_ignored_at_once(tmp_path, tiny_gguf, cache, notes, plant, said, removed):
    backend = load(tiny_gguf)
    tokens = backend.tokenize(FILE)
    backend.eval(tokens, 1)
    elsewhere = PromptCache(tmp_path / "elsewhere")
    elsewhere.save(backend)  # a whole entry of this model, outside the cache folder
    backend.truncate(0)
    identity = backend.cache_identity()
    cache.folder.mkdir()
    path = cache.folder / f"{digest(identity.encode())}-{'0' * 16}.kv"
    plant(path, identity, elsewhere.folder)

    assert within(60, lambda: cache.warm(backend, tokens + [10])) == 0
    assert backend.cached == []
    assert len(notes) == 1 and said in notes[0]
    if removed:
        assert "removed" in notes[0] and not os.path.lexists(path)
    else:
        assert "cannot be removed" in notes[0] and path.is_dir()
    assert len(list(elsewhere.folder.glob("*.kv"))) == 1  # a link's target is left alone
    backend.close()


def test_an_entry_that_cannot_be_removed_is_said_as_kept_once(monkeypatch, open_engine, cache, notes):
    reply(open_engine(cache), FILE + "\n\nExplain f1.")
    for path in cache.folder.glob("*.kv"):
        garble_header(path)
    kept = sorted(cache.folder.glob("*.kv"))

    def refuse(self, missing_ok=False):  # a read-only folder, as a root test process has no other
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))

    monkeypatch.setattr(Path, "unlink", refuse)
    cold_ids, _ = reply(open_engine(None), FILE + "\n\nAdd type hints.")
    ids, summary = reply(open_engine(cache), FILE + "\n\nAdd type hints.")
    assert ids == cold_ids and summary.prompt_cached == 0
    assert set(kept) <= set(cache.folder.glob("*.kv"))
    assert len(notes) == 1 and "cannot be removed (Permission denied)" in notes[0] and "removed a" not in notes[0]
