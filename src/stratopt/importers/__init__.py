"""Bring your own model: operator graphs from PyTorch modules and ONNX files.

:func:`from_torch` (extra ``torch``) traces an ``nn.Module`` with torch.fx and shape propagation
(running the model under the eager tracer of :mod:`.trace` where fx fails: third-party code such as
Hugging Face models, and models on the ``meta`` device); :mod:`.hf` builds Hugging Face models from
configurations; :func:`from_onnx` (extra ``onnx``) reads a model file with ONNX
shape inference. Both map nodes to stratopt operators the same way (:mod:`.common`), so a model and
its ONNX export import to the same operators and shapes. :func:`flops` counts a graph's dense
forward flops.
"""

from stratopt.importers.common import UnmappedOperatorWarning, describe, flops
from stratopt.importers.onnxfile import from_onnx
from stratopt.importers.pytorch import from_torch

__all__ = ["UnmappedOperatorWarning", "describe", "flops", "from_onnx", "from_torch"]
