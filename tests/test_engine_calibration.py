"""The engine's calibration cache: measured once per machine and pair, refined by every reply's
live passes with low quantiles (a busy spell does not raise it; a quiet reply lowers a curve
measured under load), measured again when live passes contradict it, ignored when damaged."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from edgespec.decoding.costs import keeper
from edgespec.decoding.costs.keeper import CALIBRATION_BUDGET_S, DAY_S, SAY_AFTER_S
from edgespec.decoding.costs.measuring import LONGEST_DENSE_DRAFT, ends_first
from edgespec.decoding.costs.model import CostModel
from edgespec.decoding.costs.quiet import SESSIONS
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.engine.engine import GenerateSettings
from tests.fakes import VirtualClock, fake_engine, simulated_time


def cpu_like(n: int) -> float:
    return 0.030 + 0.015 * (n - 1)


def loaded(factor: float):
    """The same machine while other jobs take a share of it."""
    return lambda n: factor * cpu_like(n)


def generate(engine, clock, max_tokens: int = 24) -> None:
    prompt = engine.target.tokenize("def add(a, b):\n    return a + b\n\ndef add(")
    with simulated_time(clock):
        list(engine.generate_tokens(prompt, GenerateSettings(max_tokens=max_tokens)))


def saved_entry(path) -> tuple[str, dict]:
    ((key, entry),) = json.loads(path.read_text()).items()
    return key, entry


def quiet_figure(entry: dict, n: int) -> float:
    """The saved curve at n, as the next run restores it."""
    costs = CostModel()
    costs.restore(entry)
    return costs.verify(n)


def save_curve_measured_at(factor: float, clock: VirtualClock) -> None:
    """An earlier run measured the curve (and made no live pass) with the machine `factor` slower."""
    engine = fake_engine(clock, verify=loaded(factor), draft_step=0.01)
    with simulated_time(clock):
        engine.cost_model()
    engine.close()


def reply(engine, sizes, verify, times: int = 5) -> None:
    """A reply's live passes, fed as the controller feeds them, then the end of the reply."""
    engine.cost_model()
    for _ in range(times):
        for n in sizes:
            engine.costs.observe_verify(n, verify(n))
    engine.keep_costs()


def no_calibration(*args, **kwargs):
    raise AssertionError("the saved curve should have been reused")


def test_the_curve_is_measured_once_saved_keyed_as_before_and_reused(own_calibration_file, monkeypatch):
    clock = VirtualClock()
    engine = fake_engine(clock, verify=cpu_like, draft_step=0.01)
    generate(engine, clock)
    key, entry = saved_entry(own_calibration_file)
    assert key == engine._calibration_key() and key.startswith("v6|")
    # every length auto may verify, then longer passes while a token gets cheaper (5% or more)
    assert sorted(map(int, entry["verify"])) == [*range(1, 18), 32]
    assert quiet_figure(entry, 3) == pytest.approx(cpu_like(3))
    assert min(entry["draft_step"]) == pytest.approx(0.01)
    assert entry["measure_again"] is False and entry["provisional"] is False and entry["format"] == 2

    monkeypatch.setattr(CostModel, "calibrate", no_calibration)
    again = fake_engine(clock, verify=cpu_like, draft_step=0.01)
    generate(again, clock)
    assert again.costs.verify(2) == pytest.approx(cpu_like(2))


def test_a_curve_measured_under_load_is_pulled_down_by_a_quiet_reply_and_saved_back(own_calibration_file, monkeypatch):
    """Through a whole reply: the sizes it verified often enough move to what they cost now."""
    clock = VirtualClock()
    save_curve_measured_at(1.1, clock)  # under the contradiction margin: refined, not measured again
    monkeypatch.setattr(CostModel, "calibrate", no_calibration)
    engine = fake_engine(clock, verify=cpu_like, draft_step=0.01)
    generate(engine, clock, max_tokens=60)
    used = [n for n, count in Counter(engine.target.evals).items() if count >= 3]
    assert used
    _, entry = saved_entry(own_calibration_file)
    for n in used:
        assert quiet_figure(entry, n) == pytest.approx(cpu_like(n))
    assert quiet_figure(entry, 17) == pytest.approx(loaded(1.1)(17))  # no pass there: as measured
    assert entry["measure_again"] is False

    nxt = fake_engine(clock, verify=cpu_like, draft_step=0.01)
    nxt.cost_model()
    for n in used:
        assert nxt.costs.verify(n) == pytest.approx(cpu_like(n))


