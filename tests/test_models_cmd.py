"""`edgespec models` through click's runner: list, pull errors, and check on tiny GGUF pairs."""

from __future__ import annotations

import hashlib

import pytest
from click.testing import CliRunner

from edgespec.backends import llamacpp_runtime
from edgespec.cli.models import models
from edgespec.models import fit as machine
from tests.model_files import fill_repo, overwrite_keeping_mtime, tiny_tokens, write_tokenizer_gguf


@pytest.fixture
def run(tmp_path, monkeypatch):
    """Invoke `edgespec models ...` with an empty store and no user config of the developer's."""
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("EDGESPEC_CONFIG", raising=False)
    return lambda *args: CliRunner().invoke(models, list(args))


@pytest.fixture
def user_config(tmp_path):
    """A user models.toml with pairs made of tiny GGUFs that hold only tokenizer metadata."""
    tokens = tiny_tokens()
    tokens[257] = "LL"
    write_tokenizer_gguf(tmp_path / "a.gguf")
    write_tokenizer_gguf(tmp_path / "b.gguf")
    write_tokenizer_gguf(tmp_path / "renamed.gguf", tokens=tokens, eos=259)
    write_tokenizer_gguf(tmp_path / "padded.gguf", tokens=tiny_tokens(n_padding=64))
    models_toml = "".join(
        f'[models.{name}]\nformat = "gguf"\npath = "{tmp_path / name}.gguf"\n'
        for name in ("a", "b", "renamed", "padded")
    ) + "".join(
        f'[pairs.{name}]\nbackend = "llamacpp"\ntarget = "a"\ndrafter = "{draft}"\ncontext = 256\n'
        for name, draft in (("same", "b"), ("different", "renamed"), ("padded", "padded"), ("lookup", "ngram"))
    )
    path = tmp_path / "models.toml"
    path.write_text(models_toml)
    return path


def test_list_shows_every_pair_missing_in_an_empty_store(run):
    for args in ((), ("list",)):
        result = run(*args)
        assert result.exit_code == 0, result.output
        assert "qwen2.5-coder-1.5b (default)" in result.output
        assert "qwen2.5-coder-1.5b-instruct-q4_k_m" in result.output and "llamacpp" in result.output
        assert "target missing (1.1 GB)" in result.output and "draft missing (491.4 MB)" in result.output
        assert "draft missing (built from" in result.output  # the default pair's draft, built when pulled
        assert "llama-3.1-8b-hf-4bit" in result.output


def test_list_shows_present_files_and_user_pairs(run, user_config):
    for args in (
        ("--config", str(user_config)),
        ("list", "--config", str(user_config)),
        ("--config", str(user_config), "list"),
    ):
        result = run(*args)
        assert result.exit_code == 0, result.output
        assert "lookup" in result.output and "ngram" in result.output
        assert "target present" in result.output and "unknown, no weights" in result.output  # the file's layout


def test_pull_of_an_unknown_pair_is_one_line(run):
    result = run("pull", "no-such-pair")
    assert result.exit_code == 2  # a name that does not exist: a usage error, as for any flag
    assert result.output.count("\n") == 1
    assert result.output.startswith('edgespec: error: unknown pair "no-such-pair"')
    assert "available: qwen2.5-coder-1.5b" in result.output


def test_pull_of_local_files_skips_them(run, user_config):
    result = run("pull", "same", "--config", str(user_config))
    assert result.exit_code == 0, result.output
    assert "target a: present" in result.output and "draft b: present" in result.output
    assert "pair same is ready" in result.output


