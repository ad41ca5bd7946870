"""Human-readable reports of results: the tables and lines ``stratopt`` prints, usable from Python.

Each function writes to standard output (rich tables for tables, plain lines otherwise); the
``--json`` forms of the same results come from the results' own ``to_dict`` methods.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from stratopt.problem import Evaluation, StrategyProblem

__all__ = [
    "print_check",
    "print_comparison",
    "print_evaluation",
    "print_explain",
    "print_models",
    "print_pipeline",
    "print_pipeline_step",
    "print_placement",
    "print_plan",
    "print_result",
    "print_schedule",
    "print_search",
    "print_simulation",
    "short_list",
]


def _console(width: int | None = None) -> Any:
    from rich.console import Console

    return Console(soft_wrap=True, width=width)


def _table(columns: Sequence[str], left: Sequence[str], **kwargs: Any) -> Any:
    from rich.table import Table

    table = Table(**kwargs)
    for col in columns:
        table.add_column(col, justify="left" if col in left else "right")
    return table


def short_list(values: Sequence[int], limit: int = 40) -> str:
    """``[1, 2, 3]``, or its first ``limit`` entries and a count."""
    if len(values) <= limit:
        return "[" + ", ".join(map(str, values)) + "]"
    head = ", ".join(map(str, values[:limit]))
    return f"[{head}, ...] ({len(values)} entries; --json prints all)"


def result_json(result: Any, instance: str, costing: Any = None, explain: Any = None) -> dict[str, Any]:
    """``stratopt solve --json``: the result, and for a network its graph and (``--explain``) rows."""
    out: dict[str, Any] = result.to_dict(instance)
    if costing is not None:
        out["graph"] = costing.describe(result.assignment)
    if explain is not None:
        out["explain"] = explain
    return out


def print_result(
    problem: StrategyProblem, result: Any, instance: str, costing: Any = None, explain: Any = None
) -> None:
    """One solve: status, objective, bound, gap, time and the assignment."""
    from rich.table import Table

    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_row("instance", f"{instance} ({problem.num_vertices} vertices, {problem.num_edges} edges)")
    table.add_row("solver", result.solver)
    table.add_row("status", result.status.value + (f" (stopped by: {result.limit.value})" if result.limit else ""))
    table.add_row("objective", "-" if result.objective is None else f"{result.objective}")
    table.add_row("bound", "-" if result.bound is None else f"{result.bound}")
    if result.gap is not None:
        table.add_row("gap", f"{result.gap:.3%}")
    table.add_row("time", f"{result.wall_time:.3f} s")
    if result.assignment is not None:
        table.add_row("assignment", short_list(list(result.assignment)))
    if "error" in result.stats:
        table.add_row("error", str(result.stats["error"]))
    _console().print(table)
    if explain is not None:
        print_explain(explain, costing.units)


def print_comparison(comparison: Any) -> None:
    """The solvers side by side, and the verdict of the cross-checks."""
    table = _table(
        ("solver", "status", "objective", "bound", "seconds"),
        ("solver", "status"),
        title="solvers side by side (every objective recomputed by evaluate)",
    )
    for r in comparison.results:
        table.add_row(
            r.solver,
            r.status.value + (f" ({r.limit.value})" if r.limit else ""),
            "-" if r.objective is None else f"{r.objective:.10g}",
            "-" if r.bound is None else f"{r.bound:.10g}",
            f"{r.wall_time:.2f}",
        )
    console = _console()
    console.print(table)
    if not comparison.agree:
        console.print(f"[bold red]MISMATCH[/]: {comparison.mismatch}")
    elif comparison.infeasible:
        console.print("agree: infeasible (proven)")
    elif comparison.optimum is not None:
        console.print(f"agree: yes; proven optimum {comparison.optimum:.10g}")
    else:
        console.print("agree: yes; no solver proved an optimum in its time")


def print_explain(rows: list[dict[str, Any]], units: str) -> None:
    """:meth:`stratopt.cost.Costing.explain`'s rows as a table with a total line."""

    def num(x: float) -> str:
        return "0" if x == 0 else f"{x:.4g}"

    overlapped = any(r.get("hidden", 0.0) > 0 for r in rows)  # a calibrated machine's overlap
    names = ("compute", "comm", *(("hidden",) if overlapped else ()), "edges in", "total", "memory MiB")
    table = _table(
        ("operator", "op", "config", *names),
        ("operator", "op", "config"),
        title=f"per-operator costs ({units}; edge costs charged to the consumer; memory per device"
        + ("; hidden: communication under the compute" if overlapped else "")
        + ")",
    )
    keys = ("compute", "comm", *(("hidden",) if overlapped else ()), "edges_in", "total", "memory_bytes")
    totals = [0.0] * len(keys)
    for r in rows:
        table.add_row(
            r["operator"], r["op"], r["config"], *(num(r[k]) for k in keys[:-1]), f"{r['memory_bytes'] / 2**20:.1f}"
        )
        totals = [t + r[k] for t, k in zip(totals, keys, strict=True)]
    table.add_section()
    table.add_row("all", "", "", *(num(t) for t in totals[:-1]), f"{totals[-1] / 2**20:.1f}")
    # Piped output gets a width that fits the table instead of rich's 80-column default.
    _console(None if sys.stdout.isatty() else 160).print(table)


