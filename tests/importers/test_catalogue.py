"""The transformers catalogue on a CI-sized subset: families the tests never named import from
their own configurations, shrunk, with every flop on priced products and an exact solve at p = 8."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from stratopt.importers.catalogue import architectures, import_one

SUBSET = [
    ("opt", "causal-lm", "OPTForCausalLM"),
    ("gpt_neox", "causal-lm", "GPTNeoXForCausalLM"),
    ("qwen2", "causal-lm", "Qwen2ForCausalLM"),
    ("phi", "causal-lm", "PhiForCausalLM"),
    ("roberta", "masked-lm", "RobertaForMaskedLM"),
    ("bart", "seq2seq", "BartForConditionalGeneration"),
    ("mobilenet_v2", "image-classification", "MobileNetV2ForImageClassification"),
    ("convnext", "image-classification", "ConvNextForImageClassification"),
    ("longformer", "masked-lm", "LongformerForMaskedLM"),  # sliding windows through as_strided
    ("longt5", "seq2seq", "LongT5ForConditionalGeneration"),  # einsum equations with '...'
    ("mamba", "causal-lm", "MambaForCausalLM"),  # a state-space block: conv1d, W @ x, a scan
    # latent attention and group-limited routing, sized through their own attributes; the sparse
    # attention indexer's products broadcast over the batch
    ("deepseek_v32", "causal-lm", "DeepseekV32ForCausalLM"),
    ("gpt_oss", "causal-lm", "GptOssForCausalLM"),  # experts with biases beside their weights
    ("llama4", "causal-lm", "Llama4ForCausalLM"),  # a multimodal configuration: its text part
]


def test_the_catalogue_lists_the_task_groups() -> None:
    """Every task group is represented, and the subset below is in the catalogue."""
    found = architectures()
    assert {task for _, task, _ in found} == {"causal-lm", "masked-lm", "seq2seq", "image-classification"}
    assert set(SUBSET) <= set(found)


@pytest.mark.parametrize("arch", SUBSET, ids=lambda a: f"{a[0]}-{a[1]}")
def test_subset_imports_whole(arch) -> None:
    """Built tiny, run, imported without an unmapped operator, 99-101% of PyTorch's flops on
    priced products, solved at p = 8."""
    row = import_one(*arch)
    assert row["status"] == "imported", row.get("reason")
    assert row["unmapped"] == "" and 0.99 <= row["share"] <= 1.01
    assert row["solve"] in ("optimal", "feasible")


def test_a_model_that_cannot_be_built_is_skipped_with_its_reason() -> None:
    """An architecture the configuration cannot build is a row that says why, not a traceback."""
    row = import_one("no-such-model", "causal-lm", "NoSuchModelForCausalLM")
    assert row["status"] == "skipped" and row["reason"].startswith("build: ")
