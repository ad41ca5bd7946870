"""Plans that run: every tested plan, applied with DTensor and FSDP on 2 gloo processes (and a
subset on 4: the decoders, the MLP, recomputation and pipelines),
computes the one-process model (loss and gradients within 1e-5), holds the parameter bytes the plan
says on each rank, and issues per module the collectives the plan priced; a plan whose prices are
wrong is caught, and a plan for another model is refused before anything runs.

All plans of one world size run in one launch (``check_plans``), to keep the suite short."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from stratopt.cli import main
from stratopt.errors import ModelError
from stratopt.instances import load_instance
from stratopt.planning import plan
from stratopt.planning.export import ExportedPlan
from stratopt.planning.torchpipe import runnable_pipeline
from stratopt.planning.torchplan import find_mesh
from stratopt.torch import check_plan
from stratopt.torch.check import TOLERANCE, check_plans

from .test_torchplan import expert_split, gpt2_width_split, mixed_mlp, sequence_split, split_heads, width_split

MODELS = [
    "stratopt.importers.hf:gpt2",
    "stratopt.importers.hf:llama",
    "stratopt.importers.hf:resnet",
    "stratopt.torch.models:mlp",
    "stratopt.torch.models:transformer",
]
#: At world 4, the CI subset: the decoders and the MLP (every model runs at world 2).
AT_4 = MODELS[:2] + MODELS[3:4]


def _models(world: int) -> list[str]:
    return MODELS if world == 2 else AT_4


def _cases(world: int) -> list[tuple[str, str, ExportedPlan]]:
    """(model, strategy, plan): the optimum among the plans DTensor runs, and the hand-written
    Megatron (tensor parallel over the whole world), Megatron with FSDP and FSDP where they run."""
    wanted = {"plan", f"megatron-tp{world}", "megatron-tp2-fsdp", "fsdp"}
    out = []
    for model in _models(world):
        result = plan(model, 1, world, simulate=False, expressible="torch")
        for strategy in (result.plan, *result.baselines):
            if strategy.name not in wanted or strategy.assignment is None:
                continue
            if isinstance(find_mesh(result.costing, strategy.assignment, world), str):
                assert model.endswith("resnet") and strategy.name.startswith("megatron")  # convolutions: no style
                continue
            out.append((model, strategy.name, ExportedPlan.of(dataclasses.replace(result, plan=strategy))))
    # every block checkpointed, and the same on data-parallel devices under 60% of its memory (FSDP too)
    llama = "stratopt.importers.hf:llama"
    full = plan(llama, 1, world, simulate=False, expressible="torch", recompute="full")
    out.append((llama, "recompute-full", ExportedPlan.of(full)))
    spread = plan(llama, world, 1, simulate=False, expressible="torch", recompute="full")
    limit = 0.6 * float(spread.plan.memory or 0.0) / 1e9
    tight = plan(llama, world, 1, simulate=False, expressible="torch", recompute="full", memory_gb=limit)
    out.append((llama, "recompute-fsdp", ExportedPlan.of(tight)))
    if world == 2:  # ZeRO-2: FSDP's weights gathered once, forward, and kept for the backward pass
        zero2 = dataclasses.replace(tight.plan, assignment=twin_of(tight.costing, tight.plan.assignment, "zero2"))
        out.append((llama, "zero2", ExportedPlan.of(dataclasses.replace(tight, plan=zero2))))
    # checkpointed selectively: at 33% of the fastest plan's memory some products keep their outputs
    fastest = plan(llama, 1, world, simulate=False, expressible="torch", recompute="none")
    limit = 0.33 * float(fastest.plan.memory or 0.0) / 1e9
    out.append(
        (
            llama,
            "selective",
            ExportedPlan.of(plan(llama, 1, world, simulate=False, expressible="torch", memory_gb=limit)),
        )
    )
    if world == 2:  # a column-parallel output gathered where the plan keeps its split (counted as it runs)
        megatron = plan(llama, 1, 2, simulate=False, expressible="torch")
        mixed = dataclasses.replace(megatron.plan, assignment=mixed_mlp(megatron))
        out.append((llama, "mixed-mlp", ExportedPlan.of(dataclasses.replace(megatron, plan=mixed))))
    if world == 2:  # Megatron's attention: the heads split through the views and the rotary embedding
        split = dataclasses.replace(megatron.plan, assignment=split_heads(megatron, 2))
        out.append((llama, "megatron-heads", ExportedPlan.of(dataclasses.replace(megatron, plan=split))))
        # and sequence parallelism: norms and residual stream split over the sequence between the blocks' modules
        split = dataclasses.replace(megatron.plan, assignment=sequence_split(megatron, 2))
        out.append((llama, "sequence", ExportedPlan.of(dataclasses.replace(megatron, plan=split))))
        # the stream handed on by the embedding split over its vocabulary (reduce-scattered)
        split = dataclasses.replace(megatron.plan, assignment=sequence_split(megatron, 2, embedding="vocab"))
        vocab = ExportedPlan.of(dataclasses.replace(megatron, plan=split))
        assert vocab.modules["embed_tokens"]["collectives"]["forward"] == {"reduce_scatter": 1}
        out.append((llama, "sequence-vocab", vocab))
        # the stream split over the width: key and value (and query) products reading their slice
        for name, rows in (("width", ("k_proj", "v_proj")), ("width-rows", ("q_proj", "k_proj", "v_proj"))):
            split = dataclasses.replace(megatron.plan, assignment=width_split(megatron, 2, rows))
            out.append((llama, name, ExportedPlan.of(dataclasses.replace(megatron, plan=split))))
        # the output projection column-parallel, gathering the heads' split (ColwiseParallel(input_layouts=
        # Shard(-1))): as the search chooses it at 30% of the fastest plan's memory
        limit = 0.3 * float(fastest.plan.memory or 0.0) / 1e9
        gathering = plan(llama, 1, 2, simulate=False, expressible="torch", memory_gb=limit)
        out.append((llama, "gathering", ExportedPlan.of(gathering)))
        # GPT-2's stream split over its width: nn.LayerNorm run split, Conv1D reading it through its view
        gpt2 = plan("stratopt.importers.hf:gpt2", 1, 2, simulate=False, expressible="torch")
        pattern = next(b for b in gpt2.baselines if b.name == "megatron-tp2")
        for name, embedding in (("gpt2-width", None), ("gpt2-width-colwise", "colwise")):
            found = gpt2_width_split(dataclasses.replace(gpt2, plan=pattern), 2, embedding)
            split = dataclasses.replace(pattern, assignment=found)
            out.append(("stratopt.importers.hf:gpt2", name, ExportedPlan.of(dataclasses.replace(gpt2, plan=split))))
    if world == 2:  # BERT: position and token-type tables read at constant ids, a pooler off the loss's path
        bert = "stratopt.importers.hf:bert"
        found = plan(bert, 1, 2, simulate=False, expressible="torch")
        out.append((bert, "bert", ExportedPlan.of(found)))
        # data parallel: the pooler, an output of its own, gets a gradient to all-reduce as priced
        spread = next(b for b in found.baselines if b.name == "data-parallel")
        out.append((bert, "bert-data-parallel", ExportedPlan.of(dataclasses.replace(found, plan=spread))))
        # T5: a per-head position bias split over the heads with them; its embedding's weight held by
        # a module the model never calls (``shared``), sharded by FSDP with the one that reads it
        t5 = "stratopt.importers.hf:t5"
        found = plan(t5, 1, 2, simulate=False, expressible="torch")
        heads = split_heads(
            found,
            2,
            out="o",
            qkv=("q", "k", "v"),
            inside=".SelfAttention.",
            styles={"relative_attention_bias": "colwise"},
        )
        out.append(
            (
                t5,
                "t5-heads",
                ExportedPlan.of(dataclasses.replace(found, plan=dataclasses.replace(found.plan, assignment=heads))),
            )
        )
        fsdp = next(b for b in found.baselines if b.name == "fsdp")
        out.append((t5, "t5-fsdp", ExportedPlan.of(dataclasses.replace(found, plan=fsdp))))
    mixtral = "stratopt.importers.hf:mixtral"
    if world == 2:  # a mixture of experts: its experts module (two products on fused weights) whole, FSDP or not
        moe = plan(mixtral, 1, world, simulate=False, expressible="torch")
        for strategy in moe.baselines:
            if strategy.name in ("data-parallel", "fsdp"):
                picked = ExportedPlan.of(dataclasses.replace(moe, plan=strategy))
                out.append((mixtral, f"moe-{strategy.name}", picked))
        # and split over its experts (expert parallelism inside the tensor-parallel group)
        split = dataclasses.replace(moe.plan, assignment=expert_split(moe, world))
        out.append((mixtral, "moe-experts", ExportedPlan.of(dataclasses.replace(moe, plan=split))))
        # where memory binds the search splits them itself, with blocks checkpointed: under 40% of
        # the free plan's memory inside the group (selectively), under 35% over the data-parallel
        # groups (the tokens sent to their experts all-to-all, and again in each block's re-run)
        for name, share, kind in (("moe-experts-tight", 0.4, "expert"), ("moe-experts-dp", 0.35, "expert-dp")):
            found = plan(
                mixtral, 1, world, simulate=False, expressible="torch", memory_gb=share * moe.plan.memory / 1e9
            )
            exported = ExportedPlan.of(found)
            assert any(e["tp"] == kind for e in exported.modules.values()) and exported.recompute, (name, exported.why)
            out.append((mixtral, name, exported))
    return out + _pipelines(world)


def _pipelines(world: int) -> list[tuple[str, str, ExportedPlan]]:
    """Two pipeline stages: at world 2 Llama as the search decides (micro-batches too), GPT-2 with
    every block checkpointed under GPipe and Mixtral, and Llama on one stage of 2 x 1 accumulating the
    gradients of two micro-batches; at world 4 (what world 2 cannot hold) the MLP tensor parallel in each
    stage and Llama under 75% of its free pipeline's memory on data-parallel stages (FSDP)."""
    d = world // 2
    picks: list[tuple[str, str, dict]] = []
    if world == 2:  # Llama's searched pipeline here only: world 4 adds what world 2 cannot have
        picks.append(("stratopt.importers.hf:llama", "pipeline", {"microbatches": "auto"}))
        picks.append(("stratopt.importers.hf:gpt2", "pipeline-recompute", {"recompute": "full", "schedule": "gpipe"}))
        picks.append(("stratopt.importers.hf:mixtral", "pipeline-moe", {}))
        picks.append(("stratopt.importers.hf:llama", "accumulate", {"stages": 1, "mesh": (2, 1)}))
    else:
        llama = load_instance("stratopt.importers.hf:llama")
        free = runnable_pipeline(llama, 1, world, stages=2, microbatches=2, mesh=(d, 1), recompute="none")
        tight = {"mesh": (d, 1), "recompute": "none", "memory_gb": 0.75 * max(free.memory()) / 1e9}
        picks += [
            ("stratopt.torch.models:mlp", "pipeline-tp", {"mesh": (1, d)}),
            ("stratopt.importers.hf:llama", "pipeline-fsdp", tight),
        ]
    out = []
    for model, name, options in picks:
        result = plan(model, 1, world, simulate=False, expressible="torch")
        options = {"microbatches": 2, "stages": 2, **options}
        run = runnable_pipeline(result.costing.graph, 1, world, **options)
        out.append((model, name, ExportedPlan.of_pipeline(result, run)))
    return out


