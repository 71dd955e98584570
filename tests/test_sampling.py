"""Statistical and unit tests of edgespec.decoding.sampling on toy distributions.

The claim under test is losslessness: whatever the drafter proposes, the token speculative sampling
emits follows warp(target) exactly. We check it by total variation distance and a chi-square test
over many samples, against a dense full-sort reference of the warping (not against `warp` itself),
so that a bug in either the warping or the verification shows up. Every test is seeded.

Sample counts are sized so that sampling noise stays well below the thresholds: the expected TVD
of n samples over v equally likely outcomes is about 0.5 * sqrt(2 v / (pi n)), i.e. 0.005 for
v = 24 and n = 100k; the supports here are at most that wide after warping.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from edgespec.decoding.sampling import (
    Dist,
    SamplingParams,
    choose,
    residual,
    softmax_top,
    verify_greedy,
    verify_sampled,
    warp,
)
from edgespec.decoding.tree import chain

# --------------------------------------------------------------------------------------------------
# A straightforward reference of the warping: dense, full sort, no shortcuts.


def reference_warp(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Dense probabilities over the whole vocabulary after temperature, top-k, top-p, min-p."""
    v = logits.shape[-1]
    if params.greedy:
        out = np.zeros(v)
        out[np.argmax(logits)] = 1.0
        return out
    z = logits.astype(np.float64) / params.temperature
    keep = np.ones(v, dtype=bool)
    if 0 < params.top_k < v:
        keep[:] = False
        keep[np.argsort(-z, kind="stable")[: params.top_k]] = True
    probs = _softmax_masked(z, keep)
    if params.top_p < 1.0:
        order = np.argsort(-probs, kind="stable")
        cum = np.cumsum(probs[order])
        n_keep = int(np.argmax(cum >= params.top_p)) + 1 if cum[-1] >= params.top_p else v
        keep[:] = False
        keep[order[:n_keep]] = True
        keep &= probs > 0
        probs = np.where(keep, probs, 0.0)
        probs /= probs.sum()
    if params.min_p > 0.0:
        probs = np.where(probs >= params.min_p * probs.max(), probs, 0.0)
        probs /= probs.sum()
    return probs


def _softmax_masked(z: np.ndarray, keep: np.ndarray) -> np.ndarray:
    w = np.where(keep, np.exp(z - z[keep].max()), 0.0)
    return w / w.sum()


def dense(d: Dist, v: int) -> np.ndarray:
    out = np.zeros(v)
    out[d.ids] = d.probs
    return out


def tvd(a: np.ndarray, b: np.ndarray) -> float:
    return 0.5 * float(np.abs(a - b).sum())


def goodness_of_fit(samples: np.ndarray, p: np.ndarray) -> float:
    """Chi-square p-value of `samples` against `p`; bins with under 5 expected counts are pooled.

    Fails outright if any sample lies outside p's support (a chi-square test cannot see that).
    """
    n = len(samples)
    counts = np.bincount(samples, minlength=len(p)).astype(np.float64)
    assert counts[p == 0].sum() == 0, f"emitted tokens outside the support: {np.nonzero(counts * (p == 0))[0]}"
    expected = n * p
    big = expected >= 5
    f_obs = list(counts[big])
    f_exp = list(expected[big])
    if (~big & (p > 0)).any():
        f_obs.append(counts[~big].sum())
        f_exp.append(expected[~big].sum())
    if len(f_obs) < 2:
        return 1.0
    f_exp = np.asarray(f_exp)
    f_exp *= sum(f_obs) / f_exp.sum()  # exact totals; chisquare checks them
    return float(stats.chisquare(f_obs, f_exp).pvalue)


# --------------------------------------------------------------------------------------------------
# Toy target/draft pairs. Each gives target logits, draft logits (None = point-mass drafter with a
# fixed proposal) and the params both rows are warped with, as the decoder does.


