"""Refactorings keep answers: zoo and case-bank optima equal those recorded before them.

``tests/data/unchanged.json`` was written by ``scripts/check_unchanged.py record`` on the code before
the solver-driver refactoring; the script's check mode also compares the README's command outputs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scripts.check_unchanged import case_optima, zoo_optima

RECORDED = json.loads((Path(__file__).parent / "data" / "unchanged.json").read_text())


def test_zoo_optima_unchanged() -> None:
    """Every network's DP optimum at p = 4 and 8 under both profiles is the recorded one."""
    now = zoo_optima()
    assert now.keys() == RECORDED["zoo"].keys()
    for key, value in now.items():
        assert value == pytest.approx(RECORDED["zoo"][key], rel=1e-12), key


def test_case_bank_optima_unchanged() -> None:
    """Every case-bank optimum, re-derived by brute force, is the recorded one."""
    assert case_optima() == RECORDED["cases"]