def test_busy_spells_do_not_raise_a_good_curve(own_calibration_file):
    clock = VirtualClock()
    save_curve_measured_at(1.0, clock)
    engine = fake_engine(clock, verify=cpu_like, draft_step=0.01)
    reply(engine, range(1, 5), loaded(3.0), times=10)  # a whole reply while another job ran
    for _ in range(SESSIONS):  # and more replies than the curve keeps, each busy for most of its passes
        engine.cost_model()
        for n in range(1, 5):
            for seconds in [cpu_like(n)] * 4 + [loaded(2.5)(n)] * 12:
                engine.costs.observe_verify(n, seconds)
        engine.keep_costs()
    _, entry = saved_entry(own_calibration_file)
    for n in range(1, 5):
        assert quiet_figure(entry, n) == pytest.approx(cpu_like(n))
    assert entry["measure_again"] is False
    assert engine.costs.verify(2) > 2 * cpu_like(2)  # while the controller prices the busy machine it runs on


def test_a_machine_that_stays_slower_moves_the_curve_up(own_calibration_file):
    clock = VirtualClock()
    save_curve_measured_at(1.0, clock)
    engine = fake_engine(clock, verify=cpu_like, draft_step=0.01)
    for _ in range(SESSIONS):
        reply(engine, (1, 2), loaded(1.5))
    _, entry = saved_entry(own_calibration_file)
    assert quiet_figure(entry, 2) == pytest.approx(loaded(1.5)(2))


def test_a_contradicted_curve_is_measured_again_before_a_reply_a_day_later(own_calibration_file, monkeypatch):
    """Live passes far faster than the saved curve at several sizes: the sizes no pass tried are
    likely as inflated, so the whole curve is measured again (in the next process, from the
    file's mark, or in this one before its next reply), once a day has passed since it was: the
    user waits for it."""
    clock, day = VirtualClock(), VirtualClock()
    monkeypatch.setattr(keeper, "wall_clock", day)
    save_curve_measured_at(2.0, clock)
    engine = fake_engine(clock, verify=cpu_like, draft_step=0.01)
    reply(engine, (1, 2, 3), cpu_like)
    _, entry = saved_entry(own_calibration_file)
    assert entry["measure_again"] is True
    assert quiet_figure(entry, 2) == pytest.approx(cpu_like(2))  # what the reply taught is kept
    assert quiet_figure(entry, 10) == pytest.approx(loaded(2.0)(10))

    soon = fake_engine(clock, verify=cpu_like, draft_step=0.01)  # the next process, the same day
    soon.cost_model()
    assert soon.costs.verify(10) == pytest.approx(loaded(2.0)(10)) and soon.costs.provisional
    day.advance(DAY_S)
    nxt = fake_engine(clock, verify=cpu_like, draft_step=0.01)  # a day later
    with simulated_time(clock):
        nxt.cost_model()
    assert nxt.costs.verify(10) == pytest.approx(cpu_like(10)) and not nxt.costs.provisional
    _, entry = saved_entry(own_calibration_file)
    assert entry["measure_again"] is False
    assert quiet_figure(entry, 10) == pytest.approx(cpu_like(10))

    evals_before = len(engine.target.evals)
    generate(engine, clock)  # the same process, its next reply
    assert engine.target.evals[evals_before : evals_before + 18] == [1, *ends_first(17)]  # measured first
    assert engine.costs.verify(10) == pytest.approx(cpu_like(10), rel=0.2)


def test_a_slightly_slow_reply_is_no_contradiction(own_calibration_file):
    """Live passes slower than the curve (a busy moment, a longer context) never call for a measurement."""
    clock = VirtualClock()
    save_curve_measured_at(1.0, clock)
    engine = fake_engine(clock, verify=cpu_like, draft_step=0.01)
    reply(engine, range(1, 18), loaded(4.0))
    assert saved_entry(own_calibration_file)[1]["measure_again"] is False


@pytest.mark.parametrize(
    "damage",
    [
        "{not json",
        '["a list"]',
        "{KEY: 3}",
        '{KEY: {"verify": {"1": 0.03, "2": 0.045}, "draft_step": 0.01}}',  # v3's form under this version's key
        '{KEY: {"verify": {"1": [0.03], "2": [-1]}, "draft_step": null}}',
        '{KEY: {"verify": {"1": [0.03], "2": ["fast"]}, "draft_step": null}}',
        '{KEY: {"verify": {"1": [0.03], "2": [1%s]}, "draft_step": null}}' % ("0" * 400),  # past any float
        '{KEY: {"verify": {"1": [0.03]}, "draft_step": null}}',  # one size: no curve
        '{KEY: {"draft_step": [0.01]}}',
    ],
)
def test_a_damaged_file_is_ignored_measured_again_and_replaced(own_calibration_file, damage):
    clock = VirtualClock()
    engine = fake_engine(clock, verify=cpu_like, draft_step=0.01)
    own_calibration_file.write_text(damage.replace("KEY", json.dumps(engine._calibration_key())))
    generate(engine, clock)
    assert engine.costs.verify(2) == pytest.approx(cpu_like(2))
    key, entry = saved_entry(own_calibration_file)
    assert key == engine._calibration_key()
    assert quiet_figure(entry, 2) == pytest.approx(cpu_like(2))


