"""Constrained decoding (edgespec/decoding/constraint.py, edgespec/constraints/): the reply follows
the target restricted to what the constraint allows, whatever drafts it, on a tiny GGUF pair (exact
equality with plain decoding: its logits are deterministic) and on the real pair (up to the noise
floor); every reply parses and validates; sampled speculation under the mask reproduces the masked
target's distribution, and does not when verification drops the mask; `run --json` /
`--json-schema` write one JSON document, and refuse what they cannot enforce before loading."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

import jsonschema
import numpy as np
import pytest

from edgespec.backends.llamacpp import LlamaCppBackend
from edgespec.constraints import guidance
from edgespec.constraints.guidance import ConstraintError, ConstraintSpec, check
from edgespec.constraints.response_format import ResponseFormat, format_constraint
from edgespec.decoding.backend import sync_cache
from edgespec.decoding.constraint import ConstraintDeadEnd
from edgespec.decoding.copying.ngram import NgramDrafter
from edgespec.decoding.costs.model import CostModel
from edgespec.decoding.decoder import SpeculativeDecoder, after_forced
from edgespec.decoding.drafters import Draft, DraftChoice
from edgespec.decoding.events import Step, Summary, Token
from edgespec.decoding.model_drafter import ModelDrafter
from edgespec.decoding.policy.controller import AutoK
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.decoding.sampling import SamplingParams
from edgespec.engine.engine import Engine, GenerateSettings
from edgespec.models.registry import ModelSpec, PairConfig
from edgespec.quality.divergence import TIE, first_divergence, verdict
from tests.distribution_fit import fit_p_value
from tests.fakes import ArgmaxRecorder
from tests.tiny_cli import invoke, one_line_error

PET = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "kind": {"enum": ["cat", "dog", "bird"]},
        "pos": {
            "type": "object",
            "properties": {"x": {"type": "integer", "minimum": -99, "maximum": 999}, "y": {"enum": [0, 1, 2]}},
            "required": ["x", "y"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "kind", "pos"],
    "additionalProperties": False,
}
PROMPTS = ("hello there the", "in the", "on a real", "well then")
SPECULATIVE = [("auto", PolicyChoice("auto")), ("model", PolicyChoice("fixed", 3)), ("ngram", PolicyChoice("fixed", 4))]


@pytest.fixture(scope="module")
def tiny_engine(tiny_gguf_factory) -> Iterator[Engine]:
    target = tiny_gguf_factory(seed=0)
    draft = tiny_gguf_factory(seed=1, like=0, similarity=0.8)
    pair = PairConfig("tiny", "llamacpp", ModelSpec("t", "gguf"), ModelSpec("d", "gguf"), "model", 512)
    engine = Engine(pair, LlamaCppBackend(target, 512, threads=1), LlamaCppBackend(draft, 512, threads=1))
    yield engine
    engine.close()


def generate(engine: Engine, prompt: Sequence[int], settings: GenerateSettings) -> tuple[list[int], str, Summary]:
    events = list(engine.generate_tokens(list(prompt), settings))
    tokens = [e for e in events if isinstance(e, Token)]
    return [t.id for t in tokens], "".join(t.text for t in tokens), events[-1]


# -- greedy: speculation under a constraint is plain decoding under it ---------------------------------


@pytest.mark.parametrize("spec", [ConstraintSpec.json_schema(PET), ConstraintSpec("regex", r"[a-z ]{3,40}\.")])
def test_greedy_under_a_constraint_equals_plain_decoding_token_for_token(tiny_engine, spec):
    drafted = 0
    for text in PROMPTS:
        prompt = tiny_engine.target.tokenize(text, special=False)
        plain, _, _ = generate(tiny_engine, prompt, GenerateSettings(120, draft=DraftChoice.NONE, constraint=spec))
        for draft, choice in SPECULATIVE:
            out, _, summary = generate(
                tiny_engine, prompt, GenerateSettings(120, draft=draft, policy=choice, constraint=spec)
            )
            assert out == plain, (text, draft)
            drafted += summary.accepted
    assert drafted > 0  # speculation took part, not only forced tokens and plain steps


def test_every_reply_under_a_schema_parses_and_validates(tiny_engine):
    spec = ConstraintSpec.json_schema(PET)
    for text in PROMPTS:
        prompt = tiny_engine.target.tokenize(text, special=False)
        for draft, choice in [("none", PolicyChoice("auto")), *SPECULATIVE]:
            _, reply, summary = generate(
                tiny_engine, prompt, GenerateSettings(200, draft=draft, policy=choice, constraint=spec)
            )
            assert summary.stop_reason == "eos"
            jsonschema.validate(json.loads(reply), PET)
            assert summary.constraint_s > 0


def test_unconstrained_output_of_the_tiny_model_is_not_json(tiny_engine):
    """The check above is not vacuous: without the constraint the same model writes no JSON."""
    prompt = tiny_engine.target.tokenize(PROMPTS[0], special=False)
    _, reply, _ = generate(tiny_engine, prompt, GenerateSettings(60, draft=DraftChoice.NONE))
    with pytest.raises(ValueError):
        json.loads(reply)


# -- drafts under the mask ------------------------------------------------------------------------


class AllowedSet:
    """A constraint that allows a fixed set of tokens everywhere (the drafters' side of the protocol)."""

    def __init__(self, n_vocab: int, allowed: set[int]):
        self.mask = np.zeros(n_vocab, dtype=bool)
        self.mask[list(allowed)] = True
        self.consumed: list[int] = []
        self.busy_s = 0.0

    def allowed(self) -> np.ndarray:
        return self.mask

    def advance(self, token_id: int) -> bool:
        if not self.mask[token_id]:
            return False
        self.consumed.append(token_id)
        return True

    def rollback(self, n: int) -> None:
        del self.consumed[len(self.consumed) - n :]

    def allowed_prefix(self, tokens: Sequence[int]) -> int:
        return next((i for i, t in enumerate(tokens) if not self.mask[t]), len(tokens))

    def forced(self) -> list[int]:
        return []

    def done(self) -> bool:
        return False

    def accepting(self) -> bool:
        return True


def test_an_ngram_copy_stops_at_the_first_forbidden_token():
    context = [1, 2, 3, 4, 5, 6, 1, 2]
    constraint = AllowedSet(10, {1, 2, 3, 4})
    assert NgramDrafter().propose(context, 6).ids[:4] == [3, 4, 5, 6]
    assert NgramDrafter().propose(context, 6, constraint=constraint).ids == [3, 4]


def test_the_draft_model_drafts_only_allowed_tokens_and_leaves_the_matcher_where_it_was(tiny_engine):
    draft = tiny_engine.draft
    prompt = draft.tokenize("hello there the", special=False)
    allowed = {int(t) for t in np.random.default_rng(0).choice(draft.n_vocab - 3, 12, replace=False)}
    constraint = AllowedSet(draft.n_vocab, allowed)
    proposal = ModelDrafter(draft).propose(prompt, 6, SamplingParams(), np.random.default_rng(0), constraint=constraint)
    unconstrained = ModelDrafter(draft).propose(prompt, 6, SamplingParams(), np.random.default_rng(0))
    assert len(proposal.ids) == 6 and set(proposal.ids) <= allowed
    assert not set(unconstrained.ids) <= allowed  # the mask changed what it drafted
    assert constraint.consumed == []


# -- forced text: free to draft ----------------------------------------------------------------------

LONG_KEYS = {
    "type": "object",
    "properties": {"the_first_field_name": {"type": "string"}, "another_rather_long_field": {"type": "string"}},
    "required": ["the_first_field_name", "another_rather_long_field"],
    "additionalProperties": False,
}


def test_a_round_drafts_after_the_forced_text_in_the_same_pass(tiny_engine):
    """Forced tokens start a round's draft and the draft model drafts on after them: one pass, not a
    pass for the forced text and another for the draft."""
    prompt = tiny_engine.target.tokenize(PROMPTS[1], special=False)
    spec = ConstraintSpec.json_schema(LONG_KEYS)
    settings = GenerateSettings(48, draft=DraftChoice.MODEL, policy=PolicyChoice("fixed", 8), constraint=spec)
    events = list(tiny_engine.generate_tokens(prompt, settings))
    replay, joined = tiny_engine.constraint(spec), 0
    for event in events:
        if isinstance(event, Step):
            forced = replay.forced()
            joined += bool(forced) and event.drafter == "model" and len(forced) < event.drafted
            assert list(event.drafted_ids[: len(forced)]) == forced[: event.drafted]
        elif isinstance(event, Token):
            replay.advance(event.id)
    assert joined >= 1


def test_rows_where_the_constraint_allows_one_token_are_verified_without_logits(tiny_engine, monkeypatch):
    """A key's tokens are, at their rows, the only ones the schema allows: the pass asks no logits
    for those rows (the output layer is much of a row's cost), and the reply is plain decoding's."""
    prompt = tiny_engine.target.tokenize(PROMPTS[1], special=False)
    spec = ConstraintSpec.json_schema(
        {**LONG_KEYS, "properties": {"ok": {"type": "boolean"}, **LONG_KEYS["properties"]}}
    )
    plain = GenerateSettings(48, draft=DraftChoice.NONE, policy=PolicyChoice("fixed", 0), constraint=spec)
    plain_ids = [e.id for e in tiny_engine.generate_tokens(prompt, plain) if isinstance(e, Token)]
    needs, eval_tree = [], tiny_engine.target.eval_tree

    def recording(pending, ids, parents, need=None):
        needs.append(need)
        return eval_tree(pending, ids, parents, need)

    monkeypatch.setattr(tiny_engine.target, "eval_tree", recording)
    spec_settings = GenerateSettings(48, draft=DraftChoice.NGRAM, policy=PolicyChoice("fixed", 8), constraint=spec)
    assert [e.id for e in tiny_engine.generate_tokens(prompt, spec_settings) if isinstance(e, Token)] == plain_ids
    skipped = [need.count(False) for need in needs if need is not None]
    assert skipped and max(skipped) >= 10  # the 25-character key's tokens, each the only one allowed


def test_a_forced_tail_the_target_spelled_otherwise_is_not_offered_again(tiny_engine):
    """The forced text's last token is a guess at how the target splits the text's end: here the
    space after a comma, which the tiny target merges into " t" of " true". Once refused it is not
    drafted again in the reply, and the reply is plain decoding's."""
    spec = ConstraintSpec.json_schema({"type": "array", "items": {"type": "boolean"}, "minItems": 8, "maxItems": 8})
    refusals = 0
    for text in PROMPTS:
        prompt = tiny_engine.target.tokenize(text, special=False)
        settings = GenerateSettings(64, draft=DraftChoice.NGRAM, policy=PolicyChoice("fixed", 4), constraint=spec)
        events = list(tiny_engine.generate_tokens(prompt, settings))
        refused: set[int] = set()
        for step in (e for e in events if isinstance(e, Step)):
            forced = step.drafted_ids[: step.forced]
            assert not (forced and forced[-1] in refused)
            if step.accepted < step.forced:
                refused.add(forced[step.accepted])
        refusals += len(refused)
        plain = GenerateSettings(64, draft=DraftChoice.NONE, policy=PolicyChoice("fixed", 0), constraint=spec)
        assert [e.id for e in events if isinstance(e, Token)] == [
            e.id for e in tiny_engine.generate_tokens(prompt, plain) if isinstance(e, Token)
        ]
    assert refusals


FLAG = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": False}


def test_the_forced_text_is_spelled_to_its_end(tiny_engine):
    """The forced text runs to the value: '{"ok": ' here. llguidance's own forced tokens stop
    before the space (the tiny vocabulary merges " t" into one token, as `true` may follow);
    spelled to its end, the space is drafted and the key's round ends on the value's first token."""
    matcher = tiny_engine.constraint(ConstraintSpec.json_schema(FLAG))
    spelled = b"".join(tiny_engine.target.token_bytes(t) for t in matcher.forced())
    assert spelled == b'{"ok": '


class CountingEvals:
    """A backend that counts its `eval` calls (each a draft step or a batch read)."""

    def __init__(self, backend):
        self._backend, self.evals = backend, 0

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def eval(self, tokens, n_logits):
        self.evals += 1
        return self._backend.eval(tokens, n_logits)


def test_the_draft_model_takes_forced_tokens_without_a_draft_step(tiny_engine):
    tiny_engine.draft.truncate(0)
    draft = CountingEvals(tiny_engine.draft)
    prompt = draft.tokenize(PROMPTS[1], special=False)
    matcher = tiny_engine.constraint(ConstraintSpec.json_schema(LONG_KEYS))
    proposal = ModelDrafter(draft).propose(prompt, 12, SamplingParams(), np.random.default_rng(0), constraint=matcher)
    forced = matcher.forced()  # the matcher is back at the start, where '{"the_first_field_name": "' is forced
    assert len(forced) > 12 and proposal.ids == forced[:12]
    assert draft.evals <= 2  # the prompt's reading; then the first token is chosen, the rest taken as forced


def test_forced_tokens_are_no_draft_steps_for_the_cost_curve_nor_drafts_for_the_controller():
    """A round of 3 forced tokens then 2 drafted by the model, all accepted: the draft step is the
    draft time over the 2 chosen tokens; the controller's live rate counts all 6 tokens of the pass,
    its draft-model scores only the 2 drafted ones."""
    step = Step(5, 5, (7, 8, 9, 1, 2), (), 0.02, 0.1, drafter="model", parents=(-1, 0, 1, 2, 3), forced=3)
    own = Draft([1, 2], [None, None], [0.9, 0.8], steps=2)
    costs = CostModel()
    costs.observe_round(step, after_forced([7, 8, 9], own))
    assert costs.draft_step == pytest.approx(0.01)
    part = step.drafted_part()
    assert (part.drafted, part.accepted, part.drafted_ids, part.tree()) == (2, 2, (1, 2), ([-1, 0], [0, 1]))
    policy = AutoK("model", costs)
    policy.observe(step, own)
    assert policy._measured == pytest.approx(6 / 0.12)


# -- sampling: the masked target's distribution, whatever drafts ------------------------------------

WORDS = ["cat", "cab", "cod", "dog", "dot"]  # no merged token of the tiny vocabulary: one spelling each


def masked_target_distribution(engine: Engine, prompt: list[int], spec: ConstraintSpec) -> dict[str, float]:
    """The exact probability of each reply under the target restricted to `spec` (temperature 1):
    every path the matcher allows, each token's probability renormalised over the allowed ones."""
    target, matcher = engine.target, engine.constraint(spec)
    out: dict[str, float] = {}

    def walk(path: list[int], p: float) -> None:
        allowed = np.flatnonzero(matcher.allowed()[: target.n_vocab])
        logits = sync_cache(target, prompt + path, 1)[0].astype(np.float64)
        w = np.exp(logits[allowed] - logits[allowed].max())
        for token, q in zip(allowed, w / w.sum(), strict=True):
            if int(token) in target.eos_ids:
                text = b"".join(target.token_bytes(t) for t in path).decode()
                out[text] = out.get(text, 0.0) + p * q
                continue
            assert matcher.advance(int(token))
            walk([*path, int(token)], p * q)
            matcher.rollback(1)

    walk([], 1.0)
    return out


def sampled_replies(engine: Engine, prompt: list[int], spec: ConstraintSpec, n: int) -> list[str]:
    """The replies of seeds 0..n-1; DEAD_END for one that ended where the matcher had not followed
    (verification without the mask emits tokens it refuses)."""
    settings = [
        GenerateSettings(
            16, SamplingParams(temperature=1.0, seed=seed), DraftChoice.MODEL, PolicyChoice("fixed", 3), spec
        )
        for seed in range(n)
    ]
    replies = []
    for s in settings:
        try:
            replies.append(generate(engine, prompt, s)[1])
        except ConstraintDeadEnd:
            replies.append(DEAD_END)
    return replies


DEAD_END = "<dead end>"


@pytest.mark.heavy
def test_speculative_sampling_under_a_schema_follows_the_masked_target(tiny_engine, monkeypatch):
    spec = ConstraintSpec.json_schema({"enum": WORDS})
    prompt = tiny_engine.target.tokenize("hello there the", special=False)
    exact = masked_target_distribution(tiny_engine, prompt, spec)
    assert sorted(exact) == sorted(f'"{w}"' for w in WORDS) and abs(sum(exact.values()) - 1) < 1e-9
    replies = sampled_replies(tiny_engine, prompt, spec, 1500)
    assert fit_p_value(replies, exact) > 1e-3

    # verification without the mask: the same drafts, checked against the unmasked target
    monkeypatch.setattr(SpeculativeDecoder, "_masked_rows", staticmethod(lambda logits, masks: logits))
    assert fit_p_value(sampled_replies(tiny_engine, prompt, spec, 300), exact) < 1e-3


# -- specs: what cannot be enforced is refused, naming it ---------------------------------------------


@pytest.mark.parametrize(
    "spec, named",
    [
        (ConstraintSpec.json_schema({"not": {"type": "string"}}), '"not"'),
        (ConstraintSpec.json_schema({"type": "string", "format": "foo"}), "format: foo"),
        (ConstraintSpec("regex", "(?=a)b"), "look-around"),
        (ConstraintSpec("json_schema", "{nope"), "cannot"),
    ],
)
def test_a_constraint_that_cannot_be_enforced_is_a_usage_error_naming_why(spec, named):
    with pytest.raises(ConstraintError) as e:
        check(spec)
    assert named in str(e.value) and "\n" not in str(e.value)
    assert e.value.exit_code == 2


def test_a_requests_schema_is_read_and_its_grammar_built_once_at_its_check(tiny_engine, monkeypatch):
    """A request's schema (parsed with its body) is not parsed back from its text, and the grammar its
    check built is the one every reply under it compiles its matcher from; a bad one still fails
    each time it is used."""
    counted = {"parse_schema": 0, "grammar_of": 0}
    for name in counted:
        monkeypatch.setattr(guidance, name, counting(getattr(guidance, name), counted, name))
    body = {"type": "json_schema", "json_schema": {"name": "pet", "schema": PET}}
    spec = format_constraint(ResponseFormat.model_validate(body))
    for prompt in PROMPTS[:2]:
        generate(tiny_engine, tiny_engine.target.tokenize(prompt), GenerateSettings(40, constraint=spec))
    assert counted == {"parse_schema": 0, "grammar_of": 1}
    bad = ConstraintSpec.json_schema({"not": {"type": "string"}})
    for _ in range(2):
        with pytest.raises(ConstraintError, match='"not"'):
            tiny_engine.constraint(bad)


def counting(function, counted: dict[str, int], name: str):
    def counted_call(*args, **kwargs):
        counted[name] += 1
        return function(*args, **kwargs)

    return counted_call


# -- run --json / --json-schema -----------------------------------------------------------------------


def test_run_json_schema_writes_one_valid_document(tiny_cli_home):
    schema = tiny_cli_home / "pet.json"
    schema.write_text(json.dumps(PET))
    r = invoke("run", "a pet", "--raw", "--json-schema", str(schema), "--temperature", "0", "--max-tokens", "200")
    assert r.exit_code == 0, r.stderr
    jsonschema.validate(json.loads(r.stdout), PET)


def test_run_json_cut_before_the_document_ends_is_an_error(tiny_cli_home):
    r = invoke("run", "a pet", "--raw", "--json", "--temperature", "0", "--max-tokens", "3")
    assert one_line_error(r, 1).endswith("the JSON document is incomplete: --max-tokens was reached before it ended")
    assert r.stdout.startswith("{")


@pytest.mark.parametrize(
    "content, named",
    [
        ('{"not": {"type": "string"}}', 'cannot be enforced: Unimplemented keys: ["not"]'),
        ("{nope", "is not JSON"),
        ('"a string"', "holds no JSON schema"),
        (None, "cannot read"),
    ],
)
def test_run_refuses_a_bad_schema_file_before_loading(tiny_cli_home, content, named):
    schema = tiny_cli_home / "schema.json"
    if content is not None:
        schema.write_text(content)
    # the pair's model file does not exist: an error about the schema came before any loading
    line = one_line_error(invoke("run", "x", "-m", "missing", "--json-schema", str(schema)), 2)
    assert line.startswith("edgespec: error: --json-schema: ") and named in line


def test_run_json_and_json_schema_exclude_each_other(tiny_cli_home):
    schema = tiny_cli_home / "s.json"
    schema.write_text("{}")
    assert "exclude each other" in one_line_error(invoke("run", "x", "--json", "--json-schema", str(schema)), 2)


# -- the real pair ----------------------------------------------------------------------------------

REAL_PROMPTS = (
    "Describe a pet as JSON with its name, kind and position.",
    "Give me a JSON record of a cat called Tom sitting at x=3, y=4.",
    "Invent a bird and its coordinates as JSON.",
)


@pytest.fixture(scope="module")
def floor(real_pair_engine) -> float:
    """The target's noise floor (quality/noise_floor.py), measured once for the session."""
    return real_pair_engine.noise_floor().max


@pytest.mark.slow
@pytest.mark.parametrize("text", REAL_PROMPTS)
def test_real_pair_greedy_under_a_schema_matches_plain_and_validates(real_engine, floor, text):
    """As tests/test_real_pair.py: speculative output equals plain decoding's, or parts from it where
    the two tokens are tied within the noise floor, both in the rows that verified it and in plain
    decoding's single steps (both tokens were allowed there: the text before them is the same)."""
    spec = ConstraintSpec.json_schema(PET)
    prompt = real_engine.chat_tokens([{"role": "user", "content": text}])
    real_target = real_engine.target
    recorder = ArgmaxRecorder(real_target)
    real_engine.target = recorder
    try:
        plain, reply, summary = generate(real_engine, prompt, GenerateSettings(96, draft="none", constraint=spec))
        assert summary.stop_reason == "eos"
        jsonschema.validate(json.loads(reply), PET)
        plain_rows = dict(recorder.rows)
        for draft, choice in (("auto", PolicyChoice("auto")), ("model", PolicyChoice("fixed", 3))):
            recorder.rows.clear()
            real_target.truncate(0)
            settings = GenerateSettings(96, draft=draft, policy=choice, constraint=spec)
            out, reply, summary = generate(real_engine, prompt, settings)
            jsonschema.validate(json.loads(reply), PET)
            i = first_divergence(out, plain)
            if i is not None:
                assert i < min(len(out), len(plain)), f"{draft}: one output is a prefix of the other"
                at = len(prompt) + i - 1
                gaps = [float(row[out[i]] - row[plain[i]]) for row in (recorder.rows[at], plain_rows[at])]
                assert verdict(*gaps, floor) == TIE, f"{draft}: parted at token {i}: gaps {gaps}, floor {floor}"
    finally:
        real_engine.target = real_target


@pytest.mark.slow
def test_real_pair_run_json_writes_one_object(real_engine):
    prompt = real_engine.chat_tokens(
        [{"role": "user", "content": "A JSON object with a name and an age, nothing else."}]
    )
    _, reply, summary = generate(real_engine, prompt, GenerateSettings(96, constraint=ConstraintSpec("json_object")))
    assert summary.stop_reason == "eos" and isinstance(json.loads(reply), dict)


def test_a_complete_document_ends_the_reply_without_a_pass_for_its_end(tiny_engine):
    """The end is the only token a complete document allows: no target pass is spent to choose it.
    Plain decoding: one pass per token after the first (which the prompt's reading gives)."""
    prompt = tiny_engine.target.tokenize(PROMPTS[0], special=False)
    spec = ConstraintSpec.json_schema({"enum": WORDS})
    _, reply, summary = generate(tiny_engine, prompt, GenerateSettings(16, draft=DraftChoice.NONE, constraint=spec))
    assert summary.stop_reason == "eos" and json.loads(reply) in WORDS
    assert summary.target_passes == summary.tokens - 1
