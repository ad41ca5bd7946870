"""Python entry points: ``module:function`` or ``file.py:function`` returning an operator graph or a
PyTorch model and its example inputs, with keyword arguments after commas where the function takes
them (``stratopt.importers.hf:llama,layers=4``); and Hugging Face configurations,
``hf:PATH,seq=S,batch=B`` (:func:`stratopt.importers.hf.from_config`), which give a model and its
inputs the same way."""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

from stratopt.errors import ModelError
from stratopt.graph.ir import Graph
from stratopt.importers import from_torch
from stratopt.importers.common import first_line
from stratopt.importers.hf import from_config, is_config_spec

_ENTRY_POINT = re.compile(
    r"^(?P<module>[A-Za-z_][\w.]*|[^:,]+\.py):(?P<function>[A-Za-z_]\w*)(?P<options>(?:,[A-Za-z_]\w*=[^,=]+)*)$"
)


def _value(text: str) -> Any:
    """A keyword argument's value: an integer, a number, true or false, else the text itself.

    >>> [_value(x) for x in ("4", "0.5", "true", "gelu")]
    [4, 0.5, True, 'gelu']
    """
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def is_entry_point(text: str) -> bool:
    """Whether ``text`` names a Python entry point: ``package.module:function`` or ``file.py:function``,
    or a Hugging Face configuration (``hf:PATH...``).

    >>> is_entry_point("stratopt.importers.hf:llama"), is_entry_point("models/gpt.json")
    (True, False)
    >>> is_entry_point("stratopt.importers.hf:llama,layers=4"), is_entry_point("pkg.models:llama,4")
    (True, False)
    """
    return is_config_spec(text) or _ENTRY_POINT.match(text) is not None


def load_entry_point(text: str) -> Graph:
    """The operator graph of a Python entry point (see :func:`is_entry_point`).

    The function is called with no arguments and returns either an operator :class:`Graph` or a
    pair ``(model, example_inputs)``, a PyTorch ``nn.Module`` and the tuple of tensors to run it on
    (on the ``meta`` device for a model larger than memory), which :func:`stratopt.importers.from_torch`
    imports. Every failure is a :class:`ModelError` naming the entry point.
    """
    if is_config_spec(text):
        model, inputs = from_config(text)
        return from_torch(model, inputs, name=_config_name(text))
    made = call_entry_point(text)
    function = text.rpartition(":")[2].partition(",")[0]
    called = f"{function}() returned" if callable(getattr(_module_of(text), function, None)) else f"{function} is a"
    if isinstance(made, Graph):
        return made
    if isinstance(made, tuple) and len(made) == 2:
        model, inputs = made
        return from_torch(model, inputs, name=function)
    raise ModelError(
        f"{text}: {called} {type(made).__name__}; "
        "expected an operator Graph or (model, example_inputs), or a function returning one"
    )


def call_entry_point(text: str, *, device: str = "meta") -> Any:
    """What the entry point ``text`` gives: its function called with the keyword arguments ``text``
    names (none: no arguments), or the object (a Hugging Face configuration's model and inputs, built
    on ``device``); a failure to import or call it is a :class:`ModelError` naming it."""
    if is_config_spec(text):
        return from_config(text, device=device)
    match = _ENTRY_POINT.match(text)
    if match is None:
        raise ModelError(f"{text}: not an entry point (expected module:function or file.py:function)")
    where, function = match["module"], match["function"]
    options = dict(item.split("=", 1) for item in match["options"].split(",")[1:])
    kwargs = {key.strip(): _value(value.strip()) for key, value in options.items()}
    try:
        if where.endswith(".py"):
            path = Path(where)
            if not path.is_file():
                raise ModelError(f"{text}: no such file {where}")
            spec = importlib.util.spec_from_file_location(f"_stratopt_entry_{path.stem}", path)
            if spec is None or spec.loader is None:
                raise ModelError(f"{text}: cannot load {where} as Python")
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except ModelError:
        raise
    except Exception as exc:  # the user's module: any error on import is theirs to see, in one line
        raise ModelError(f"{text}: cannot import {where} ({type(exc).__name__}: {first_line(exc)})") from None
    target = getattr(module, function, None)
    if target is None:
        raise ModelError(f"{text}: {where} has no attribute {function!r}")
    if kwargs and not callable(target):
        raise ModelError(f"{text}: {function} is not a function; it takes no keyword arguments")
    try:
        return target(**kwargs) if callable(target) else target
    except ModelError:
        raise
    except Exception as exc:
        raise ModelError(f"{text}: calling {function}() failed ({type(exc).__name__}: {first_line(exc)})") from None


def _module_of(text: str) -> Any:
    where = text.partition(",")[0].rpartition(":")[0]
    stem = Path(where).stem
    return sys.modules.get(f"_stratopt_entry_{stem}" if where.endswith(".py") else where)


def _config_name(spec: str) -> str:
    """A configuration's graph name: its folder's (the folder holding a config.json)."""
    path = Path(spec[3:].split(",")[0]).expanduser()
    return (path.parent if path.name == "config.json" else path).name or "hf-model"