#: ``stratopt models``'s tables: the catalogue's key, title, and (heading, field) per column (left-aligned: text).
_CATALOGUE = (
    (
        "networks",
        "networks (operator graphs; solve with --procs P --profile pase|default)",
        (("name", "name"), ("vertices", "operators"), ("edges", "edges"), ("source", "source")),
    ),
    (
        "placements",
        "placement jobs (stratopt place NAME --algo A)",
        (("name", "name"), ("nodes", "nodes"), ("edges", "edges"), ("devices", "devices")),
    ),
    ("problems", "built-in problems", (("name", "name"), ("description", "description"))),
)


def print_models(found: dict[str, list[dict[str, Any]]]) -> None:
    """:func:`stratopt.instances.catalogue`: networks, placement jobs and built-in problems."""
    console = _console()
    for key, title, columns in _CATALOGUE:
        headings = [h for h, _ in columns]
        table = _table(
            headings, [h for h in headings if h in ("name", "source", "devices", "description")], title=title
        )
        for head in found[key]:
            table.add_row(*(str(head[field]) for _, field in columns))
        console.print(table)


def print_placement(result: Any) -> None:
    """A placement: per device its nodes and busy time, then makespan, status, bound and JCT."""
    inst = result.instance
    if result.placement is None:
        print(f"{inst.name}: {result.algorithm} found no placement ({result.status.value})")
        return
    use: dict[str, list[str]] = {}
    for j, i in enumerate(result.placement):
        use.setdefault(inst.devices[i].name, []).append(inst.nodes[j])
    table = _table(
        ("device", "nodes", "busy", "first nodes"), ("device", "first nodes"), title=f"{inst.name}: {result.algorithm}"
    )
    for i, d in enumerate(inst.devices):
        nodes = use.get(d.name, [])
        if nodes:
            busy = sum(float(inst.cost[inst.nodes.index(v), i]) for v in nodes)
            more = " ..." if len(nodes) > 6 else ""
            table.add_row(d.name, str(len(nodes)), f"{busy:g}", ", ".join(nodes[:6]) + more)
    _console().print(table)
    bound = "" if result.bound is None else f", proven bound {result.bound:g}"
    print(
        f"makespan {result.makespan:g} ({result.status.value}{bound}); seed 004's JCT {result.jct:g}; "
        f"placed in {result.wall_time:.3f} s"
    )
    if not result.fits_memory:
        print("note: this placement exceeds some device's memory (only etf and cpsat honour memory)")


def print_schedule(name: str, out: dict[str, Any], show: int) -> None:
    """A simulated placement (:func:`stratopt.sim.runs.simulate_job`): makespan, JCT, the first tasks."""
    how = "the given device order" if out["policy"] == "order" else "dispatch in order of readiness"
    _print_schedule(name, out["makespan"], out["jct"], out["tasks"], how, show)


