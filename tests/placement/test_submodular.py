"""Seed 004's submodular greedy: the appendix walk-through, lazy = plain, f recomputed independently."""

from __future__ import annotations

import math

import pytest

from stratopt.placement import place
from stratopt.placement.jobs import appendix, job
from stratopt.placement.submodular import submodular_greedy

from ._random import random_instance


@pytest.mark.parametrize("lazy", [False, True])
def test_appendix_walk_through(lazy):
    """Submodular-G picks E13, E34, E21, E15, E22 (device, node; 1-based) with the paper's f
    values to within 0.01, and the final placement has JCT 17."""
    rounds = submodular_greedy(appendix(), lazy=lazy)
    assert [(r.device + 1, r.node + 1) for r in rounds] == [(1, 3), (3, 4), (2, 1), (1, 5), (2, 2)]
    for r, paper in zip(rounds, [1.410, 3.399, 4.799, 5.371, 5.935], strict=True):
        assert abs(r.f - paper) <= 0.01, (r, paper)
    result = place(appendix(), "submodular-lazy" if lazy else "submodular")
    assert result.jct == 17
    assert result.placement == (1, 1, 0, 2, 0)


def test_round_one_tie_goes_to_the_lower_device():
    """E13 and E23 tie at f = sqrt(1.99); the lower device index wins."""
    first = submodular_greedy(appendix())[0]
    assert (first.device, first.node) == (0, 2)
    assert first.f == pytest.approx(math.sqrt(1.99))


def _f_from_scratch(instance, rounds, improved):
    """f after the last round, recomputed from the definition: each element's benefit with the
    device's placed cost and the parallel partners placed before it, summed per device."""
    preds = instance.preds
    device = {}
    benefit = [0.0] * instance.num_devices
    placed = [0.0] * instance.num_devices
    last_pf = 1
    for r in rounds:
        partners = [k for k in range(instance.num_nodes) if k != r.node and preds[k] == preds[r.node]]
        pf = 1 + sum(1 for k in partners if k in device and device[k] != r.device)
        c = float(instance.cost[r.node, r.device])
        b = 2 - (c + placed[r.device]) / instance.capacity
        benefit[r.device] += b if improved else b * pf
        placed[r.device] += c
        device[r.node] = r.device
        last_pf = pf
    total = sum(math.sqrt(x) for x in benefit)
    return total * last_pf if improved else total


@pytest.mark.parametrize("improved", [False, True])
def test_lazy_equals_plain_on_random_instances(improved):
    """On 300 random instances (shared predecessor sets, tied costs) the lazy greedy returns the
    same rounds as the plain one, and the last f matches a from-scratch recomputation."""
    for seed in range(300):
        inst = random_instance(seed)
        plain = submodular_greedy(inst, improved=improved, lazy=False)
        lazy = submodular_greedy(inst, improved=improved, lazy=True)
        assert lazy == plain, seed
        assert sorted(r.node for r in plain) == list(range(inst.num_nodes))
        assert plain[-1].f == pytest.approx(_f_from_scratch(inst, plain, improved), rel=1e-12)


@pytest.mark.parametrize("improved", [False, True])
def test_lazy_equals_plain_on_a_network(improved):
    """ResNet-50 on 20 CPU cores and 10 GPUs: identical placements from both implementations."""
    inst = job("resnet50", "medium")
    assert submodular_greedy(inst, improved=improved, lazy=True) == submodular_greedy(
        inst, improved=improved, lazy=False
    )


def test_submodular_improved_moves_the_parallelism_factor():
    """Submodular-GI on the appendix: its round 2 value is pf * f = 2 * (sqrt(1.99) + sqrt(1.98)),
    and it ends with a different placement than Submodular-G."""
    rounds = submodular_greedy(appendix(), improved=True)
    assert (rounds[1].device, rounds[1].node) == (2, 3)
    assert rounds[1].f == pytest.approx(2 * (math.sqrt(1.99) + math.sqrt(1.98)))
    assert place(appendix(), "submodular-improved").placement == (1, 2, 0, 2, 0)
    assert place(appendix(), "submodular").placement == (1, 1, 0, 2, 0)


def test_a_capacity_too_small_is_refused():
    """A capacity that drives a device's benefit sum negative is bad input, not a math error."""
    from stratopt.errors import ModelError
    from stratopt.placement.instance import Device, PlacementInstance

    inst = PlacementInstance.build(
        devices=[Device("a", "cpu")], nodes=["x", "y", "z"], cost=[[10], [10], [10]], capacity=5
    )
    with pytest.raises(ModelError, match="capacity"):
        submodular_greedy(inst)
