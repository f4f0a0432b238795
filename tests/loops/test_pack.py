"""A pack drives its members' steps in lockstep: one round of updates at a time, each member with its own
torch random state and its turn; a member's own error ends it alone; a Ctrl-C reaches every member."""

import pytest
import torch

from rl_hydra.loops.pack import Member, each_alone, run_pack, start
from rl_hydra.loops.steps import Turn, UpdateWanted, drive


class Counter:
    """An agent whose update is its batch plus one, or raises where told."""

    def __init__(self, fail_on=None):
        self.fail_on = fail_on

    def update(self, batch):
        if batch == self.fail_on:
            raise RuntimeError(f"update {batch} failed")
        return batch + 1


def steps(seed: int, n: int, agent: Counter, seen: list):
    """Seeds torch (as a run's build does), then n steps, each drawing a number, updating on it, and
    recording the update's answer and whose turn it was."""
    torch.manual_seed(seed)
    for i in range(n):
        draw = float(torch.rand(()))
        answer = yield UpdateWanted(agent, i)
        seen.append((i, answer, draw, Turn.current))
        yield None
    return seed


def test_each_member_draws_what_it_draws_alone_and_gets_its_own_answers():
    alone = {seed: [] for seed in (0, 1, 2)}
    for seed, seen in alone.items():
        assert drive(steps(seed, 4, Counter(), seen)) == seed
    packed = {seed: [] for seed in (0, 1, 2)}
    members = [start(f"seed={seed}", steps(seed, 4 + seed, Counter(), seen)) for seed, seen in packed.items()]
    before = torch.get_rng_state()
    run_pack(members)
    assert torch.equal(torch.get_rng_state(), before)  # the process's own generator is put back
    assert [m.result for m in members] == [0, 1, 2] and all(m.error is None for m in members)
    for seed, member in zip((0, 1, 2), members, strict=True):
        assert [row[:3] for row in packed[seed][:4]] == [row[:3] for row in alone[seed]]
        assert all(row[3] is member for row in packed[seed])  # its turn while it ran
    assert Turn.current is None


class Drawing(Counter):
    """An update that draws from torch's generator, as dropout and an actor's noise do."""

    def update(self, batch):
        return batch + float(torch.rand(()))


def test_an_update_alone_draws_what_it_draws_in_a_run_alone():
    alone = {seed: [] for seed in (0, 1)}
    for seed, seen in alone.items():
        drive(steps(seed, 3, Drawing(), seen))
    packed = {seed: [] for seed in (0, 1)}
    run_pack([start(str(seed), steps(seed, 3, Drawing(), seen)) for seed, seen in packed.items()])
    assert {seed: [row[:3] for row in seen] for seed, seen in packed.items()} == {
        seed: [row[:3] for row in seen] for seed, seen in alone.items()
    }


def test_a_round_hands_every_wanting_member_to_one_update_call():
    rounds = []

    def batched(wanted):
        rounds.append([w.batch for w in wanted])
        return each_alone(wanted)

    members = [start(str(k), steps(k, 3, Counter(), [])) for k in range(3)]
    run_pack(members, batched)
    assert rounds == [[0, 0, 0], [1, 1, 1], [2, 2, 2]]


def test_a_member_whose_update_fails_ends_alone():
    seen = {0: [], 1: []}
    members = [start("ok", steps(0, 3, Counter(), seen[0])), start("bad", steps(1, 3, Counter(fail_on=1), seen[1]))]
    run_pack(members)
    assert members[0].result == 0 and len(seen[0]) == 3
    assert isinstance(members[1].error, RuntimeError) and str(members[1].error) == "update 1 failed"
    assert len(seen[1]) == 1  # the error was raised where the member asked for its update


def test_a_ctrl_c_between_turns_is_thrown_into_every_member(monkeypatch):
    heard = []

    def listening(name):
        try:
            while True:
                yield None
        except KeyboardInterrupt:
            heard.append(name)
            raise SystemExit(130) from None  # as an interrupted run's job ends

    members = [start(name, listening(name)) for name in ("a", "b")]
    advance, turns = Member.advance, []

    def interrupted_at_the_fifth_turn(self, answer=None):
        turns.append(self.name)
        if len(turns) == 5:
            raise KeyboardInterrupt  # as the signal handler raises it, between two turns
        advance(self, answer)

    monkeypatch.setattr(Member, "advance", interrupted_at_the_fifth_turn)
    with pytest.raises(SystemExit):
        run_pack(members)
    assert sorted(heard) == ["a", "b"] and all(m.done for m in members)
