"""Doctests of the optional importers run only where their extras are installed."""

from importlib.util import find_spec

collect_ignore = []
if find_spec("torch") is None:
    collect_ignore.append("src/stratopt/importers/pytorch.py")
    collect_ignore.append("tests/importers/models.py")
if find_spec("onnx") is None:
    collect_ignore.append("src/stratopt/importers/onnxfile.py")
