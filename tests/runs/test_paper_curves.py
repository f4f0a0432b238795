"""Paper-ready outputs of a sweep's evaluation: vector figures, the curves as CSV, the IQM only where
it is not the mean, probability of improvement and performance profiles (rliable's, by numpy)."""

import csv

import numpy as np
import pytest
from omegaconf import OmegaConf

from rl_hydra.commands.report import sweep_report
from rl_hydra.runs.aggregate import (
    aggregate,
    aggregated_curves,
    curves_csv_text,
    markdown_table,
    performance_profiles,
    probability_of_improvement,
)
from rl_hydra.runs.comparison import Protocol

STEPS = np.arange(100, 1001, 100)


def results(seeds: dict[str, int]) -> list[dict]:
    """Hand-made per-run results: configuration `name` gets `seeds[name]` runs, seed s scoring s + 10 x
    its index; its curve rises by its index + 1, plus seed squared (uneven: the IQM is not the mean)."""
    made = []
    for offset, (name, n) in enumerate(seeds.items()):
        for seed in range(n):
            made.append(
                {
                    "run": f"{name},seed={seed}",
                    "configuration": name,
                    "overrides": (name,),
                    "seed": seed,
                    "status": "ok",
                    "return_mean": 10.0 * offset + seed,
                    "curve": (STEPS, STEPS / 10.0 * (offset + 1) + seed**2),
                    "provenance": {},
                    "step": int(STEPS[-1]),
                    "protocol": Protocol(int(STEPS[-1]), 100, 10, None),
                }
            )
    return made


def read_csv(path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_a_sweep_writes_vector_figures_the_curves_and_the_comparisons(tmp_path):
    made = results({"algo=a": 2, "algo=b": 5})
    cfg = OmegaConf.create({"run_dir": str(tmp_path), "checkpoint": "last", "episodes": 3, "seed": 0})
    cfg.provenance = False
    out = sweep_report(made, cfg)
    eval_dir = tmp_path / "eval"
    for stem in ("learning_curves", "profiles_last_3ep_seed0"):
        assert (eval_dir / f"{stem}.png").read_bytes().startswith(b"\x89PNG")
        assert (eval_dir / f"{stem}.pdf").read_bytes().startswith(b"%PDF")
        assert (eval_dir / f"{stem}.svg").read_bytes().lstrip()[:5] in (b"<?xml", b"<svg ")
    assert "learning_curves.png, .pdf, .svg and .csv" in out and "improvement_last_3ep_seed0.csv" in out
    # the curves' CSV holds what the aggregation computes, the IQM blank where it is the mean
    rows = read_csv(eval_dir / "learning_curves.csv")
    expected = aggregated_curves({"algo=a": [r["curve"] for r in made[:2]], "algo=b": [r["curve"] for r in made[2:]]})
    assert list(rows[0]) == ["configuration", "step", "mean", "iqm", "ci_low", "ci_high", "seeds"]
    for name, a in expected.items():
        mine = [row for row in rows if row["configuration"] == name]
        assert [int(row["step"]) for row in mine] == list(a["steps"])
        np.testing.assert_allclose([float(row["mean"]) for row in mine], a["mean"], rtol=1e-5)
        np.testing.assert_allclose([float(row["ci_low"]) for row in mine], a["low"], rtol=1e-5)
        assert {row["seeds"] for row in mine} == {str(a["seeds"])}
    assert {row["iqm"] for row in rows if row["configuration"] == "algo=a"} == {""}
    # b's seeds end at 200, 201, 204, 209, 216 (mean 206): the IQM of 5 drops one at each end
    assert [float(row["iqm"]) for row in rows if row["configuration"] == "algo=b"][-1] == pytest.approx(
        614 / 3, rel=1e-5
    )
    improvement = read_csv(eval_dir / "improvement_last_3ep_seed0.csv")
    assert [(row["x"], row["y"], row["p_x_above_y"]) for row in improvement] == [
        ("algo=a", "algo=b", "0.0"),
        ("algo=b", "algo=a", "1.0"),
    ]
    assert improvement[0]["checkpoint"] == "last"
    profiles = read_csv(eval_dir / "profiles_last_3ep_seed0.csv")
    assert {row["configuration"] for row in profiles} == {"algo=a", "algo=b"}


def test_probability_of_improvement_on_hand_made_returns():
    assert probability_of_improvement([5, 6, 7], [1, 2, 3]) == (1.0, 1.0, 1.0)
    assert probability_of_improvement([1, 2, 3], [5, 6, 7])[0] == 0.0
    p, low, high = probability_of_improvement([1, 2, 3], [1, 2, 3])
    assert p == 0.5 and low < 0.5 < high  # ties count half
    # 2 of x's 3 runs above y's one run, the third tied: (1 + 1 + 0.5) / 3
    assert probability_of_improvement([2, 3, 1], [1])[0] == pytest.approx(2.5 / 3)


def test_performance_profiles_are_the_fraction_of_runs_above_each_threshold():
    thresholds, profiles = performance_profiles({"a": [0.0, 1.0, 2.0, 3.0], "b": [4.0]}, points=5)
    np.testing.assert_allclose(thresholds, [0, 1, 2, 3, 4])
    np.testing.assert_allclose(profiles["a"][0], [0.75, 0.5, 0.25, 0, 0])
    np.testing.assert_allclose(profiles["b"][0], [1, 1, 1, 1, 0])
    assert np.all(profiles["a"][1] <= profiles["a"][0]) and np.all(profiles["a"][0] <= profiles["a"][2])


def test_the_iqm_is_shown_only_where_it_is_not_the_mean():
    few = markdown_table(aggregate(results({"algo=a": 2, "algo=b": 3})))
    assert "IQM [" not in few and "95% CI of the mean" in few
    assert few.endswith("No IQM: with fewer than 4 seeds per configuration the IQM is the mean.")
    mixed = markdown_table(aggregate(results({"algo=a": 2, "algo=b": 4})))
    assert "IQM [95% CI]" in mixed and mixed.count("= mean [") == 1
    assert mixed.endswith("IQM shown only for configurations with 4 seeds or more: with fewer it is the mean.")
    enough = markdown_table(aggregate(results({"algo=b": 4})))
    assert "IQM [95% CI]" in enough and "= mean" not in enough and "mean." not in enough
    # the curves' CSV has no iqm column at all when no configuration has 4 seeds
    curves = {"a": [(STEPS, STEPS * 1.0), (STEPS, STEPS * 2.0)]}
    assert curves_csv_text(aggregated_curves(curves)).splitlines()[0] == "configuration,step,mean,ci_low,ci_high,seeds"