def test_a_curve_saved_by_an_older_calibration_is_measured_again(own_calibration_file):
    """Entries without the "v6" mark stopped at 17 tokens (v5), took passes on fewer threads into
    the quiet curve (v4), kept one timing per size (v3), timed a few lengths only (v2), or were
    refined online with a moving average (unmarked); they are not trusted."""
    clock = VirtualClock()
    engine = fake_engine(clock, verify=cpu_like)
    key = engine._calibration_key()
    old = {"verify": {"1": 0.03, "2": 0.5}, "draft_step": None}
    bare = key.removeprefix("v6|")
    own_calibration_file.write_text(json.dumps({bare: old, **{f"v{v}|{bare}": old for v in (2, 3, 4, 5)}}))
    generate(engine, clock)
    assert engine.costs.verify(2) == pytest.approx(cpu_like(2))
    assert list(json.loads(own_calibration_file.read_text())) == [engine._calibration_key()]  # the old ones went


def test_a_reply_without_the_cost_model_leaves_the_file_alone(own_calibration_file):
    clock = VirtualClock()
    engine = fake_engine(clock, verify=cpu_like, draft_step=0.01)
    prompt = engine.target.tokenize("def add(a, b):\n")
    with simulated_time(clock):
        list(engine.generate_tokens(prompt, GenerateSettings(max_tokens=8, policy=PolicyChoice.parse("4"))))
    engine.close()
    assert not own_calibration_file.exists()


@pytest.mark.parametrize("k", ["3", "0", "heuristic"])
def test_every_policys_passes_refine_the_curve_and_are_saved(own_calibration_file, monkeypatch, k):
    """A fixed-K or heuristic reply's passes move the live curve the next auto round prices, and
    refine the saved one, as an auto reply's do: every policy sees the same current machine."""
    clock = VirtualClock()
    save_curve_measured_at(1.1, clock)  # under the contradiction margin: refined, not measured again
    monkeypatch.setattr(CostModel, "calibrate", no_calibration)
    engine = fake_engine(clock, verify=cpu_like, draft_step=0.01)
    engine.cost_model()  # as an earlier auto reply in this process would have
    prompt = engine.target.tokenize("def add(a, b):\n    return a + b\n\ndef add(")
    with simulated_time(clock):
        list(engine.generate_tokens(prompt, GenerateSettings(max_tokens=60, policy=PolicyChoice.parse(k))))
    used = [n for n, count in Counter(engine.target.evals).items() if count >= 3]
    assert used
    _, entry = saved_entry(own_calibration_file)
    for n in used:
        assert engine.costs.verify(n) < loaded(1.1)(n)
        assert quiet_figure(entry, n) == pytest.approx(cpu_like(n))
    assert quiet_figure(entry, 17) == pytest.approx(loaded(1.1)(17))  # no pass there: as measured


def test_another_policys_passes_before_the_curve_is_loaded_do_not_stand_in_for_it(own_calibration_file, monkeypatch):
    """A fixed-K reply before any auto reply times a few sizes live: no curve to save, and the
    first auto reply still restores the saved one, every size of it."""
    clock = VirtualClock()
    save_curve_measured_at(1.1, clock)
    saved = own_calibration_file.read_text()
    monkeypatch.setattr(CostModel, "calibrate", no_calibration)
    engine = fake_engine(clock, verify=cpu_like, draft_step=0.01)
    prompt = engine.target.tokenize("def add(a, b):\n    return a + b\n\ndef add(")
    with simulated_time(clock):
        list(engine.generate_tokens(prompt, GenerateSettings(max_tokens=40, policy=PolicyChoice.parse("4"))))
    assert engine.costs.calibrated  # live passes at two sizes or more
    assert own_calibration_file.read_text() == saved
    engine.cost_model()
    assert engine.costs.verify(17) == pytest.approx(loaded(1.1)(17))


