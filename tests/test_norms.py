"""The layer norm a width split runs (:mod:`stratopt.torch.norms`): on the whole width it is
PyTorch's ``nn.LayerNorm``, forward and backward, with and without its weights; split over two
processes it is checked as a plan (``tests/test_torch_plans.py``, GPT-2's width case)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from stratopt.errors import ModelError  # noqa: E402
from stratopt.torch.norms import _WidthLayerNorm, width_layer_norm  # noqa: E402


@pytest.mark.parametrize("affine,bias", [(True, True), (True, False), (False, False)])
def test_the_width_layer_norm_on_one_device_is_pytorchs(affine: bool, bias: bool) -> None:
    torch.manual_seed(0)
    norm = torch.nn.LayerNorm(24, eps=1e-5, elementwise_affine=affine, bias=bias, dtype=torch.float64)
    if affine:  # weights away from their initial ones, so that a gradient that ignores them shows
        with torch.no_grad():
            norm.weight.normal_()
            if bias:
                norm.bias.normal_()
    # a mean far from zero beside its spread, as a residual stream's tokens can have
    x = (3.0 + torch.randn(3, 5, 24, dtype=torch.float64)).requires_grad_()
    grad = torch.randn(3, 5, 24, dtype=torch.float64)
    ours = _WidthLayerNorm.apply(x, norm.weight, norm.bias, norm.eps, 24, None)
    (ours * grad).sum().backward()
    mine = [x.grad.clone()] + [p.grad.clone() for p in norm.parameters()]
    x.grad = None
    norm.zero_grad()
    theirs = norm(x)
    (theirs * grad).sum().backward()
    assert torch.allclose(ours, theirs, rtol=1e-10, atol=1e-12)
    for a, b in zip(mine, [x.grad] + [p.grad for p in norm.parameters()], strict=True):
        assert torch.allclose(a, b, rtol=1e-9, atol=1e-11)


def test_a_width_norm_refuses_a_tensor_not_split_over_its_width() -> None:
    norm = torch.nn.LayerNorm(8)
    with pytest.raises(ModelError, match="split over its last dimension, not Tensor"):
        width_layer_norm(norm, torch.randn(2, 8))
