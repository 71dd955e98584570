"""`edgespec export vllm`: the printed command parses, and its --speculative-config fits vLLM's
documented SpeculativeConfig (field names, types, bounds), checked here without vLLM installed."""

from __future__ import annotations

import json
import shlex
from typing import Annotated, Literal

import pytest
from click.testing import CliRunner
from pydantic import BaseModel, ConfigDict, Field, model_validator

from edgespec.cli import main as cli


class VllmSpeculativeConfig(BaseModel):
    """The SpeculativeConfig fields an export may set, with the types and bounds vLLM documents for
    them (vllm/config/speculative.py): num_speculative_tokens > 0; model, revision strings; method
    one of vLLM's names; prompt_lookup_min/max >= 1, max required for n-gram and not below min."""

    model_config = ConfigDict(extra="forbid", strict=True)

    num_speculative_tokens: Annotated[int, Field(gt=0)]
    model: str | None = None
    method: Literal["ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "eagle", "eagle3", "mtp"] | None = (
        None
    )
    revision: str | None = None
    prompt_lookup_max: Annotated[int, Field(ge=1)] | None = None
    prompt_lookup_min: Annotated[int, Field(ge=1)] | None = None

    @model_validator(mode="after")
    def _consistent(self):
        assert self.model or self.method, "vLLM needs a draft model or a method"
        if self.method == "ngram":
            assert self.prompt_lookup_max is not None and (self.prompt_lookup_min or 1) <= self.prompt_lookup_max
        return self


@pytest.fixture
def env(tmp_path, monkeypatch, tiny_gguf, tiny_draft_gguf):
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path / "home"))
    config = tmp_path / "models.toml"
    config.write_text(
        f'[models.t]\nformat = "gguf"\npath = "{tiny_gguf}"\n'
        f'[models.d]\nformat = "gguf"\npath = "{tiny_draft_gguf}"\n'
        '[pairs.tiny]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "d"\ncontext = 256\n'
        '[pairs.tiny-ngram]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "ngram"\ncontext = 256\n'
        '[pairs.tiny-plain]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "none"\ncontext = 256\n'
    )
    monkeypatch.setenv("EDGESPEC_CONFIG", str(config))
    return tmp_path


def export(*args: str) -> tuple[list[str], dict | None, str]:
    """(argv of the printed `vllm serve` command, its speculative config, stderr)."""
    result = CliRunner().invoke(cli.main, ["export", "vllm", *args])
    assert result.exit_code == 0, result.stderr
    argv = shlex.split(result.stdout)
    assert argv[:2] == ["vllm", "serve"] and len(result.stdout.strip().splitlines()) == 1
    spec = None
    if "--speculative-config" in argv:
        spec = json.loads(argv[argv.index("--speculative-config") + 1])
        VllmSpeculativeConfig.model_validate(spec)
    return argv, spec, result.stderr


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_a_hub_pair_is_named_by_its_repos(env):
    argv, spec, notes = export("qwen2.5-coder-7b-hf-4bit", "--k", "4")
    assert argv[2] == "Qwen/Qwen2.5-Coder-7B-Instruct"
    assert spec == {"model": "Qwen/Qwen2.5-Coder-0.5B-Instruct", "num_speculative_tokens": 4}
    assert option(argv, "--served-model-name") == "qwen2.5-coder-7b-hf-4bit"  # clients keep the model name
    assert option(argv, "--max-model-len") == "8192" and notes == ""


def test_a_gguf_on_the_hub_and_a_model_with_no_hub_id(env):
    argv, spec, notes = export("qwen2.5-coder-7b", "--k", "2")
    assert argv[2] == "Qwen/Qwen2.5-Coder-7B-Instruct-GGUF:Q4_K_M" and "vllm-gguf-plugin" in notes
    assert spec["model"] == "<hub id of qwen2.5-coder-0.5b-instruct-q4_k_m>" and spec["num_speculative_tokens"] == 2
    assert str(env / "home" / "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf") in notes


def test_a_draft_model_pair_gets_k_from_this_machines_controller(env, tiny_gguf):
    argv, spec, notes = export("tiny")
    assert set(spec) == {"model", "num_speculative_tokens"} and spec["num_speculative_tokens"] >= 1
    assert "calibrated controller" in notes and f"publish {tiny_gguf}" in notes


def test_an_ngram_pair_becomes_vllms_ngram_method(env):
    _, spec, notes = export("tiny-ngram")
    assert spec["method"] == "ngram" and 1 <= spec["prompt_lookup_min"] <= spec["prompt_lookup_max"]
    _, given, _ = export("tiny-ngram", "--k", "5")
    assert given == {"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 4, "num_speculative_tokens": 5}


def test_a_pair_that_does_not_draft_has_no_speculative_config(env):
    argv, spec, notes = export("tiny-plain")
    assert spec is None and "decodes plainly" in notes


def test_an_unknown_pair_or_bad_k_is_one_line(env):
    for args, code in ((["nope"], 2), (["tiny", "--k", "0"], 2)):
        result = CliRunner().invoke(cli.main, ["export", "vllm", *args])
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.exit_code == code and len(lines) == 1 and lines[0].startswith("edgespec: error:")