def _misrouted(exported: ExportedPlan) -> ExportedPlan:
    """A pipeline whose boundary tensor is priced at half its size: what a wrong transfer looks like."""
    section = copy.deepcopy(exported.pipeline)
    section["boundaries"][0]["elements"] //= 2
    return dataclasses.replace(exported, pipeline=section)


def _tampered(exported: ExportedPlan) -> ExportedPlan:
    """The plan with one priced collective taken away: what a wrong price looks like."""
    modules = copy.deepcopy(exported.modules)
    for entry in modules.values():
        phases = entry["collectives"]
        for phase in ("forward", "backward"):
            if phases[phase]:
                phases[phase].pop(next(iter(phases[phase])))
                return dataclasses.replace(exported, modules=modules)
    raise AssertionError("the plan prices no collective")


def twin_of(costing, assignment, mode: str):
    """``assignment`` with every ZeRO-3 (FSDP) choice swapped for its twin sharded the other way,
    ``mode`` (``"zero2"``: the weights kept whole between the passes; ``"hsdp"``: sharded inside
    each node), the same split and recomputation."""
    out = []
    for v, c in enumerate(assignment):
        if costing.sharding_mode(v, c) == "fsdp":
            rows, again = costing.configs[v].tolist(), costing.is_recomputed(v, c)
            twins = [k for k, r in enumerate(rows) if r == rows[c] and costing.sharding_mode(v, k) == mode]
            c = next(k for k in twins if costing.is_recomputed(v, k) == again)
        out.append(c)
    assert out != list(assignment)
    return tuple(out)


