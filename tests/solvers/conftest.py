"""Fixtures shared by the solver tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def rows_not_kept(monkeypatch):
    """``lagrange`` without the bound that keeps the usage rows (:mod:`stratopt.solvers.lagrange.kept`),
    which under a time limit takes the relaxation's place on small problems: for the tests of the
    relaxation, the message bound and the runs' schedule."""
    from stratopt.solvers.lagrange import kept

    monkeypatch.setattr(kept, "KEPT_MAX_TERMS", 0)


@pytest.fixture
def search_never_closes(monkeypatch):
    """``lagrange``'s search without its early stop where the bound meets the best answer (on the
    small problems of the schedule's tests it often does, after a run or two): for the tests that
    count the runs the search makes."""
    from stratopt.solvers.lagrange import solver

    monkeypatch.setattr(solver._Search, "closed", lambda self: False)