def _print_schedule(name: str, makespan: float, jct: float, tasks: list[dict[str, Any]], how: str, show: int) -> None:
    """A simulated placement: makespan, JCT and its first ``show`` tasks."""
    print(f"{name}: makespan {makespan:g} ({how}); seed 004's JCT {jct:g}")
    for task in tasks[:show]:
        print(f"  {task['start']:>12g} {task['end']:>12g}  {task['device']:>8s}  {task['name']}")
    if len(tasks) > show:
        print(f"  ... {len(tasks) - show} more (--json prints all)")


def print_simulation(costing: Any, info: dict[str, Any]) -> None:
    """A simulated step (:func:`stratopt.sim.runs.simulate_network`) of a priced network."""
    _print_simulation(costing.graph.name, costing.policy.procs, info["strategy"]["source"], info, costing.units)


def _print_simulation(name: str, procs: int, source: str, info: dict[str, Any], units: str) -> None:
    """A simulated training step (:func:`stratopt.sim.summary`'s figures)."""
    print(
        f"{name} on {procs} devices, strategy from {source}: iteration time "
        f"{info['iteration_time']:,.1f} {units} simulated (additive model: {info['additive_cost']:,.1f}); "
        f"{info['tasks']} tasks simulated in {info['wall_time']:.2f} s"
    )
    print("device utilisation: " + ", ".join(f"{d} {u:.0%}" for d, u in info["utilisation"].items()))
    kinds = ", ".join(f"{k} {v:,.1f}" for k, v in info["critical_path_by_kind"].items())
    print(f"critical path: {len(info['critical_path'])} tasks; {kinds}")
    if info["busiest_links"]:
        print("busiest links: " + ", ".join(f"{k} {v:,.1f}" for k, v in info["busiest_links"].items()))


def print_search(costing: Any, start: str, r: Any, out: dict[str, Any]) -> None:
    """An MCMC search (:func:`stratopt.sim.mcmc`): its start and best strategies under both models."""
    costs = (out["start"]["additive_cost"], out["best"]["additive_cost"])
    _print_search(costing.graph.name, costing.policy.procs, costing.units, start, r, *costs)


def _print_search(name: str, procs: int, units: str, start: str, r: Any, start_cost: float, best_cost: float) -> None:
    """An MCMC search: proposals, and the start's and the best strategy's times."""
    gain = 1.0 - r.best_time / r.start_time if r.start_time else 0.0
    print(
        f"{name} on {procs} devices: MCMC from {start} ({r.iterations} proposals, "
        f"{r.accepted} accepted, {r.wall_time:.1f} s, seed {r.seed})"
    )
    print(f"  start  {r.start_time:>14,.1f} {units} simulated   {start_cost:>14,.1f} additive")
    print(f"  best   {r.best_time:>14,.1f} {units} simulated   {best_cost:>14,.1f} additive   ({gain:.1%} faster)")


def print_evaluation(problem: StrategyProblem, ev: Evaluation) -> None:
    """An assignment's price, peak usage and feasibility."""
    print(f"objective: {ev.objective}")
    if ev.peak_usage is not None:
        limit = "no limit" if problem.usage_limit is None else f"limit {problem.usage_limit}"
        print(f"peak usage: {ev.peak_usage} ({limit})")
    print("feasible: yes" if ev.feasible else f"feasible: no: {ev.violation}")


def print_plan(
    result: Any,
    pipelined: dict[str, Any] | None = None,
    exported: str | None = None,
    written: dict[str, str] | None = None,
) -> None:
    """``stratopt plan``: the plan in words, the plan and every baseline side by side, then the
    pipeline (``--stages``) and where the plan (and, with ``--export-all``, each strategy) went."""
    _print_plan(result)
    if pipelined is not None:
        print_pipeline(pipelined, result)
    if exported is not None:
        print(f"wrote {exported}")
    for name, where in (written or {}).items():
        print(f"{name}: {'wrote ' if where.endswith('.json') else 'not written: '}{where}")