# world 4 (the MLP tensor parallel in pipeline stages, Llama's FSDP stages, Megatron over 4) is
# marked slow: CI came within 11 s of its 15 minutes; the README's check-plan runs at world 4
@pytest.fixture(scope="module", params=[2, pytest.param(4, marks=pytest.mark.slow)], ids=lambda w: f"world{w}")
def checked(request):
    world = request.param
    cases = _cases(world)
    extra = []
    if world == 2:
        pipelined = next(p for _, name, p in cases if name == "pipeline")
        extra = [
            ("stratopt.importers.hf:llama", "tampered", _tampered(_megatron(cases))),
            ("stratopt.importers.hf:llama", "misrouted", _misrouted(pipelined)),
        ]
    reports = check_plans([(m, p) for m, _, p in cases] + [(m, p) for m, _, p in extra], world, timeout=600)
    return world, cases, extra, reports


def _megatron(cases: list[tuple[str, str, ExportedPlan]]) -> ExportedPlan:
    return next(p for m, name, p in cases if m.endswith("llama") and name.startswith("megatron"))


def test_every_plan_runs_as_priced(checked) -> None:
    world, cases, extra, reports = checked
    assert len(extra) == 2 * (world == 2)
    others = {"stratopt.importers.hf:mixtral", "stratopt.importers.hf:bert", "stratopt.importers.hf:t5"}
    assert {m for m, _, _ in cases} - others == set(_models(world))
    for (model, name, exported), report in zip(cases, reports, strict=False):
        where = f"{model} {name} at world {world}"
        assert report.loss_error <= TOLERANCE, where
        assert report.gradient_error <= TOLERANCE, (where, report.worst_gradient)
        assert sum(report.param_bytes) == round(report.planned_bytes * world), where
        bad = [row for row in report.collectives if not row["match"]]
        assert not bad, (where, bad[:2])
        assert report.ok, where
        assert {row["module"] for row in report.collectives} == set(exported.modules), where
    # the recomputing plans checkpoint every block, and each module inside runs its forward again
    for (_, name, exported), report in zip(cases, reports, strict=False):
        if name == "accumulate":  # one stage, two micro-batches: the gradients reduced once a step
            assert report.stages == 1 and exported.pipeline["microbatches"] == 2
            assert all(e["collectives"]["backward"] == {"all_reduce": 1} for e in exported.modules.values())
            assert all(row["match"] for row in report.collectives)
        elif name.startswith("pipeline"):
            assert report.stages == 2 and report.checks["pipeline transfers"], name
            m = exported.pipeline["microbatches"]
            assert m >= 2 and all(sum(r["counted"].values()) == 2 * m for r in report.transfers), name
            if name == "pipeline-recompute":
                assert exported.recompute == ("h.0", "h.1") and report.checks["recomputation"]
                assert all(r["counted"] == r["planned"] for r in report.reruns.values())
            if name == "pipeline-fsdp":
                assert any(e["fsdp"] for e in exported.modules.values())
            if name == "pipeline-tp":
                assert {e["tp"] for e in exported.modules.values()} >= {"colwise", "rowwise"}
        elif name.startswith("recompute"):
            assert exported.recompute == ("layers.0", "layers.1"), name
            again = [n for n, r in report.reruns.items() if r["planned"]]
            assert len(again) > len(exported.recompute) and report.checks["recomputation"], name
            assert all(r["counted"] == r["planned"] for r in report.reruns.values()), name
            assert report.products and all(r["counted"] == r["planned"] for r in report.products), name
            # every product runs again but each block's last one (the re-run stops before it)
            stopped = {r["what"] for r in report.products if not r["planned"]}
            assert stopped == {f"layers.{i}.mlp.down_proj" for i in (0, 1)}, (name, stopped)
            assert all(not exported.modules[m].get("rerun", True) for m in stopped), name
            if name == "recompute-fsdp":
                assert any(e["fsdp"] for e in exported.modules.values()), "60% of the memory shards some weights"
        elif name == "selective":  # what the plan keeps is not run again, and the rest is
            assert exported.recompute == ("layers.0", "layers.1") and exported.keep, name
            products = [r for r in report.products if r["kind"] == "product"]
            tail = {m for m, e in exported.modules.items() if not e.get("rerun", True)}
            assert {r["what"] for r in products if not r["planned"]} == set(exported.keep) | tail, name
            assert any(r["counted"] > 0 for r in products) or world == 4, "some products recompute"
            assert all(r["counted"] == r["planned"] for r in report.products) and report.checks["recomputation"]
        elif name == "mixed-mlp":
            up = next(r for r in report.collectives if r["module"] == "layers.0.mlp.up_proj")
            assert up["counted"]["forward"] == up["priced"]["forward"] == {"all_gather": 1} and up["match"]
        elif name == "gathering":  # the heads' split gathered by a column-parallel output projection
            gathers = [m for m, e in exported.modules.items() if e["tp"] == "colwise" and e["input"] == "shard"]
            assert gathers and all(m.endswith("self_attn.o_proj") for m in gathers), gathers
            for m in gathers:
                row = next(r for r in report.collectives if r["module"] == m)
                assert row["counted"]["backward"].get("reduce_scatter") == 1 and row["match"], row
        elif name == "megatron-heads":
            for layer in ("layers.0", "layers.1"):
                q = exported.modules[f"{layer}.self_attn.q_proj"]
                o = exported.modules[f"{layer}.self_attn.o_proj"]
                assert (q["tp"], q["output"], o["tp"], o["input"]) == ("colwise", "shard", "rowwise", "shard")
            assert not exported.recompute and all(r["match"] for r in report.collectives), name
        elif (
            name == "bert"
        ):  # every table priced (a lookup each), and the pooler's bytes held though it has no gradient
            assert {"embeddings.position_embeddings", "embeddings.token_type_embeddings"} <= set(exported.modules)
            assert report.checks["parameter bytes"] and report.priced_bytes == report.param_bytes[0], name
        elif name == "zero2":  # every sharded module gathers once, forward, and is checkpointed as priced
            sharded = [e for e in exported.modules.values() if e["fsdp"]]
            assert sharded and all(e.get("reshard") is False for e in sharded), name
            assert all("all_gather" not in e["collectives"]["backward"] for e in sharded), name
            assert exported.recompute and report.checks["recomputation"], name
        elif name == "bert-data-parallel":
            pooler = next(r for r in report.collectives if r["module"] == "pooler.dense")
            assert pooler["counted"]["backward"] == {"all_reduce": 1} and pooler["match"], name
        elif name == "t5-heads":  # the bias's table split over the heads, handed on to every block's attention
            bias = exported.modules["encoder.block.0.layer.0.SelfAttention.relative_attention_bias"]
            assert (bias["tp"], bias["output"]) == ("colwise", "shard"), name
            assert all(exported.modules[f"encoder.block.{b}.layer.0.SelfAttention.o"]["input"] == "shard" for b in "01")
        elif name == "t5-fsdp":  # each sharded table's reduce-scatter counted where it is priced
            assert exported.modules["encoder.embed_tokens"]["fsdp"] and all(r["match"] for r in report.collectives)
        elif name.startswith("gpt2-width"):  # every block's nn.LayerNorm split over the width, as priced
            norms = [e for n, e in exported.modules.items() if ".ln_" in n]
            assert len(norms) == 4 and all(e["tp"] == "width" for e in norms), name
            assert not exported.recompute and all(r["match"] for r in report.collectives), name
        elif name.startswith("moe"):
            experts = [e for n, e in exported.modules.items() if n.endswith("mlp.experts")]
            assert len(experts) == 2 and all(len(e["params"]) == 2 for e in experts), name
            assert all(e["fsdp"] == (name == "moe-fsdp") for e in experts), name
            split = [e for e in experts if e["tp"] == "expert"]  # each device holds its experts' share
            assert len(split) == 2 * (name == "moe-experts") or (name == "moe-experts-tight" and split), name
            spread = [e for e in experts if e["tp"] == "expert-dp"]  # each data-parallel group its share
            assert len(spread) == 2 * (name == "moe-experts-dp"), name
            assert all(r["match"] for r in report.collectives), name
            if name in ("moe-experts-tight", "moe-experts-dp"):  # a checkpointed block re-runs its experts'
                again = [r["counted"]["recompute"] for r in report.collectives if r["module"].endswith("mlp.experts")]
                kind = {"all_reduce": 1} if name == "moe-experts-tight" else {"all_to_all": 3}  # collectives
                assert report.checks["recomputation"] and kind in again, name
        else:
            assert not exported.recompute and not any(r["counted"] for r in report.reruns.values()), name
    names = {name for _, name, _ in cases if name.startswith("moe")}
    expected = {"moe-data-parallel", "moe-fsdp", "moe-experts", "moe-experts-tight", "moe-experts-dp"}
    assert names == (expected if world == 2 else set())
    # at least two plans per model, and the hand-written Megatron wherever DTensor runs it
    for model in _models(world):
        names = [name for m, name, _ in cases if m == model]
        assert len(names) >= 2 and "plan" in names, (model, names)
        if not model.endswith("resnet"):
            assert any(n.startswith("megatron") for n in names), (model, names)
    # the checks can fail: a plan whose prices leave out a collective the run issues is reported, and
    # so is a pipeline whose boundary tensor is priced at the wrong size
    if extra:
        tampered, misrouted = reports[len(cases) :]
        assert not tampered.ok and not tampered.checks["collectives"]
        assert tampered.checks["loss"] and tampered.checks["gradients"]
        assert not misrouted.ok and not misrouted.checks["pipeline transfers"]
        assert misrouted.checks["loss"] and misrouted.checks["collectives"]


