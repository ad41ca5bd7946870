"""Pipeline stage search: exact against brute force over every cut and group size, one stage equal
to today's intra-operator optimum, and the 1F1B objective."""

from __future__ import annotations

import itertools
import math

import pytest

from stratopt.cost import build
from stratopt.errors import ModelError
from stratopt.graph import GraphBuilder
from stratopt.pipeline import _sizes, cut_points, search, stage_graph
from stratopt.plan import cluster
from stratopt.solvers import solve


def chain(widths=(64, 256, 64, 512, 64, 128)):
    g = GraphBuilder("chain")
    x = g.input((32, 64))
    for w in widths:
        x = g.fc(x, w, pointwise=1)
    return g.build()


def stage_time(graph, start, end, devices, machine) -> float:
    costing = build(stage_graph(graph, start, end), devices, machine=machine, cutoff=1)
    return float(solve(costing.problem, "dp").objective)


def brute(graph, nodes, gpus, microbatches, stages=None) -> float:
    """Every way to cut the units into consecutive stages and give each a group size."""
    where = cluster(nodes, gpus)
    p = where.devices
    cuts = cut_points(graph)
    units = len(cuts) - 1
    sizes = [g for g in _sizes(nodes, gpus) if g <= p]
    index = graph.index
    best = math.inf
    for count in range(1, units + 1):
        if stages is not None and count != stages:
            continue
        for inner in itertools.combinations(range(1, units), count - 1):
            bounds = [0, *inner, units]
            for groups in itertools.product(sizes, repeat=count):
                if sum(groups) > p:
                    continue
                times, used = [], 0
                for k in range(count):
                    start, end = cuts[bounds[k]], cuts[bounds[k + 1]]
                    times.append(stage_time(graph, start, end, groups[k], where.machine))
                    used += groups[k]
                    if k < count - 1:
                        u = max(
                            index[i.source]
                            for op in graph.operators[end:]
                            for i in op.inputs
                            if i.source and index[i.source] < end
                        )
                        words = graph.operators[u].outputs[0].size * 2.0
                        crosses = used % gpus == 0
                        bw, lat = where.machine.link(p if crosses else 1, p if crosses else 1)
                        times.append(float(2.0 * (words / bw + lat)) * 1e6)
                best = min(best, sum(times) + (microbatches - 1) * max(times))
    return best


@pytest.mark.parametrize(
    ("nodes", "gpus", "microbatches", "stages"), [(1, 4, 8, None), (2, 2, 4, None), (2, 2, 1, None), (1, 4, 16, 2)]
)
def test_search_equals_brute_force(nodes, gpus, microbatches, stages) -> None:
    """A six-layer chain (a cut between every pair of layers) on 4 devices: the search's 1F1B time
    equals the best over every cut, every group size and (unless fixed) every stage count, and its
    own stages re-price to its estimate."""
    graph = chain()
    found = search(graph, nodes, gpus, microbatches=microbatches, stages=stages, max_units=None)
    assert found.estimate == pytest.approx(brute(graph, nodes, gpus, microbatches, stages))
    times = [s.time for s in found.stages] + list(found.transfers)
    assert found.estimate == pytest.approx(sum(times) + (microbatches - 1) * max(times))
    assert stages is None or len(found.stages) == stages
    bounds = [(s.start, s.end) for s in found.stages]
    assert bounds[0][0] == 0 and bounds[-1][1] == len(graph)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))  # consecutive, covering all


def test_one_stage_is_the_intra_operator_optimum() -> None:
    """With one stage the pipeline is today's plan: the DP's optimum on all devices (or fewer, as the
    configuration policy allows), and M micro-batches take M times one."""
    graph = chain()
    where = cluster(2, 2)
    reference = solve(build(graph, 4, machine=where.machine, cutoff=1).problem, "dp").objective
    one = search(graph, 2, 2, stages=1)
    assert one.estimate == pytest.approx(reference)
    assert search(graph, 2, 2, stages=1, microbatches=5).estimate == pytest.approx(5 * reference)


def test_cuts_and_errors() -> None:
    """Cuts fall only where one tensor crosses (not inside a residual block); bad requests are one-line errors."""
    g = GraphBuilder("residual")
    x = g.input((16, 32))
    a = g.fc(x, 32)
    b = g.fc(a, 32)
    c = g.elementwise(a, b)  # a crosses the cut after b as well as b: no cut there
    g.fc(c, 32)
    assert cut_points(g.build()) == [0, 1, 3, 4]
    with pytest.raises(ModelError, match="micro-batches"):
        search(chain(), 1, 2, microbatches=0)
    with pytest.raises(ModelError, match="places to cut"):
        search(chain(), 1, 2, stages=9)
