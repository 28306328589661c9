# SPDX-License-Identifier: Apache-2.0
"""joule.Frontier and the policies."""

from __future__ import annotations

import math

import pytest

import joule

POINTS = [("fast", 1.0, 300.0), ("mid", 1.2, 250.0), ("dominated", 1.5, 260.0), ("slow", 2.0, 200.0)]


def test_keeps_the_pareto_points_fastest_first() -> None:
    frontier = joule.Frontier(POINTS)
    assert [p.knob for p in frontier] == ["fast", "mid", "slow"]
    assert len(frontier) == 3
    assert frontier[1] == joule.FrontierPoint("mid", 1.2, 250.0)
    assert frontier.fastest().knob == "fast"
    assert frontier.least_energy().knob == "slow"
    assert frontier.to_list()[0] == {"knob": "fast", "time_s": 1.0, "energy_j": 300.0}


def test_any_python_object_is_a_knob() -> None:
    knob = {"batch_size": 64, "power_limit_w": 200}
    assert joule.Frontier([(knob, 1.0, 1.0)]).fastest().knob is knob


def test_policies_select() -> None:
    frontier = joule.Frontier(POINTS)
    assert frontier.select(joule.MinTime()).knob == "fast"
    assert frontier.select(joule.MinEnergy()).knob == "slow"
    assert frontier.select(joule.Deadline(1.5)).knob == "mid"
    assert frontier.select(joule.MaxSlowdown(1.25)).knob == "mid"
    # eta = 0 → time only; eta = 1 → energy only.
    assert frontier.select(joule.ZeusCost(0.0, 300)).knob == "fast"
    assert frontier.select(joule.ZeusCost(1.0, 300)).knob == "slow"
    cost = joule.ZeusCost(0.5, 300)
    assert cost.cost(250.0, 1.2) == pytest.approx(0.5 * 250 + 0.5 * 300 * 1.2)
    best = min(frontier, key=lambda p: cost.cost(p.energy_j, p.time_s))
    assert frontier.select(cost) == best


def test_carbon_cost_follows_the_intensity() -> None:
    frontier = joule.Frontier(POINTS)
    clean = joule.CarbonCost(eta=0.5, intensity_g_per_kwh=0, max_power_w=300)
    dirty = joule.CarbonCost(eta=0.5, intensity_g_per_kwh=750, max_power_w=300)
    assert frontier.select(clean).knob == "fast"
    assert frontier.select(dirty).knob == frontier.select(joule.ZeusCost(0.5, 300)).knob
    assert dirty.effective_eta() == pytest.approx(0.5)
    assert "CarbonCost" in repr(dirty)


def test_errors() -> None:
    with pytest.raises(joule.StateError, match="no point"):
        joule.Frontier([]).select(joule.MinTime())
    with pytest.raises(joule.StateError, match="empty"):
        joule.Frontier().fastest()
    with pytest.raises(joule.NotFoundError):
        joule.Frontier(POINTS).select(joule.Deadline(0.5))
    with pytest.raises(joule.InvalidArgumentError):
        joule.Frontier([("x", -1.0, 1.0)])
    with pytest.raises(joule.InvalidArgumentError):
        joule.Frontier([("x", math.nan, 1.0)])
    with pytest.raises(joule.InvalidArgumentError, match="eta"):
        joule.validate_policy(joule.ZeusCost(2.0, 100))
    with pytest.raises(joule.InvalidArgumentError, match="factor"):
        joule.Frontier(POINTS).select(joule.MaxSlowdown(0.5))
    with pytest.raises(TypeError):
        joule.Frontier(POINTS).select("min-energy")  # type: ignore[arg-type]


def test_policy_attributes_and_descriptions() -> None:
    policy = joule.ZeusCost()
    assert (policy.eta, policy.max_power_w) == (0.5, 0.0)
    policy.eta = 0.25
    assert policy.eta == 0.25
    assert joule.describe(joule.Deadline(1.2)) == "Deadline(1.2 s)"
    assert repr(joule.MaxSlowdown(1.1)) == "MaxSlowdown(1.1x)"
    assert repr(joule.MinEnergy()) and repr(joule.MinTime())