def test_a_file_overwritten_with_its_mtime_restored_is_not_verified(run, tmp_path):
    model = tmp_path / "t.gguf"
    write_tokenizer_gguf(model)
    data = model.read_bytes()
    config = tmp_path / "models.toml"
    config.write_text(
        f'[models.t]\nformat = "gguf"\npath = "{model}"\nsize = {len(data)}\n'
        f'sha256 = "{hashlib.sha256(data).hexdigest()}"\n'
        '[pairs.p]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "ngram"\ncontext = 256\n'
    )
    result = run("pull", "p", "--config", str(config))
    assert result.exit_code == 0 and "target t: present" in result.output and "verified" in result.output
    overwrite_keeping_mtime(model, len(data) // 2)
    result = run("pull", "p", "--config", str(config))
    assert result.exit_code == 1 and "verified" not in result.output
    assert result.output.endswith(
        f'edgespec: error: model "t": {model} is incomplete or damaged; a local "path" is never pulled\n'
    )
    assert "target incomplete or damaged" in run("list", "--config", str(config)).output


def test_bad_config_is_one_line(run, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[pairs.x]\nbackend = "vllm"\n')
    result = run("list", "--config", str(bad))
    assert result.exit_code == 1
    assert result.output == f'edgespec: error: {bad}: pair "x": key "backend": "vllm" is not one of llamacpp, hf\n'


def test_check_compatible_pair(run, user_config):
    result = run("check", "same", "--config", str(user_config))
    assert result.exit_code == 0, result.output
    assert result.output == "compatible\n"


def test_check_padding_difference_is_a_note(run, user_config):
    result = run("check", "padded", "--config", str(user_config))
    assert result.exit_code == 0, result.output
    assert result.output.startswith("note: vocabulary size: target 261, draft 325")
    assert result.output.endswith("compatible\n")


def test_check_incompatible_pair_says_what_differs(run, user_config):
    result = run("check", "different", "--config", str(user_config))
    assert result.exit_code == 1
    assert 'differs: token texts: 1 of 261 shared ids differ: id 257: target "ll", draft "LL"' in result.output
    assert 'differs: end-of-generation ids: target 260 "<|im_end|>", draft 259 "<|endoftext|>"' in result.output
    assert result.output.endswith("incompatible\n")


def test_check_pair_without_draft_model(run, user_config):
    result = run("check", "lookup", "--config", str(user_config))
    assert result.exit_code == 0
    assert "has no draft model (drafter: ngram)" in result.output


def test_check_missing_models_says_to_pull(run):
    result = run("check", "qwen2.5-coder-1.5b")
    assert result.exit_code == 1
    assert result.output.startswith('edgespec: error: model "qwen2.5-coder-1.5b-instruct-q4_k_m": ')
    assert result.output.endswith("does not exist; run: edgespec models pull qwen2.5-coder-1.5b\n")


def row(output: str, pair: str) -> list[str]:
    """The cells of a pair's first table line."""
    line = next(line for line in output.splitlines() if line.startswith(f"│ {pair} "))
    return [cell.strip() for cell in line.strip("│").split("│")]


def test_list_says_where_each_pair_runs_and_whether_it_fits(run, monkeypatch):
    monkeypatch.setattr(machine, "ram_bytes", lambda: 8_000_000_000)
    monkeypatch.setattr(llamacpp_runtime, "gpu_offload", lambda: False)  # as on this machine, whatever the build
    output = run().output
    assert row(output, "qwen2.5-coder-1.5b (default)")[-2:] == [
        "cpu (llama.cpp: no GPU offload)",
        "yes: 2.3 of 8.0 GB RAM",
    ]  # its draft: 0.36 GB
    assert row(output, "qwen2.5-coder-14b")[-1] == "no: 11.9 GB > 8.0 GB RAM"
    monkeypatch.setattr(llamacpp_runtime, "gpu_offload", lambda: True)  # a CUDA build on a 24 GB card
    monkeypatch.setattr(llamacpp_runtime, "gpu_memory", lambda: 24_000_000_000)
    output = run().output
    assert row(output, "qwen2.5-coder-14b")[-2:] == ["gpu (llama.cpp: all layers)", "yes: 11.9 of 24.0 GB GPU"]


def test_a_first_pull_without_a_published_sha256_warns_once(run, tmp_path, monkeypatch):
    from huggingface_hub import constants

    cache = tmp_path / "hf"
    fill_repo(cache, "Qwen/Qwen2.5-Coder-7B-Instruct-GGUF", {"qwen2.5-coder-7b-instruct-q4_k_m.gguf": b"GGUF 7b"})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    config = tmp_path / "models.toml"
    config.write_text(
        '[pairs.seven]\nbackend = "llamacpp"\ntarget = "qwen2.5-coder-7b-instruct-q4_k_m"\n'
        'drafter = "ngram"\ncontext = 256\n'
    )
    first = run("pull", "seven", "--config", str(config))
    assert first.exit_code == 0, first.output
    warnings = [line for line in first.output.splitlines() if line.startswith("edgespec: warning: ")]
    sha = hashlib.sha256(b"GGUF 7b").hexdigest()
    assert warnings == [
        f'edgespec: warning: model "qwen2.5-coder-7b-instruct-q4_k_m": no public source states its '
        f"sha256; recorded {sha} from this first pull, later checks compare against it "
        f"({tmp_path / 'home' / 'models' / '.first-seen.json'})"
    ]
    again = run("pull", "seven", "--config", str(config))
    assert again.exit_code == 0 and "warning" not in again.output and "present (7 B), verified" in again.output


def test_pull_builds_a_derived_draft_after_its_base_then_finds_it_verified(run, tmp_path, tiny_gguf, tiny_draft_gguf):
    from edgespec.models import layouts

    base = tmp_path / "d-q8_0.gguf"
    layouts.build(tiny_draft_gguf, base, layouts.Layout("q8_0", whole="q8_0"))
    config = tmp_path / "tiny.toml"
    config.write_text(
        f'[models.t]\nformat = "gguf"\npath = "{tiny_gguf}"\n[models.d]\nformat = "gguf"\npath = "{base}"\n'
        '[models.fast]\nformat = "gguf"\nfile = "fast.gguf"\n'
        'source = { derive = "d", layout = "draft-q4_0" }\n'
        '[pairs.tiny]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "fast"\ncontext = 256\n'
    )
    built = tmp_path / "home" / "models" / "fast.gguf"
    first = run("pull", "tiny", "--config", str(config))
    assert first.exit_code == 0, first.output
    lines = first.output.splitlines()
    assert lines[0].startswith("target t: present") and lines[1].startswith("draft's base d: present")
    assert (
        lines[2]
        == f"draft fast: building {built} from d (layout draft-q4_0, with llama.cpp's quantizer: under a minute)"
    )
    assert lines[3].startswith(f"draft fast: {built} (") and lines[3].endswith("), verified")
    assert set(layouts.tensor_types(built).values()) == {"q4_0"}
    again = run("pull", "tiny", "--config", str(config))
    assert again.exit_code == 0 and "building" not in again.output and "draft fast: present" in again.output

    # a layout of that draft: every base, root first, then the new file
    config.write_text(
        config.read_text() + '[models.top]\nformat = "gguf"\nfile = "top.gguf"\n'
        'source = { derive = "fast", layout = "q4_0-pure" }\n'
        '[pairs.tiny2]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "top"\ncontext = 256\n'
    )
    chained = run("pull", "tiny2", "--config", str(config))
    assert chained.exit_code == 0, chained.output
    assert [line.split(":")[0] for line in chained.output.splitlines()] == [
        "target t",
        "draft's base d",
        "draft's base fast",
        "draft top",
        "draft top",
        "target layout",  # t's layout for this machine, chosen when tiny was pulled
        "pair tiny2 is ready",
    ]

    config.write_text(config.read_text().replace('layout = "draft-q4_0"', 'layout = "q2"'))
    bad = run("pull", "tiny", "--config", str(config))
    assert bad.exit_code == 1 and bad.output.splitlines()[-1].startswith(
        'edgespec: error: model "fast": key "source.layout": no layout \'q2\'; layouts: q6k-as-q4k,'
    )


@pytest.mark.heavy
def test_check_reports_the_noise_floor_measured_once(run, tmp_path, tiny_gguf, tiny_draft_gguf):
    config = tmp_path / "tiny.toml"
    config.write_text(
        f'[models.t]\nformat = "gguf"\npath = "{tiny_gguf}"\n[models.d]\nformat = "gguf"\n'
        f'path = "{tiny_draft_gguf}"\n[pairs.tiny]\nbackend = "llamacpp"\ntarget = "t"\n'
        'drafter = "d"\ncontext = 256\n'
    )
    first = run("check", "tiny", "--noise-floor", "--config", str(config))
    assert first.exit_code == 0, first.output
    assert "compatible" in first.stdout and "measuring the noise floor of t" in first.stderr
    lines = first.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("noise floor of t: "))
    sizes = [line.split()[0] for line in lines[header + 1 :]]
    assert sizes == [f"n={n}" for n in range(2, 17)]
    again = run("check", "tiny", "--noise-floor", "--config", str(config))
    assert again.exit_code == 0 and again.stdout == first.stdout and "measuring" not in again.stderr


def test_check_of_a_pair_whose_tokenizers_differ_stops_before_the_noise_floor(run, user_config):
    result = run("check", "different", "--noise-floor", "--config", str(user_config))
    assert result.exit_code == 1 and "noise floor" not in result.output
