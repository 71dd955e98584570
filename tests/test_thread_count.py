"""The thread policy's decisions on simulated passes: a machine whose other programs keep some cores
busy, phase by phase, and whose threads stall when they share a core with them (as llama.cpp's do:
every thread waits for the slowest at each step)."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgespec.decoding.copying.ngram import NgramDrafter
from edgespec.decoding.costs.model import CostModel
from edgespec.decoding.costs.quiet import SESSIONS
from edgespec.decoding.costs.thread_count import ThreadPolicy
from edgespec.decoding.decoder import SpeculativeDecoder
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.events import Step
from edgespec.decoding.policy.simple_policies import FixedK
from edgespec.decoding.sampling import SamplingParams
from tests.fakes import MarkovBackend, VirtualClock, simulated_time


class Machine:
    """`cores` cores; `phases`: (passes, busy cores) in order. A pass at n threads takes the quiet
    time of n threads, times a stall for each thread that has no free core; noise only adds time.
    `load` is what the policy reads of the other programs: the phase's busy cores, or nothing when
    `blind` (load it cannot see, e.g. another virtual machine's)."""

    def __init__(self, cores: int, phases: Sequence[tuple[int, int]], blind: bool = False, seed: int = 0):
        self.cores, self.phases, self.blind = cores, list(phases), blind
        self.rng = random.Random(seed)
        self.passes = 0
        self.threads = cores  # what the models run on
        self.applied: list[int] = []

    def busy(self) -> int:
        left = self.passes
        for length, busy in self.phases:
            if left < length:
                return busy
            left -= length
        return self.phases[-1][1]

    def quiet(self, n: int) -> float:
        return 0.117 / n**0.75  # 2 threads: 70 ms, 1: 117 ms

    def seconds(self, n: int) -> float:
        """A pass at n threads now, without noise."""
        stalled = max(0, n - (self.cores - self.busy()))
        return self.quiet(n) * (1 + 1.7 * stalled)

    def noise(self) -> float:
        return 1 + 0.1 * self.rng.random()

    def pass_seconds(self, n: int) -> float:
        return self.seconds(n) * self.noise()

    def best(self) -> int:
        return min(range(1, self.cores + 1), key=self.seconds)

    def sample(self) -> float:
        return 0.0 if self.blind else float(self.busy())

    def since_last(self) -> float:
        return self.sample()

    def apply(self, n: int) -> None:
        self.threads = n
        self.applied.append(n)


def policy_on(machine: Machine, costs: CostModel | None = None) -> ThreadPolicy:
    return ThreadPolicy(machine.cores, machine.apply, costs or CostModel(), machine)


def run(machine: Machine, policy: ThreadPolicy, passes: int, lengths: Sequence[int] = (1,)) -> list[int]:
    """`passes` passes (their lengths in turn, each priced by the shape of `policy`'s curve); the
    thread count of each."""
    counts = []
    for i in range(passes):
        n = lengths[i % len(lengths)]
        assert machine.threads == policy.count
        counts.append(policy.count)
        policy.observe(n, machine.pass_seconds(policy.count) * policy._costs.shape(n))
        machine.passes += 1
    return counts


def test_a_reply_starts_from_the_cores_other_programs_leave_free():
    busy = Machine(2, [(100, 1)])
    assert policy_on(busy).begin() == 1 and busy.threads == 1
    quiet = Machine(2, [(100, 0)])
    assert policy_on(quiet).begin() == 2
    many = Machine(8, [(100, 3)])
    assert policy_on(many).begin() == 5


def test_on_a_quiet_machine_probes_cost_little_and_the_count_stays():
    machine = Machine(2, [(1000, 0)])
    policy = policy_on(machine)
    policy.begin()
    counts = run(machine, policy, 1000)
    assert counts[-1] == 2 and policy.best == 2
    probed = counts.count(1)
    assert 0 < probed <= 0.015 * len(counts)  # it does look, rarely, backing off


def test_a_busy_core_the_load_reading_misses_is_found_by_measuring():
    machine = Machine(2, [(400, 1)], blind=True)
    policy = policy_on(machine)
    assert policy.begin() == 2
    counts = run(machine, policy, 400)
    assert counts[-1] == 1
    assert counts.index(1) <= ThreadPolicy.BASE + 1
    assert counts[100:].count(1) >= 0.95 * 300
    assert policy.seconds[2] > policy.seconds[1]


def test_load_arriving_is_noticed_at_once_by_the_rise_of_the_timings():
    machine = Machine(2, [(600, 0), (200, 1)], blind=True)
    policy = policy_on(machine)
    policy.begin()
    counts = run(machine, policy, 800)
    assert counts[599] == 2
    assert counts.index(1, 600) - 600 <= 4  # the two passes the rise is read on, then the probe
    assert counts[610:].count(1) >= 0.95 * 190 and counts[-1] == 1


@pytest.mark.parametrize("blind", [False, True])
def test_load_that_leaves_is_noticed_from_the_load_reading_or_by_a_later_probe(blind: bool):
    machine = Machine(2, [(300, 1), (1200, 0)], blind=blind)
    policy = policy_on(machine)
    policy.begin()
    counts = run(machine, policy, 1500)
    assert counts[299] == 1
    back = counts.index(2, 300)
    assert back - 300 <= (ThreadPolicy.CHECK + 2 if not blind else ThreadPolicy.MAX + 2)
    assert counts[-1] == 2


def test_on_many_cores_it_walks_to_the_count_the_load_leaves():
    machine = Machine(8, [(2000, 3)], blind=True)
    policy = policy_on(machine)
    policy.begin()
    counts = run(machine, policy, 2000)
    assert counts[-1] == machine.best() == 5


def test_passes_of_every_length_compare_through_the_curves_shape():
    """A pass over 4 tokens costs 2.5 one-token passes here: mixed lengths on a quiet machine probe
    exactly as one-token passes do (no rise is read into the longer ones)."""
    costs = CostModel()
    costs.restore({"verify": {"1": [0.07], "4": [0.175]}})
    mixed, single = Machine(2, [(500, 0)]), Machine(2, [(500, 0)])
    p_mixed, p_single = policy_on(mixed, costs), policy_on(single, costs)
    p_mixed.begin(), p_single.begin()
    assert run(mixed, p_mixed, 500, lengths=(1, 4, 4, 1)) == run(single, p_single, 500)


def test_what_a_reply_learnt_carries_to_the_next_while_the_load_is_the_same():
    machine = Machine(2, [(10_000, 0)])
    policy = policy_on(machine)
    policy.begin()
    first = run(machine, policy, 300).count(1)
    policy.begin()
    second = run(machine, policy, 300).count(1)
    assert second < first  # the back-off was kept: no new round of early probes


# Derandomized: a random draw that found a new counterexample would fail CI by chance, not by a
# change; the fixed draw still catches a policy that gets worse.
@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    phases=st.lists(st.tuples(st.integers(150, 400), st.integers(0, 1)), min_size=1, max_size=5),
    seed=st.integers(0, 1000),
)
def test_a_moving_load_on_two_cores_is_followed(phases: list[tuple[int, int]], seed: int):
    """Whatever the phases, each phase that lasts ends at its best count, and decoding takes at most
    a little more than an oracle that always knew it."""
    follows_a_moving_load(phases, seed)