@pytest.mark.parametrize("k", ["auto", "auto-chain"])
def test_every_cost_aware_policy_starts_from_the_measured_curve(own_calibration_file, k):
    """auto-chain, the chain baseline auto's trees are benched against, once started from the
    uncalibrated placeholder curve (1 s a pass at every length) and so never drafted with the model."""
    clock = VirtualClock()
    engine = fake_engine(clock, verify=cpu_like, draft_step=0.01)
    prompt = engine.target.tokenize("def add(a, b):\n    return a + b\n\ndef add(")
    with simulated_time(clock):
        list(engine.generate_tokens(prompt, GenerateSettings(max_tokens=8, policy=PolicyChoice.parse(k))))
    assert engine.costs.calibrated
    assert engine.costs.verify(3) == pytest.approx(cpu_like(3), rel=0.5)


def told(engine, clock: VirtualClock) -> list[tuple[float, str]]:
    """What the engine says to the user (`Engine.notice`), each line with the simulated time it was said."""
    lines: list[tuple[float, str]] = []
    engine.notice = lambda message: lines.append((clock.now, message))
    return lines


def test_a_calibration_on_a_machine_too_busy_stops_at_its_budget_and_says_what_it_kept(own_calibration_file):
    """A pass costing 25 times the quiet machine's: one round of every size would take about a
    minute, three about three. It stops once its budget is spent (the pass under way ends first)
    and keeps what it timed, the ends of the range among them, so the sizes it never reached are
    interpolated rather than guessed."""
    clock = VirtualClock()
    busy = loaded(25.0)
    engine = fake_engine(clock, verify=busy, draft_step=0.01)
    lines = told(engine, clock)
    with simulated_time(clock):
        engine.cost_model()
    assert clock.now <= CALIBRATION_BUDGET_S + busy(1) + busy(LONGEST_DENSE_DRAFT + 1)  # warm-up, and the last pass
    _, entry = saved_entry(own_calibration_file)
    timed = sorted(map(int, entry["verify"]))
    assert 1 in timed and LONGEST_DENSE_DRAFT + 1 in timed and 2 <= len(timed) < LONGEST_DENSE_DRAFT + 1
    untimed = next(n for n in range(2, LONGEST_DENSE_DRAFT + 1) if n not in timed)
    assert engine.costs.verify(untimed) == pytest.approx(busy(untimed))
    assert [message.split(" (")[0] for _, message in lines] == [
        "measuring this machine's speed with 'fake'",
        f"speed measurement stopped at its {CALIBRATION_BUDGET_S:g} s limit",
    ]
    assert f"{len(timed)} of {LONGEST_DENSE_DRAFT + 1} sizes timed" in lines[1][1]


def test_a_calibration_the_user_waits_for_is_said_while_it_runs_and_when_it_ends(own_calibration_file):
    clock = VirtualClock()
    engine = fake_engine(clock, verify=cpu_like, draft_step=0.01)  # about 8 s of passes in all
    lines = told(engine, clock)
    with simulated_time(clock):
        engine.cost_model()
    assert len(lines) == 2, lines
    (started, first), (ended, last) = lines
    assert first.startswith("measuring this machine's speed with 'fake'")
    assert SAY_AFTER_S <= started < ended == clock.now  # said while it ran
    assert last.startswith("speed measured in ") and "1 token 30 ms, over 32 tokens 495 ms" in last


def test_a_calibration_too_short_to_notice_is_not_said(own_calibration_file):
    clock = VirtualClock()
    engine = fake_engine(clock, verify=lambda n: 0.001 * n)
    lines = told(engine, clock)
    with simulated_time(clock):
        engine.cost_model()
    assert engine.costs.calibrated and lines == []


@pytest.mark.parametrize(("measured_at", "contradicted"), [(3.0, True), (1.5, False)])
def test_live_passes_at_one_size_far_below_the_curve_contradict_it(own_calibration_file, measured_at, contradicted):
    """A short reply (the 8 tokens an agent first asks for) may verify one size only: live passes
    there at a third of the saved figure prove the measurement ran on a busy machine, and the
    curve is measured again (said once); at two thirds, one size is not enough to say so."""
    clock = VirtualClock()
    save_curve_measured_at(measured_at, clock)
    engine = fake_engine(clock, verify=cpu_like, draft_step=0.01)
    lines = told(engine, clock)
    reply(engine, (2,), cpu_like)
    reply(engine, (2,), cpu_like)
    assert saved_entry(own_calibration_file)[1]["measure_again"] is contradicted
    assert [message.split(" than")[0] for _, message in lines] == (
        ["live passes ran up to 3.0x faster"] if contradicted else []
    )
