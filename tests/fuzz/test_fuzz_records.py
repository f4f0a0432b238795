"""Issue #65, item 7: every entry point that opens a run directory (evaluate, load_run, verify,
resume) fuzzed over mutations of a real run (tests/fuzz/strategies.py). Each case holds the issue's
invariants (tests/fuzz/harness.py judges them): an exit code the entry point allows, never a
traceback (load_run: RunError or ConfigError); on an error, exactly one `error: ` line on stderr; on
a refusal the run directory unchanged (load_run and verify: whatever the outcome), and on any
outcome nothing written outside it; no import of planted code; no network; at most TIMEOUT_S
seconds and LIMIT_BYTES of address space more than the worker's.

Issue #74 adds: nothing written through a hard link (the outside name keeps its bytes), no
connection to the worker's listeners (X11, MLflow, W&B, an HTTP proxy: made below Python, where
the audit hook sees none), no more processes than the machine's cores, and evaluate changing
nothing of a run but eval/.

The default suite runs every named attack (ATTACKS) through every entry point (those of issue #74
through the ones in its FOCUS), and a short, derandomized Hypothesis profile; `pytest -m slow
tests/fuzz` runs issue #74's attacks through the other entry points and a long random campaign that
collects every distinct failure before it fails (RL_HYDRA_FUZZ_EXAMPLES cases, 200 by default)."""

from __future__ import annotations

import os
import re
from collections import Counter

import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from tests.fuzz.attacks import ATTACKS, EVERY, FOCUS, Attack
from tests.fuzz.harness import BASES, ENTRIES
from tests.fuzz.strategies import changes

# the attacks whose harm shows only when a resume trains on (it builds the run, loads last.pt,
# truncates metrics.csv, builds the loggers): they open the run stopped at step 450; the others, the finished run
TRAINS_ON = re.compile(r"checkpoint_|csv_|fifo_|provenance_|mlflow|wandb|distributed|huge_numbers|target_del|env_kw")

SHORT = settings(
    max_examples=10,
    derandomize=True,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
LONG = settings(
    max_examples=int(os.environ.get("RL_HYDRA_FUZZ_EXAMPLES", 200)),
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)


FOCUSED = [(attack, entry) for attack in sorted(ATTACKS) for entry in (FOCUS[attack].entries if attack in FOCUS
                                                                      else ENTRIES)]  # fmt: skip
ELSEWHERE = [(attack, entry) for attack in sorted(FOCUS) for entry in EVERY if entry not in FOCUS[attack].entries]


def attacked(fuzzer, attack: str, entry: str):
    """The outcome of one named attack through `entry`, on the base run and with the options it names."""
    if attack not in FOCUS:
        return fuzzer.run(entry, [Attack(attack)], base="unfinished" if TRAINS_ON.match(attack) else "finished")
    focus = FOCUS[attack]
    return fuzzer.run(entry, [Attack(attack)], focus.base, focus.timeout, environment=focus.environment)


@pytest.mark.parametrize(("attack", "entry"), FOCUSED, ids=[f"{a}-{e}" for a, e in FOCUSED])
def test_an_attack_is_refused_or_harmless(fuzzer, attack, entry):
    outcome = attacked(fuzzer, attack, entry)
    assert not outcome.problems, outcome.describe()


@pytest.mark.slow
@pytest.mark.parametrize(("attack", "entry"), ELSEWHERE, ids=[f"{a}-{e}" for a, e in ELSEWHERE])
def test_an_attack_of_issue_74_is_refused_or_harmless_everywhere(fuzzer, attack, entry):
    outcome = attacked(fuzzer, attack, entry)
    assert not outcome.problems, outcome.describe()


@pytest.mark.parametrize("entry", ENTRIES)
@SHORT
@given(changes=changes, base=st.sampled_from(sorted(BASES)))
def test_a_mutated_run_directory_holds_the_invariants(fuzzer, entry, changes, base):
    outcome = fuzzer.run(entry, changes, base)
    assert not outcome.problems, outcome.describe()


def signature(problem: str) -> str:
    """A problem without its paths and numbers: the same failure found twice reads the same."""
    problem = re.sub(r"/\S+", "<path>", problem)
    return re.sub(r"\d+", "#", problem)[:120]


@pytest.mark.slow
def test_a_long_random_campaign_finds_nothing(fuzzer, capsys):
    """Hundreds of random cases; every distinct failure (entry point, signature) is kept with the
    first case that showed it, and all of them are printed before the test fails."""
    found: dict[tuple[str, str], str] = {}
    ran: Counter = Counter()
    imported: dict[str, str] = {}  # a module the worker had not imported: the first case that did

    @LONG
    @given(entry=st.sampled_from(ENTRIES), changes=changes, base=st.sampled_from(sorted(BASES)))
    def case(entry, changes, base):
        outcome = fuzzer.run(entry, changes, base)
        ran[entry] += 1
        event(f"{entry}: {'failed' if outcome.problems else 'ok'}, exit {outcome.code}")
        for problem in outcome.problems:
            found.setdefault((entry, signature(problem)), outcome.describe())
        for module in outcome.new_imports:
            imported.setdefault(module, f"{entry} on a {base} run, mutated by {outcome.applied}")

    case()
    lines = [
        f"{sum(ran.values())} cases ({', '.join(f'{e} {n}' for e, n in sorted(ran.items()))}); "
        f"{len(found)} distinct failures"
    ]
    lines += [f"- [{entry}] {key}\n    {first}" for (entry, key), first in sorted(found.items())]
    lines += [f"imported {module} (not a failure): first by {first}" for module, first in sorted(imported.items())]
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    assert not found, "\n".join(lines)