def test_a_core_taken_after_a_long_quiet_spell_is_followed():
    """Hypothesis's counterexample to the property above: after 351 quiet passes the probes had
    backed off, and the probe the load reading brought was weighed against the quiet passes run
    before the core was taken, so it lost and the policy stayed at 2 threads for the next 512."""
    follows_a_moving_load([(150, 0), (201, 0), (150, 1)], 810)


def follows_a_moving_load(phases: list[tuple[int, int]], seed: int) -> None:
    machine = Machine(2, phases, seed=seed)
    policy = policy_on(machine)
    policy.begin()
    total = sum(length for length, _ in phases)
    spent = oracle = 0.0
    for _ in range(total):
        noise = machine.noise()
        oracle += machine.seconds(machine.best()) * noise
        t = machine.seconds(policy.count) * noise
        spent += t
        policy.observe(1, t)
        machine.passes += 1
        assert 1 <= policy.count <= 2
    machine.passes = total - 1
    assert policy.best == machine.best()
    assert spent <= 1.15 * oracle


def test_passes_on_fewer_threads_price_the_reply_but_leave_the_quiet_curve():
    """Replies run wholly on 1 of 2 threads (a core busy from their start), more of them than the
    quiet curve keeps sessions: their passes, twice as dear, move the live curve the controller
    prices each reply with, but the quiet curve saved for the next run keeps the calibration's
    figures. Taken in, they would have set it for good at every size they used. A reply at the
    models' own count refines it."""
    machine = Machine(2, [(1, 0), (SESSIONS + 1, 1), (10_000, 0)])  # busy for SESSIONS + 1 replies
    clock = VirtualClock()

    def load() -> float:  # 1 thread: twice the quiet cost; 2 threads, one of them stalled: three times
        return 2.0 if machine.threads == 1 else 1.0 + 2.0 * machine.busy()

    target = MarkovBackend(n_vocab=8, cost=lambda n: 0.03 * n**0.5 * load(), clock=clock)
    costs = CostModel()
    with simulated_time(clock):
        costs.calibrate(target, None, max_n=3)  # at 2 threads, quiet
    machine.passes += 1  # the load arrives
    quiet = costs.quiet_curve()
    policy = ThreadPolicy(2, machine.apply, costs, machine)
    decoder = SpeculativeDecoder(target, FixedK(2, DraftChoice.NGRAM, costs), [NgramDrafter()], policy)

    def reply() -> set[int]:
        target.truncate(0)
        with simulated_time(clock):
            events = list(decoder.generate([1, 2, 3, 1, 2, 3, 1, 2], 60, SamplingParams()))
        machine.passes += 1  # a phase is a reply
        costs.end_session()
        return {e.threads for e in events if isinstance(e, Step)}

    for _ in range(SESSIONS + 1):
        assert 1 in reply()  # (a probe may try 2 threads)
        assert max(costs.verify(n) / quiet[n] for n in quiet) > 1.5  # the live curve followed
    assert costs.quiet_curve() == pytest.approx(quiet)
    sessions = costs.to_dict()["verify"]
    assert reply() == {2}
    assert costs.to_dict()["verify"] != sessions  # a session of its own