def _print_plan(result: Any) -> None:
    c = result.cluster
    print(f"{result.model} on {c.describe()}; memory limit {result.memory_gb:g} GB per device")
    plan = result.plan
    if plan.assignment is None:
        print(f"no plan: {plan.note}")
    else:
        gap = ""
        if result.bound is not None and plan.objective:
            gap = f", within {100 * max(0.0, plan.objective - result.bound) / plan.objective:.2f}% of the bound"
        print(f"plan ({plan.note}{gap}):")
        rows = [("layer", "op", "count", "tensor parallel", "data parallel", "weights")]
        for row in plan.layers:
            layer = row["layer"] + (f" [{row['layers']}]" if row["layers"] and row["count"] > 1 else "")
            tp = f"{row['tp']}" + (f" ({row['how']})" if row["how"] else "")
            rows.append((layer, row["op"], str(row["count"]), tp, str(row["dp"]), row["weights"]))
        _print_rows(rows, right={2, 4})

    def num(x: float | None, scale: float = 1.0) -> str:
        return "-" if x is None else f"{x / scale:,.1f}"

    rows = [("strategy", "step us (model)", "step us (simulated)", "GB per device", "fits", "plan faster by")]
    notes = []
    for s in (plan, *result.baselines):
        faster = "-"
        if s is not plan and s.estimate and plan.estimate and plan.fits:
            faster = f"{s.estimate / plan.estimate:.2f}x"
        fits = "yes" if s.fits else ("no" if s.assignment is not None else "-")
        if s is not plan and s.note:
            notes.append(f"{s.name}: {s.note}")
        rows.append((s.name, num(s.estimate), num(s.simulated), num(s.memory, 1e9), fits, faster))
    print()
    _print_rows(rows, right={1, 2, 3, 5})
    for line in notes:
        print(line)
    best = result.best_baseline()
    speedup = result.speedup()
    if best is not None and speedup is not None:
        print(f"speed-up over the best baseline that fits ({best.name}): {speedup:.2f}x (model)")
    elif best is None:
        print("no baseline fits in the memory limit")
    for b in result.simulated_faster():
        print(
            f"the simulator disagrees: {b.name} simulates faster than the plan ({b.simulated:,.1f} against "
            f"{result.plan.simulated:,.1f} us), though the model prices it {b.estimate / result.plan.estimate:.2f}x slower"
        )