def test_the_mlp_plan_splits_both_ways_and_beats_every_baseline_that_runs() -> None:
    """On 4 H100s the MLP's plan is tensor parallel 2 x data parallel 2, no slower than any
    baseline DTensor runs."""
    result = plan("stratopt.torch.models:mlp", 1, 4, simulate=False, expressible="torch")
    exported = ExportedPlan.of(result)
    assert exported.mesh == (2, 2)
    assert {e["tp"] for e in exported.modules.values()} >= {"colwise", "rowwise"}
    for b in result.baselines:
        if b.fits and b.estimate and not isinstance(find_mesh(result.costing, b.assignment, 4), str):
            assert result.plan.estimate <= b.estimate + 1e-6, b.name


def test_a_plan_for_another_model_is_refused(tmp_path, capsys) -> None:
    """The GPT-2 plan on Llama: the first unknown module named, before any process starts."""
    path = tmp_path / "gpt2.json"
    plan("stratopt.importers.hf:gpt2", 1, 2, simulate=False, expressible="torch").export(path)
    with pytest.raises(ModelError, match="the plan's module 'wte' is not in LlamaModel"):
        check_plan("stratopt.importers.hf:llama", path, 2)
    assert main(["check-plan", "stratopt.importers.hf:llama", "--plan", str(path), "--world", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not in LlamaModel" in err[0]
    assert main(["check-plan", "stratopt.importers.hf:gpt2", "--plan", str(path), "--world", "4"]) == 2
    assert "not --world 4" in capsys.readouterr().err


def test_a_plan_dtensor_cannot_run_says_why(tmp_path) -> None:
    """AlexNet's plan splits a classifier's input features without its batch: the export says which
    operator has no DTensor form, and check-plan refuses it."""
    path = tmp_path / "alexnet.json"
    plan("alexnet", 1, 2, simulate=False).export(path)
    data = json.loads(path.read_text())
    assert data["mesh"] is None and data["modules"] == {} and "no DTensor form" in data["why"]
    with pytest.raises(ModelError, match="no PyTorch form"):
        check_plan("stratopt.torch.models:mlp", path, 2)


def test_cli_check_plan_prints_the_table_and_json(tmp_path, capsys) -> None:
    path = tmp_path / "plan.json"
    entry = "stratopt.torch.models:transformer"
    assert (
        main(
            [
                "plan",
                entry,
                "--nodes",
                "1",
                "--gpus-per-node",
                "2",
                "--no-simulate",
                "--expressible",
                "torch",
                "--export",
                str(path),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["check-plan", entry, "--plan", str(path), "--world", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True and all(out["checks"].values()) and out["world"] == 2
    assert len(out["parameter_bytes"]["per_rank"]) == 2


_TIED = """
import torch


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(64, 32)
        self.body = torch.nn.Linear(32, 32)
        self.head = torch.nn.Linear(32, 64, bias=False)
        self.head.weight = self.embed.weight  # tied, as Gemma's and StarCoder2's heads are


    def forward(self, ids):
        return self.head(torch.relu(self.body(self.embed(ids))))


def model():
    return Tied(), (torch.randint(0, 64, (8, 4), generator=torch.Generator().manual_seed(0)),)
"""


def test_a_tied_head_is_sharded_with_its_embedding(tmp_path) -> None:
    """An output projection that reads the embedding's table: the importer marks it tied (one weight
    state, its owner's), the plan shards it with its owner, parallelize shards both in one FSDP group
    (two groups for one parameter is an error in FSDP), and check-plan compares the pair's collectives
    together (the group gathers once, at the first of them): FSDP on 2 processes computes one
    process's loss and gradients, holds the bytes and issues the priced collectives."""
    from stratopt.instances import load_entry_point

    source = tmp_path / "tied.py"
    source.write_text(_TIED)
    entry = f"{source}:model"
    graph = load_entry_point(entry)
    assert {op.name: op.attrs.get("tied") for op in graph.operators if op.attrs.get("params")}["head"] == "embed.weight"
    result = plan(entry, 1, 2, simulate=False, expressible="torch")
    fsdp = next(b for b in result.baselines if b.name == "fsdp")
    assert find_mesh(result.costing, fsdp.assignment, 2) == (2, 1)
    exported = ExportedPlan.of(dataclasses.replace(result, plan=fsdp))
    assert exported.modules["head"]["fsdp"] and exported.modules["embed"]["fsdp"]
    assert exported.modules["head"]["collectives"] == {"forward": {}, "backward": {}}
    report = check_plan(entry, exported, 2)
    assert report.ok, report.to_dict()["checks"]


_FAMILIES = """
import torch
from stratopt.importers.catalogue import tiny


def qwen2_moe():  # a shared expert beside the routed ones, with its own gate
    torch.manual_seed(0)
    return tiny("qwen2_moe", "causal-lm", "Qwen2MoeForCausalLM", batch=4, seq=32)


def glm4_moe():  # DeepSeek-V3's router (float32 copy of its weight, grouped choice), a shared expert
    torch.manual_seed(0)
    return tiny("glm4_moe", "causal-lm", "Glm4MoeForCausalLM", batch=4, seq=32)
"""


def test_other_mixture_of_experts_families_split_over_their_experts(tmp_path) -> None:
    """Expert parallelism runs each family's own experts forward on the local experts: Qwen2-MoE
    (a shared expert and its gate beside the routed experts) and GLM-4-MoE (DeepSeek-V3's router,
    which multiplies a float32 copy of its weight) on 1 x 2, every routed experts module split over
    its experts: one process's loss and gradients, the priced collectives."""
    pytest.importorskip("transformers")
    source = tmp_path / "families.py"
    source.write_text(_FAMILIES)
    cases = []
    for name in ("qwen2_moe", "glm4_moe"):
        entry = f"{source}:{name}"
        result = plan(entry, 1, 2, simulate=False, expressible="torch")
        split = dataclasses.replace(result.plan, assignment=expert_split(result, 2))
        exported = ExportedPlan.of(dataclasses.replace(result, plan=split))
        assert exported.mesh == (1, 2), exported.why
        assert any(e["tp"] == "expert" for e in exported.modules.values()), name
        cases.append((entry, exported))
    for (entry, _), report in zip(cases, check_plans(cases, 2, timeout=600), strict=True):
        assert report.ok, (entry, report.to_dict()["checks"])


def test_a_module_that_is_not_stacked_experts_is_a_one_line_error() -> None:
    """Splitting over the experts needs a module whose every parameter is stacked over them and an
    expert count the split divides: otherwise a one-line error naming the module."""
    torch = pytest.importorskip("torch")
    from stratopt.torch.apply import _stacked

    class Experts(torch.nn.Module):
        def __init__(self, count: int, rows: int) -> None:
            super().__init__()
            self.num_experts = count
            self.gate_up_proj = torch.nn.Parameter(torch.zeros(rows, 4, 2))

    params, count = _stacked("layers.0.mlp.experts", Experts(4, 4), 2, "devices")
    assert count == 4 and list(params) == ["gate_up_proj"]
    with pytest.raises(ModelError, match=r"'layers\.0\.mlp\.experts': 3 experts do not split over 2 devices"):
        _stacked("layers.0.mlp.experts", Experts(3, 3), 2, "devices")
    with pytest.raises(ModelError, match="not a mixture of experts' stacked experts"):
        _stacked("layers.0.mlp", Experts(4, 5), 2, "devices")


_FUSED = """
import torch


class Block(torch.nn.Module):
    def __init__(self, chunked):
        super().__init__()
        self.norm = torch.nn.LayerNorm(32)
        self.gate_up = torch.nn.Linear(32, 128)  # one weight for the gate and the up projection
        self.down = torch.nn.Linear(64, 32)
        self.chunked = chunked

    def forward(self, x):
        out = self.gate_up(self.norm(x))
        gate, up = out.chunk(2, dim=-1) if self.chunked else out.split(64, dim=-1)
        y = self.down(torch.nn.functional.silu(gate) * up)
        y += x  # in place on the row-parallel output, as Falcon adds its attention output
        return y


class Fused(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(False), Block(True)])
        self.head = torch.nn.Linear(32, 8)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def model():
    torch.manual_seed(0)
    return Fused(), (torch.randn(8, 16, 32, generator=torch.Generator().manual_seed(0)),)
"""


def test_a_fused_projection_splits_column_parallel_into_each_devices_share_of_every_piece(tmp_path) -> None:
    """A product whose output the model cuts into equal pieces (a fused gate and up projection,
    ``split`` in one block and ``chunk`` in the other; GPT-2's ``c_attn`` in the cases above) runs
    column-parallel with its split handed on: the weight's output features interleaved, so each
    device's output holds its share of both pieces and the model's own ``split`` cuts it at the
    local width (and the row-parallel output, added to in place, is the module's own tensor, not
    DTensor's view). Megatron's MLP on 1 x 2 and with FSDP on 2 x 2 (the fused weight sharded over its
    input features, its bias kept whole and all-reduced): one process's loss and gradients, the
    bytes and the collectives priced. The same plan with the interleaving dropped (a contiguous
    column split) computes another model, and the check says so."""
    source = tmp_path / "fused.py"
    source.write_text(_FUSED)
    entry = f"{source}:model"
    cases = {}
    for world in (2, 4):
        result = plan(entry, 1, world, simulate=False, expressible="torch")
        for strategy in result.baselines:
            if strategy.name in ("megatron-tp2", "megatron-tp2-fsdp") and strategy.name.endswith("fsdp") == (
                world == 4
            ):
                cases[world] = ExportedPlan.of(dataclasses.replace(result, plan=strategy))
    for world, exported in cases.items():
        for block in ("blocks.0", "blocks.1"):
            fused = exported.modules[f"{block}.gate_up"]
            assert (fused["tp"], fused["output"], fused["pieces"]) == ("colwise", "shard", 2), exported.why
            assert exported.modules[f"{block}.down"]["tp"] == "rowwise"
        assert exported.modules["blocks.0.gate_up"]["fsdp"] is (world == 4)
    contiguous = copy.deepcopy(cases[2])
    del contiguous.modules["blocks.1.gate_up"]["pieces"]  # the chunked block: each device two halves of its own
    reports = [*check_plans([(entry, cases[2]), (entry, contiguous)], 2, timeout=600)]
    reports += check_plans([(entry, cases[4])], 4, timeout=600)
    assert reports[0].ok and reports[2].ok, (reports[0].to_dict()["checks"], reports[2].to_dict()["checks"])
    assert reports[1].loss_error > 1e-3 and not reports[1].ok


def test_a_tied_weight_splits_one_way_over_the_tensor_parallel_devices(tmp_path) -> None:
    """The embedding's table and the output projection that reads it are one parameter with one
    placement: split over the width by the embedding (column-parallel) and over the input features
    by the projection (row-parallel) it is the same split, and ``parallelize`` ties the two
    distributed copies again (one process's loss and gradients, the table's bytes once). Split one
    way by one and another way (or not at all) by the other, the strategy has no PyTorch form, and
    the export says which two operators (Megatron's hand-written pattern on a tied decoder: before,
    it ran untied, the table's gradient 80% off); a search for a plan that runs tries again with both
    whole."""
    from stratopt.planning.again import unsplit
    from stratopt.planning.batch import batch_axes
    from stratopt.planning.torchplan import _config, style, untied
    from stratopt.problem import FORBIDDEN

    source = tmp_path / "tied.py"
    source.write_text(_TIED)
    entry = f"{source}:model"
    result = plan(entry, 1, 2, simulate=False, expressible="torch")
    costing = result.costing
    ops, batches = costing.graph.operators, batch_axes(costing.graph)

    def laid(**kinds: str) -> tuple[int, ...]:  # the rest whole
        out = []
        for v, op in enumerate(ops):
            out.append(
                next(
                    c
                    for c in range(len(costing.configs[v]))
                    if (
                        style(op, _config(costing, v, c), batches[op.name], 1, 2) == kinds[op.name]
                        if op.name in kinds
                        else max(_config(costing, v, c).values()) == 1
                    )
                    and not costing.is_sharded(v, c)
                )
            )
        return tuple(out)

    same = laid(embed="colwise", head="rowwise")
    assert untied(costing, same, 1, 2) == [] and find_mesh(costing, same, 2) == (1, 2)
    other = laid(embed="replicate", head="rowwise")
    assert untied(costing, other, 1, 2) == [0, 2]
    assert (
        find_mesh(costing, other, 2)
        == "operators embed and head share a weight and split it differently over 2 devices"
    )
    again = unsplit(costing, [list(costing.node_costs())], other, 1, 2)
    assert again is not None  # searched again with the table whole over the devices, for both
    for v in (0, 2):
        rows = [_config(costing, v, c) for c in range(len(costing.configs[v]))]
        whole = [all(n == 1 for a, n in row.items() if a not in batches[ops[v].name]) for row in rows]
        assert all((again[0][v][c] < FORBIDDEN) <= whole[c] for c in range(len(whole)))
        assert not all(whole) and any(again[0][v][c] < FORBIDDEN for c in range(len(whole)))
    exported = ExportedPlan.of(dataclasses.replace(result, plan=dataclasses.replace(result.plan, assignment=same)))
    assert (exported.modules["embed"]["tp"], exported.modules["head"]["tp"]) == ("colwise", "rowwise")
    report = check_plan(entry, exported, 2)
    assert report.ok, report.to_dict()["checks"]


def test_hsdp_shards_inside_each_node_and_runs_as_priced() -> None:
    """HSDP on 2 nodes of 2 (world 4): FSDP's plan with every sharded module sharded over its node's
    2 data-parallel devices instead of all 4 (a 2-D mesh, replicate x shard, cut from the plan's
    data-parallel dimension), each gradient shard all-reduced across the nodes: one process's loss
    and gradients, each rank holding half the weights, every collective as priced."""
    llama = "stratopt.importers.hf:llama"
    found = plan(llama, 2, 2, simulate=False, expressible="torch")
    fsdp = next(b for b in found.baselines if b.name == "fsdp")
    hybrid = dataclasses.replace(fsdp, assignment=twin_of(found.costing, fsdp.assignment, "hsdp"))
    exported = ExportedPlan.of(dataclasses.replace(found, plan=hybrid))
    sharded = [e for e in exported.modules.values() if e["fsdp"]]
    assert exported.mesh == (4, 1) and sharded and all(e["hsdp"] == 2 for e in sharded)
    assert all(e["collectives"]["backward"]["all_reduce"] == 1 for e in sharded)
    (report,) = check_plans([(llama, exported)], 4, timeout=600)
    assert report.ok and report.checks["parameter bytes"] and all(r["match"] for r in report.collectives)
    assert report.loss_error <= TOLERANCE and report.gradient_error <= TOLERANCE