def _pairs() -> dict[str, tuple[np.ndarray, np.ndarray | int, SamplingParams]]:
    rng = np.random.default_rng(1234)
    v = 20
    cases: dict[str, tuple[np.ndarray, np.ndarray | int, SamplingParams]] = {}
    cases["random"] = (2.0 * rng.normal(size=v), 2.0 * rng.normal(size=v), SamplingParams(temperature=1.0))
    # Disjoint supports: top-k keeps the target's first half and the drafter's second half, so every
    # draft is rejected and every emitted token comes from the residual (which is then p itself).
    half = np.r_[np.full(v // 2, 10.0), np.zeros(v - v // 2)]
    cases["disjoint"] = (
        rng.normal(size=v) + half,
        rng.normal(size=v) + half[::-1],
        SamplingParams(temperature=1.0, top_k=v // 2),
    )
    # A drafter far flatter than the target: acceptance is low and the residual carries most mass.
    cases["flat_draft"] = (3.0 * rng.normal(size=v), 0.05 * rng.normal(size=v), SamplingParams(temperature=1.0))
    # The reverse: a drafter far sharper than the target (over-confident).
    cases["sharp_draft"] = (0.7 * rng.normal(size=v), 5.0 * rng.normal(size=v), SamplingParams(temperature=1.0))
    # A drafter close to the target (most drafts accepted), under top-p: the two nuclei differ in a
    # few tokens, so q puts mass where p has none and the other way round.
    lt = rng.normal(size=v)
    cases["close_top_p"] = (lt, lt + 0.4 * rng.normal(size=v), SamplingParams(temperature=0.7, top_p=0.8))
    cases["top_k_min_p"] = (
        2.0 * rng.normal(size=v),
        2.0 * rng.normal(size=v),
        SamplingParams(temperature=1.3, top_k=8, min_p=0.05),
    )
    v50 = 50
    lt = 3.0 * rng.normal(size=v50)
    cases["all_filters_v50"] = (
        lt,
        lt + 1.5 * rng.normal(size=v50),
        SamplingParams(temperature=0.8, top_k=15, top_p=0.9, min_p=0.02),
    )
    # Point-mass drafter (n-gram lookup): q(x) = 1 on a fixed proposal.
    lt = 2.0 * rng.normal(size=v)
    third = int(np.argsort(-lt)[2])
    cases["point_mass"] = (lt, third, SamplingParams(temperature=1.0))
    lt = 2.0 * rng.normal(size=v)
    cases["point_mass_outside_top_k"] = (lt, int(np.argmin(lt)), SamplingParams(temperature=1.0, top_k=5))
    return cases


PAIRS = _pairs()


def _draft(spec: np.ndarray | int, params: SamplingParams) -> Dist | None:
    return None if isinstance(spec, int) else warp(spec, params)


def emit_first_tokens(p: Dist, q: Dist | None, proposal: int | None, n: int, rng: np.random.Generator) -> np.ndarray:
    """n independent runs of "x ~ q; verify with K=1; take the first emitted token", vectorised.

    This mirrors verify_sampled's first position (accept x with probability min(1, p(x)/q(x)), else
    sample the residual) with the real Dist and residual; verify_sampled itself is checked
    end-to-end at a smaller sample count in test_verify_sampled_end_to_end and through the K-round
    simulations below. One verify_sampled call costs ~50 us, too slow for 100k samples in every case.
    """
    if q is None:
        x = np.full(n, proposal, dtype=np.int64)
        q_x = np.ones(n)
    else:
        x = rng.choice(q.ids, size=n, p=q.probs)
        q_x = q.on(x)
    accept = rng.random(n) * q_x < p.on(x)
    out = x.copy()
    for i in np.nonzero(~accept)[0]:
        out[i] = residual(p, q, int(x[i])).sample(rng)
    return out


@pytest.mark.heavy
@pytest.mark.parametrize("name", list(PAIRS))
def test_rejection_sampling_reproduces_target(name: str) -> None:
    target_logits, draft_spec, params = PAIRS[name]
    rng = np.random.default_rng(list(PAIRS).index(name))
    p = warp(target_logits, params)
    q = _draft(draft_spec, params)
    proposal = draft_spec if q is None else None
    expected = reference_warp(target_logits, params)
    np.testing.assert_allclose(dense(p, len(expected)), expected, atol=1e-12)

    n = 100_000
    samples = emit_first_tokens(p, q, proposal, n, rng)
    empirical = np.bincount(samples, minlength=len(expected)) / n
    assert tvd(empirical, expected) < 0.01, name
    assert goodness_of_fit(samples, expected) > 0.001, name


@pytest.mark.heavy
@pytest.mark.parametrize("name", ["close_top_p", "point_mass"])
def test_verify_sampled_end_to_end(name: str) -> None:
    """The same property through verify_sampled itself (K=1, first emitted token)."""
    target_logits, draft_spec, params = PAIRS[name]
    rng = np.random.default_rng(7)
    rows = np.stack([target_logits, target_logits])
    q = _draft(draft_spec, params)
    expected = reference_warp(target_logits, params)
    n = 50_000
    if q is None:
        drafts = np.full(n, draft_spec)
    else:
        drafts = rng.choice(q.ids, size=n, p=q.probs)
    samples = np.empty(n, dtype=np.int64)
    for i in range(n):
        path, next_id = verify_sampled(rows, [int(drafts[i])], chain(1), [q], params, rng)
        samples[i] = drafts[i] if path else next_id
    empirical = np.bincount(samples, minlength=len(expected)) / n
    assert tvd(empirical, expected) < 0.015
    assert goodness_of_fit(samples, expected) > 0.001


# --------------------------------------------------------------------------------------------------
# Tokens per target pass: E = (1 - a^(K+1)) / (1 - a) for per-token acceptance a = sum min(p, q).


def _pair_with_acceptance(a: float, v: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """p = a c + (1-a) u1 and q = a c + (1-a) u2 with u1, u2 on disjoint supports: overlap exactly a."""
    c = rng.dirichlet(np.ones(v))
    u1 = np.zeros(v)
    u2 = np.zeros(v)
    u1[: v // 2] = rng.dirichlet(np.ones(v // 2))
    u2[v // 2 :] = rng.dirichlet(np.ones(v - v // 2))
    return a * c + (1 - a) * u1, a * c + (1 - a) * u2


@pytest.mark.heavy
@pytest.mark.parametrize("k", [1, 3, 6])
@pytest.mark.parametrize("a", [0.5, 0.8, "point_mass"])
def test_tokens_per_target_pass(k: int, a: float | str) -> None:
    rng = np.random.default_rng(100 * k + (0 if a == "point_mass" else int(10 * a)))
    v = 16
    params = SamplingParams(temperature=1.0)
    if a == "point_mass":
        p_dense = rng.dirichlet(np.full(v, 0.3))
        proposal = int(np.argmax(p_dense))
        q = None
        a = float(p_dense[proposal])
    else:
        p_dense, q_dense = _pair_with_acceptance(a, v, rng)
        q = warp(np.log(q_dense), params)
    p = warp(np.log(p_dense), params)
    if q is not None:  # the construction's overlap survives warping
        assert float(np.minimum(dense(p, v), dense(q, v)).sum()) == pytest.approx(a, abs=1e-9)

    rows = np.tile(np.log(p_dense), (k + 1, 1))
    rounds = 12_000
    passes_tokens = 0
    stream: list[int] = []
    for _ in range(rounds):
        drafts = [proposal] * k if q is None else [int(t) for t in rng.choice(q.ids, size=k, p=q.probs)]
        path, next_id = verify_sampled(rows, drafts, chain(k), [q] * k, params, rng)
        accepted = len(path)
        passes_tokens += accepted + 1
        stream.extend(drafts[:accepted])
        stream.append(next_id)
    mean = passes_tokens / rounds
    expected = (1 - a ** (k + 1)) / (1 - a)
    assert mean == pytest.approx(expected, rel=0.02)
    # Every row is the same context-free p, so the whole emitted stream (accepted drafts,
    # corrections and bonuses alike) must be i.i.d. p, not only the first token of a round.
    empirical = np.bincount(stream, minlength=v) / len(stream)
    assert tvd(empirical, p_dense) < 0.015


# --------------------------------------------------------------------------------------------------
# warp: each filter against the reference.


def test_greedy_is_a_point_mass_on_the_argmax() -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=40).astype(np.float32)
    for params in (SamplingParams(), SamplingParams(temperature=-1.0, top_k=3, top_p=0.5)):
        assert params.greedy
        d = warp(logits, params)
        assert d.ids.tolist() == [int(np.argmax(logits))]
        assert d.probs.tolist() == [1.0]
        assert choose(logits, params, rng) == int(np.argmax(logits))


def test_verify_sampled_with_greedy_params_is_greedy_verification() -> None:
    rng = np.random.default_rng(1)
    for _ in range(200):
        k = int(rng.integers(0, 5))
        rows = rng.normal(size=(k + 1, 12))
        best = rows.argmax(axis=1)
        drafts = [int(best[i]) if rng.random() < 0.7 else int(rng.integers(12)) for i in range(k)]
        assert verify_sampled(rows, drafts, chain(k), [None] * k, SamplingParams(), rng) == verify_greedy(
            rows, drafts, chain(k)
        )


@pytest.mark.parametrize("temperature", [0.3, 1.0, 2.5])
def test_temperature_scales_logits(temperature: float) -> None:
    rng = np.random.default_rng(2)
    logits = rng.normal(size=30).astype(np.float32) * 3
    d = warp(logits, SamplingParams(temperature=temperature))
    z = logits.astype(np.float64) / temperature
    want = np.exp(z - z.max())
    np.testing.assert_allclose(dense(d, 30), want / want.sum(), rtol=1e-12)
    assert d.ids.tolist() == list(range(30))


def test_a_tiny_temperature_is_all_but_greedy() -> None:
    """The smallest temperatures the rule lets in: logits divided first would overflow to inf - inf."""
    logits = np.array([0.5, 3.0, -1.0, 2.0], dtype=np.float32)
    for temperature in (2.2250738585072014e-308, 5e-324, 1e-30):
        d = warp(logits, SamplingParams(temperature=temperature, top_p=0.9, min_p=0.1))
        assert d.ids.tolist() == [1] and d.probs.tolist() == [1.0]


def test_higher_temperature_is_flatter() -> None:
    logits = np.random.default_rng(3).normal(size=30) * 2
    entropies = []
    for t in (0.2, 0.5, 1.0, 2.0, 5.0):
        pr = warp(logits, SamplingParams(temperature=t)).probs
        entropies.append(-(pr * np.log(pr + 1e-300)).sum())
    assert np.all(np.diff(entropies) > 0)


@pytest.mark.parametrize("k", [1, 5, 29, 30, 100])
def test_top_k_keeps_exactly_k(k: int) -> None:
    logits = np.random.default_rng(k).normal(size=30)
    d = warp(logits, SamplingParams(temperature=0.9, top_k=k))
    assert len(d.ids) == min(k, 30)
    assert set(d.ids.tolist()) == set(np.argsort(-logits)[:k].tolist())
    assert np.all(np.diff(d.ids) > 0)
    assert d.probs.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(dense(d, 30), reference_warp(logits, SamplingParams(temperature=0.9, top_k=k)))


@pytest.mark.parametrize("allowed", [3, 20, 500])
def test_top_k_of_a_masked_row_keeps_only_allowed_tokens(allowed: int) -> None:
    """A constraint's mask leaves a row mostly -inf: where it allows fewer than k tokens, top-k keeps
    those alone (no zero-weight token joins the support), else the k likeliest of them."""
    rng = np.random.default_rng(allowed)
    logits = np.full(151936, -np.inf, dtype=np.float32)
    ids = np.sort(rng.choice(len(logits), allowed, replace=False))
    logits[ids] = rng.normal(size=allowed) * 40  # spread wider than the probes around the maximum
    d = warp(logits, SamplingParams(temperature=0.7, top_k=20))
    assert set(d.ids.tolist()) == set(ids[np.argsort(-logits[ids])[:20]].tolist())
    assert np.all(d.probs > 0) and d.probs.sum() == pytest.approx(1.0)


# (vocabulary size, logit scale, top_p, top_k, whether the nucleus is wider than the 1024 probe)
NUCLEUS_CASES = [
    (12, 2.0, 0.5, 0, False),
    (50, 1.0, 0.9, 0, False),
    (50, 1.0, 0.999999, 0, False),
    (50, 1.0, 1e-9, 0, False),
    (5000, 3.0, 0.9, 0, False),  # peaked: the probe of 1024 finds the nucleus
    (5000, 0.01, 0.9, 0, True),  # flat: falls back to a full sort
    (5000, 0.01, 0.9, 3000, True),  # flat, inside a top-k wider than the probe
    (151_936, 5.0, 0.95, 0, False),
    (151_936, 4.0, 0.95, 0, True),
    (151_936, 1.0, 0.95, 0, True),
]


@pytest.mark.parametrize(("v", "scale", "top_p", "top_k", "wide"), NUCLEUS_CASES)
def test_top_p_keeps_the_smallest_nucleus(v: int, scale: float, top_p: float, top_k: int, wide: bool) -> None:
    rng = np.random.default_rng(v + int(100 * scale))
    logits = (rng.normal(size=v) * scale).astype(np.float32)
    params = SamplingParams(temperature=1.0, top_p=top_p, top_k=top_k)
    d = warp(logits, params)
    want = reference_warp(logits, params)
    assert (len(d.ids) > 1024) == wide  # both code paths of _nucleus are exercised
    assert d.ids.tolist() == np.nonzero(want)[0].tolist()
    np.testing.assert_allclose(d.probs, want[d.ids], rtol=1e-9)
    # Smallest: the kept mass reaches top_p and dropping the least likely kept token falls short.
    before = reference_warp(logits, SamplingParams(temperature=1.0, top_k=top_k))
    kept = np.sort(before[d.ids])
    assert kept.sum() >= top_p * (1 - 1e-12)
    assert len(kept) == 1 or kept[1:].sum() < top_p


@pytest.mark.parametrize("min_p", [0.01, 0.1, 0.5, 1.0])
def test_min_p_drops_tokens_below_a_fraction_of_the_best(min_p: float) -> None:
    logits = np.random.default_rng(4).normal(size=40) * 2
    params = SamplingParams(temperature=1.0, min_p=min_p)
    d = warp(logits, params)
    full = reference_warp(logits, SamplingParams(temperature=1.0))
    assert set(d.ids.tolist()) == set(np.nonzero(full >= min_p * full.max())[0].tolist())
    np.testing.assert_allclose(dense(d, 40), reference_warp(logits, params), rtol=1e-12)


def test_filters_compose_in_transformers_order() -> None:
    rng = np.random.default_rng(5)
    for _ in range(200):
        v = int(rng.integers(2, 80))
        logits = rng.normal(size=v) * rng.uniform(0.1, 5)
        params = SamplingParams(
            temperature=float(rng.uniform(0.1, 3)),
            top_k=int(rng.integers(0, v + 2)),
            top_p=float(rng.choice([1.0, rng.uniform(0.05, 1.0)])),
            min_p=float(rng.choice([0.0, rng.uniform(0.0, 0.5)])),
        )
        d = warp(logits, params)
        want = reference_warp(logits, params)
        assert d.ids.tolist() == np.nonzero(want)[0].tolist(), params
        np.testing.assert_allclose(d.probs, want[d.ids], rtol=1e-9)


def test_warp_handles_masked_logits() -> None:
    logits = np.array([0.0, -np.inf, 1.0, -np.inf, 2.0], dtype=np.float32)
    d = warp(logits, SamplingParams(temperature=1.0, top_p=0.99))
    assert not np.isnan(d.probs).any()
    assert set(d.ids.tolist()) <= {0, 2, 4}
    rng = np.random.default_rng(0)
    assert {d.sample(rng) for _ in range(500)} <= {0, 2, 4}


# --------------------------------------------------------------------------------------------------
# Dist, residual, verify_greedy, softmax_top.


def test_dist_prob_and_on() -> None:
    d = Dist(np.array([2, 5, 9], dtype=np.int64), np.array([0.2, 0.5, 0.3]))
    assert [d.prob(t) for t in (0, 2, 3, 5, 9, 10)] == [0.0, 0.2, 0.0, 0.5, 0.3, 0.0]
    np.testing.assert_array_equal(d.on(np.array([0, 2, 3, 5, 9, 11])), [0.0, 0.2, 0.0, 0.5, 0.3, 0.0])
    np.testing.assert_array_equal(d.on(np.array([9, 0, 5])), [0.3, 0.0, 0.5])  # order does not matter
    one = Dist(np.array([7], dtype=np.int64), np.array([1.0]))
    np.testing.assert_array_equal(one.on(np.array([6, 7, 8])), [0.0, 1.0, 0.0])


def test_dist_sample_follows_probs_and_skips_zero_mass() -> None:
    rng = np.random.default_rng(6)
    d = Dist(np.array([1, 3, 4, 8], dtype=np.int64), np.array([0.1, 0.0, 0.6, 0.3]))
    draws = np.array([d.sample(rng) for _ in range(40_000)])
    assert set(draws.tolist()) <= {1, 4, 8}
    for t, pr in ((1, 0.1), (4, 0.6), (8, 0.3)):
        assert (draws == t).mean() == pytest.approx(pr, abs=0.01)


@pytest.mark.heavy
def test_residual_support() -> None:
    rng = np.random.default_rng(8)
    p = Dist(np.array([0, 1, 2, 3], dtype=np.int64), np.array([0.4, 0.3, 0.2, 0.1]))
    # Point-mass drafter: the rejected token is never the correction.
    assert 1 not in residual(p, None, 1).ids.tolist()
    # Only tokens where p exceeds q; here max(0, p - q) = [0.4, 0, 0.1, 0, 0] normalised to [0.8, 0.2].
    q = Dist(np.array([1, 2, 3, 5], dtype=np.int64), np.array([0.4, 0.1, 0.3, 0.2]))
    draws = np.array([residual(p, q, 1).sample(rng) for _ in range(20_000)])
    assert set(draws.tolist()) <= {0, 2}
    assert (draws == 0).mean() == pytest.approx(0.8, abs=0.015)
    # p == q: the residual is empty and p itself is the fallback.
    assert residual(p, p, 0) is p


def test_verify_sampled_accepts_everything_when_q_equals_p() -> None:
    rng = np.random.default_rng(9)
    params = SamplingParams(temperature=1.0, top_k=10)
    logits = rng.normal(size=20)
    rows = np.tile(logits, (5, 1))
    q = warp(logits, params)
    for _ in range(300):
        drafts = [q.sample(rng) for _ in range(4)]
        path, next_id = verify_sampled(rows, drafts, chain(4), [q] * 4, params, rng)
        assert path == [0, 1, 2, 3]
        assert next_id in q.ids


def test_verify_sampled_rejects_drafts_outside_the_target_support() -> None:
    rng = np.random.default_rng(10)
    params = SamplingParams(temperature=1.0, top_k=3)
    rows = np.tile(np.arange(10.0), (3, 1))  # support {7, 8, 9}
    for _ in range(100):
        path, next_id = verify_sampled(rows, [0, 9], chain(2), [None, None], params, rng)
        assert path == [] and next_id in (7, 8, 9)


def _rows(argmaxes: list[int], v: int = 10) -> np.ndarray:
    rows = np.random.default_rng(11).normal(size=(len(argmaxes), v))
    for i, t in enumerate(argmaxes):
        rows[i, t] = 10.0
    return rows


def test_verify_greedy() -> None:
    rows = _rows([3, 1, 4, 1, 5])
    assert verify_greedy(rows, [3, 1, 4, 1], chain(4)) == ([0, 1, 2, 3], 5)  # all accepted: bonus from the last row
    assert verify_greedy(rows, [3, 1, 7, 1], chain(4)) == ([0, 1], 4)  # correction at the first mismatch
    assert verify_greedy(rows, [0, 1, 4, 1], chain(4)) == ([], 3)  # later matches do not count
    assert verify_greedy(rows[:1], [], []) == ([], 3)  # K = 0: plain decoding
    assert verify_greedy(rows[:3], np.array([3, 1]), chain(2)) == ([0, 1], 4)


def test_softmax_top() -> None:
    logits = np.array([1.0, 3.0, 2.0], dtype=np.float32)
    ((i, conf),) = softmax_top(logits, 1)
    assert i == 1
    assert conf == pytest.approx(np.exp(3) / np.exp([1.0, 3.0, 2.0]).sum())
    assert softmax_top(np.array([1000.0, -1000.0]), 1)[0][1] == pytest.approx(1.0)
    top = softmax_top(logits, 3)
    assert [t for t, _ in top] == [1, 2, 0]
    assert [c for _, c in top] == pytest.approx(np.exp([3.0, 2.0, 1.0]) / np.exp([1.0, 3.0, 2.0]).sum())


def test_dist_without() -> None:
    d = Dist(np.array([1, 3, 4], dtype=np.int64), np.array([0.5, 0.3, 0.2]))
    w = d.without([1])
    assert w.ids.tolist() == [3, 4] and w.probs.tolist() == pytest.approx([0.6, 0.4])
    assert d.without([1, 3, 4]) is None