def _print_rows(rows: Sequence[Sequence[str]], right: set[int]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        cells = [x.rjust(w) if i in right else x.ljust(w) for i, (x, w) in enumerate(zip(r, widths, strict=True))]
        print("  ".join(cells).rstrip())


def print_train(report: Any) -> None:
    """``stratopt train``: a row per step, the measured step beside the plan's estimate, the check."""
    dp, tp = report.mesh
    shape = f"{report.stages} pipeline stages of {dp} x {tp}" if report.stages > 1 else f"mesh {dp} x {tp}"
    print(f"{report.model}: {len(report.losses)} AdamW steps on {report.world} {report.backend} ranks ({shape})")
    table = _table(("step", "loss", "seconds", f"{report.unit} per s", "peak GB per rank"), (), title=None)
    peak = ", ".join(f"{b / 1e9:.2f}" for b in report.peak_memory)
    for k, (loss, s) in enumerate(zip(report.losses, report.seconds, strict=True)):
        table.add_row(str(k + 1), f"{loss:.9g}", f"{s:.3f}", f"{report.samples / s:,.0f}" if s > 0 else "-", peak)
    _console().print(table)
    predicted = "-" if report.predicted_step_s is None else f"{report.predicted_step_s:.4f} s"
    print(f"step: {report.measured_step_s:.4f} s measured (median after the first), {predicted} predicted by the plan")
    if report.ok is not None:
        verdict = "ok" if report.ok else "MISMATCH"
        print(
            f"one process: {verdict}, losses {', '.join(f'{x:.9g}' for x in report.one_process_losses)}; "
            f"max relative error {report.max_relative_error:.1e} (tolerance {report.to_dict()['tolerance']:.0e})"
        )


def print_check(report: Any) -> None:
    """``stratopt check-plan``: each check's figures, then the collectives module by module."""
    d = report.to_dict()
    dp, tp = report.mesh
    shape = f"{report.stages} pipeline stages of {dp} x {tp}" if report.stages > 1 else f"mesh {dp} x {tp}"
    print(f"{report.model}: the plan on {report.world} gloo processes ({shape}), against one process")

    def verdict(name: str) -> str:
        return "ok" if d["checks"][name] else "MISMATCH"

    loss = d["loss"]
    print(f"loss                {verdict('loss'):8}  {loss['parallel']:.9g} against {loss['one_process']:.9g} "
          f"(relative error {loss['relative_error']:.1e}, tolerance {d['tolerance']:g})")  # fmt: skip
    grads = d["gradients"]
    print(
        f"gradients           {verdict('gradients'):8}  worst relative error {grads['relative_error']:.1e} ({grads['worst']})"
    )
    nbytes = d["parameter_bytes"]
    ranks = sorted(set(nbytes["per_rank"]))
    print(
        f"parameter bytes     {verdict('parameter bytes'):8}  {' / '.join(f'{b:,}' for b in ranks)} per rank; "
        f"the plan's {nbytes['plan_per_rank']:,.0f} (the cost model prices {nbytes['cost_model_per_device']:,.0f})"
    )
    matched = sum(1 for row in report.collectives if row["match"])
    print(f"collectives         {verdict('collectives'):8}  {matched} of {len(report.collectives)} modules as priced")
    again = report.reruns
    if any(r["planned"] or r["counted"] for r in again.values()):
        planned = sum(1 for r in again.values() if r["planned"])
        counted = sum(1 for r in again.values() if r["planned"] == r["counted"])
        print(
            f"recomputation       {verdict('recomputation'):8}  {counted} of {len(again)} modules and blocks ran "
            f"their forward again as planned ({planned} recompute)"
        )
    if report.products:
        rows = report.products
        matched = sum(1 for r in rows if r["planned"] == r["counted"])
        saved = sum(1 for r in rows if not r["planned"])
        print(f"{'':28}{matched} of {len(rows)} products and attention kernels re-ran as planned ({saved} kept)")
    if report.stages > 1:
        moved = report.transfers
        matched = sum(1 for row in moved if row["match"])
        sends = sum(n for row in moved for key, n in row["counted"].items() if key.startswith("send"))
        print(
            f"pipeline transfers  {verdict('pipeline transfers'):8}  {matched} of {len(moved)} stages sent and received "
            f"as planned ({sends} activations and gradients sent, a micro-batch across a boundary each)"
        )

    def kinds(phases: dict[str, dict[str, int]]) -> str:
        parts = [
            f"{ {'forward': 'fwd', 'backward': 'bwd', 'recompute': 'again'}[phase] } {k}" + (f" x{n}" if n > 1 else "")
            for phase in ("forward", "backward", "recompute")
            for k, n in phases.get(phase, {}).items()
        ]
        return ", ".join(parts) or "none"

    rows = [("module", "tp", "fsdp", "priced", "counted", "")]
    for row in report.collectives:
        fsdp = "yes" if row["fsdp"] else "no"
        rows.append(
            (
                row["module"],
                row["tp"],
                fsdp,
                kinds(row["priced"]),
                kinds(row["counted"]),
                "" if row["match"] else "MISMATCH",
            )
        )
    print()
    _print_rows(rows, right=set())
    for name, phases in report.unpriced.items():
        print(f"not in the plan: {name}: {kinds(phases)} (the graph does not price this module)")
    print("all checks passed" if report.ok else "some checks failed")


def print_pipeline_step(name: str, procs: int, info: dict[str, Any]) -> None:
    """``stratopt simulate --stages``: the pipelined step, stage by stage."""
    print(f"{name} on {procs} devices, pipelined:")
    _print_stages(info, None)
    print(
        f"iteration: {info['estimate']:,.1f} us (model), {info['simulated']:,.1f} us simulated "
        f"({info['schedule']}, bubble {info['bubble']:.0%})"
    )


def print_pipeline(info: dict[str, Any], result: Any) -> None:
    """``stratopt plan --stages``: each stage, then the iteration against the plan run unpipelined."""
    print()
    _print_stages(info, result.memory_gb * 1e9)
    m, count = info["microbatches"], len(info["stages"])
    single = info["without_pipelining"]
    if info.get("tried"):
        none = "none runs or fits" if info.get("runs") == "torch" else "does not fit"
        words = ", ".join(
            f"{t['microbatches']}: {none if t['estimate'] is None else format(t['estimate'], ',.1f') + ' us'}"
            for t in info["tried"]
        )
        print(f"micro-batches tried (the model's batch cut into M): {words}")
    line = f"iteration: {info['estimate']:,.1f} us (model), {info['simulated']:,.1f} us (simulated, bubble {info['bubble']:.0%})"
    if single:
        if info.get("runs") == "torch":
            how = f"the plan on {info['mesh'][0] * info['mesh'][1] * count // info.get('chunks', 1)} devices, one stage"
        else:
            how = "the plan, priced as stages are" if info.get("tried") else f"{m} x the plan, gradients synced once"
        line += f"; without pipelining {single:,.1f} us ({how}): {single / info['estimate']:.2f}x by the model"
    print(line)
    if info.get("chosen") == "one stage":
        print("--stages auto: the plan on one stage is no slower than any pipeline of stages; it is the plan exported")


def _print_stages(info: dict[str, Any], limit: float | None) -> None:
    m, count = info["microbatches"], len(info["stages"])
    mesh = f", each on a {info['mesh'][0]} x {info['mesh'][1]} mesh (runs in PyTorch)" if info.get("mesh") else ""
    groups = count // info.get("chunks", 1)  # interleaved: fits says whether a group's stages fit together
    shared = f" on {groups} device groups (stage k on group k mod {groups}; GB per device: a stage's part)"
    shared = f"{count} stage{'s' if count != 1 else ''}{shared if groups < count else ''}"
    print(f"pipeline: {shared}, {m} micro-batches, {info['schedule']}{mesh}")
    rows = [("stage", "operators", "devices", "us per micro-batch", "GB per device", "fits", "strategy")]
    held = [sum(s["memory"] for s in info["stages"][g::groups]) for g in range(groups)]
    for s in info["stages"]:
        words = "; ".join(
            f"{r['layer']}: TP {r['tp']} DP {r['dp']}" for r in s["strategy"] if r["op"] in ("gemm", "conv")
        )
        rows.append(
            (
                str(s["stage"]),
                " .. ".join(s["operators"]),
                str(s["devices"]),
                f"{s['time']:,.1f}",
                f"{s['memory'] / 1e9:,.1f}",
                "-" if limit is None else ("yes" if held[s["stage"] % groups] <= limit else "no"),
                words[:70],
            )
        )
    _print_rows(rows, right={0, 2, 3, 4})


def print_prediction(model: Any, run: Any, p: Any) -> None:
    """One predicted step: time, throughput, utilisation, memory, and where the time goes."""
    print(
        f"{model.name} ({model.params / 1e9:.2f} B parameters), sequence {run.seq}, {run.nodes} x {run.gpus_per_node} GPUs, "
        f"{run.strategy}{' with recomputation' if run.recompute else ''}, micro-batch {run.micro_batch} x {run.grad_accum}"
    )
    print(f"step {p.step_time * 1e3:,.1f} ms: {p.tokens_per_s:,.0f} tokens/s, {p.tokens_per_s_per_gpu:,.0f} per GPU")
    print(
        f"MFU {p.mfu:.1f}%, HFU {p.hfu:.1f}%; memory {p.memory / 1e9:.1f} GB per GPU ({'fits' if p.fits else 'does not fit'})"
    )
    print("time: " + ", ".join(f"{k.replace('_', ' ')} {v * 1e3:,.1f} ms" for k, v in p.parts.items()))


def print_measured(out: dict[str, Any], title: str) -> None:
    """Predicted against measured throughput, row by row, and the summary figures."""
    table = _table(
        ("model", "seq", "gpus", "ckpt", "mb x acc", "predicted", "measured", "error"), ("model",), title=title
    )
    for r in out["rows"]:
        table.add_row(
            r["model"], str(r["seq_len"]), str(r["gpus"]), "yes" if r["recompute"] else "no",
            f"{r['micro_batch']} x {r['grad_accum']}", f"{r['predicted_tokens_per_s_per_gpu']:,.0f}",
            f"{r['measured']:,.0f}", f"{100 * r['error']:+.1f}%",
        )  # fmt: skip
    _console().print(table)
    by_model = ", ".join(f"{m} {rho:.2f}" for m, rho in out["spearman_by_model"].items() if rho is not None)
    print(
        f"median |error| {100 * out['median_abs_error']:.1f}%, 90th percentile {100 * out['p90_abs_error']:.1f}%, "
        f"Spearman {'-' if out['spearman'] is None else format(out['spearman'], '.3f')} (within a model: {by_model or '-'})"
    )


def print_calibration(out: dict[str, Any], path: str) -> None:
    """A calibration (:func:`stratopt.planning.calibrate.calibrate_file`): the fitted rows, the held-out
    ones, and the parameters written to ``path``."""
    print_measured({**out, "rows": out["fitted_rows"]}, "fitted rows (tokens/s per GPU)")
    if "held_out" in out:
        print_measured(out["held_out"], "held-out rows, not fitted")
    print(f"wrote {path}: " + ", ".join(f"{k} {v:.4g}" for k, v in out["calibration"].items()))


def one_line(msg: str) -> str:
    """A message on one line (white space folded)."""
    return " ".join(msg.split())


@contextlib.contextmanager
def one_line_warnings(say: Callable[[str], None], *always: type[Warning]) -> Iterator[None]:
    """Warnings reach the user as one line each through ``say`` (without the source line Python
    would show); the ``always`` categories every time they occur."""

    def show(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
        say(f"stratopt: warning: {one_line(str(message))}")

    with warnings.catch_warnings():
        for category in always:
            warnings.simplefilter("always", category)
        warnings.showwarning = show
        yield


def print_profile(found: Any, output: str | None, plot: str | None) -> None:
    """``stratopt profile``: what was measured, the machine fitted to it, and where it went."""
    m, fit = found.machine, found.fit
    print(f"{m.description}; {found.seconds:.0f} s")
    rows: list[tuple[str, ...]] = [("product (m x k x n)", "GFLOP", "seconds", "TFLOP/s")]
    for r in found.gemm:
        rows.append(
            (f"{r['m']} x {r['k']} x {r['n']}", f"{r['flops'] / 1e9:.3g}", f"{r['seconds']:.3g}", f"{r['tflops']:.3g}")
        )
    _print_rows(rows, right={1, 2, 3})
    print(
        f"products: {fit['gemm_rate_tflops']:.3g} TFLOP/s once past {fit['gemm_half_gflop']:.3g} GFLOP of overhead "
        f"(peak measured {m.peak_tflops:.3g}); fused attention {found.attention['tflops']:.3g} TFLOP/s; "
        f"memory {m.hbm_gbps:.3g} GB/s"
    )
    if "stream_efficiency" in fit:
        print(
            f"pointwise work: {fit['pointwise_ms']:.3g} ms measured, {fit['pointwise_priced_ms']:.3g} ms by its streams: "
            f"{fit['stream_efficiency']:.0%} of the memory's bandwidth"
        )
    if "conv_efficiency" in fit:
        print(
            f"convolution: {fit['conv_tflops']:.3g} TFLOP/s, {fit['conv_efficiency']:.0%} of a product's rate at its work"
        )
    if "view_us" in fit:
        print(
            f"dispatch per operator and pass: {fit['launch_us']:.3g} us, {fit['weight_launch_us']:.3g} us more with "
            f"weights, {fit['view_us']:.3g} us a view; {fit.get('recompute_us', 0.0):.3g} us more to recompute one"
        )
    if found.collectives:
        kinds = dict.fromkeys(r["kind"] for r in found.collectives)
        sizes = sorted({r["bytes"] for r in found.collectives})
        rows = [("bytes", *kinds)]
        for n in sizes:
            by = {r["kind"]: r for r in found.collectives if r["bytes"] == n}
            rows.append((f"{n:,}", *(f"{by[k]['seconds'] * 1e6:,.0f} us" if k in by else "-" for k in kinds)))
        print()
        _print_rows(rows, right=set(range(len(kinds) + 1)))
        print(
            f"links ({found.backend}, {found.world} ranks, each collective after a product): {m.intra_gbps:.3g} GB/s, "
            f"{m.intra_latency_us:.3g} us a message; all-gathers at {fit['gather_efficiency']:.0%} of that, "
            f"reduce-scatters at {fit['scatter_efficiency']:.0%}"
        )
    if output is not None:
        print(f"wrote {output} (use it as --machine {output})")
    if plot is not None:
        print(f"wrote {plot}")
