"""Doctests of the optional importers run only where their extras are installed."""


def _installed(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


collect_ignore = []
if not _installed("torch"):
    collect_ignore += ["src/stratopt/importers/pytorch.py", "tests/importers/models.py"]
if not _installed("onnx"):
    collect_ignore.append("src/stratopt/importers/onnxfile.py")
if not _installed("transformers"):
    collect_ignore.append("src/stratopt/importers/hf.py")
