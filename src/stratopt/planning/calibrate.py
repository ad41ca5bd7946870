"""Measured runs: reading them, predicting them, and fitting a machine's free parameters to them.

A measurements file is CSV with one run per row and the columns of
``../shared/measurements/mpt-h100-bf16.csv``: ``model, layers, d_model, heads, vocab, seq_len,
gpus, gpus_per_node, strategy, recompute, micro_batch, grad_accum, tokens_per_s_per_gpu`` (other
columns are kept but not needed). :func:`predict_rows` predicts every row;
:func:`calibrate` fits the :class:`~stratopt.machine.Calibration` by least squares on
the log of predicted over measured throughput (``scipy.optimize.least_squares``).
"""

from __future__ import annotations

import csv
import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stratopt.errors import ModelError
from stratopt.graph.decoder import Decoder
from stratopt.machine import Calibration, Machine, calibration_of
from stratopt.planning.predict import Run, predict

__all__ = [
    "FITTED",
    "Measured",
    "calibrate",
    "calibrate_file",
    "predict_file",
    "predict_rows",
    "read_measurements",
    "summarise",
]

_INTS = ("layers", "d_model", "heads", "vocab", "seq_len", "gpus", "gpus_per_node", "micro_batch", "grad_accum")
_NEEDED = ("model", *_INTS, "strategy", "recompute", "tokens_per_s_per_gpu")

#: The parameters :func:`calibrate` fits, with their bounds (each field's ``fit`` metadata).
FITTED: dict[str, tuple[float, float]] = {
    f.name: f.metadata["fit"] for f in dataclasses.fields(Calibration) if "fit" in f.metadata
}


@dataclass(frozen=True)
class Measured:
    """One measured run: the model, how it ran, and its throughput (tokens per second per GPU)."""

    model: Decoder
    run: Run
    tokens_per_s_per_gpu: float
    row: dict[str, str]


def read_measurements(path: str) -> list[Measured]:
    """The rows of a measurements file; a missing column, a value that is not a number, an
    unknown strategy or an impossible run is a one-line :class:`ModelError` naming the row (its
    line in the file) and the column."""
    try:
        with open(path, newline="") as fh:
            reader = csv.DictReader(fh)
            header = reader.fieldnames or []
            missing = [c for c in _NEEDED if c not in header]
            if missing:
                raise ModelError(f"{path}: no column {missing[0]!r} (needed: {', '.join(_NEEDED)})")
            rows = list(reader)
    except OSError as exc:
        raise ModelError(f"{path}: cannot read ({exc.strerror})") from None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise ModelError(f"{path}: not CSV ({exc})") from None
    if not rows:
        raise ModelError(f"{path}: no rows")
    out = []
    for line, row in enumerate(rows, start=2):
        where = f"{path}, row {line - 1} (line {line})"
        values: dict[str, Any] = {}
        for col in _INTS:
            text = (row.get(col) or "").strip()
            try:
                values[col] = int(text)
            except ValueError:
                raise ModelError(f"{where}: column {col!r} must be an integer, got {text!r}") from None
            if values[col] < 1:  # sizes and counts: a run of none is no run
                raise ModelError(f"{where}: column {col!r} must be a positive integer, got {text!r}")
        if values["d_model"] % values["heads"]:
            raise ModelError(f"{where}: column 'heads' ({values['heads']}) must divide d_model ({values['d_model']})")
        text = (row.get("tokens_per_s_per_gpu") or "").strip()
        try:
            measured = float(text)
        except ValueError:
            raise ModelError(f"{where}: column 'tokens_per_s_per_gpu' must be a number, got {text!r}") from None
        if not measured > 0 or not math.isfinite(measured):
            raise ModelError(f"{where}: column 'tokens_per_s_per_gpu' must be positive, got {text!r}")
        recompute = (row.get("recompute") or "").strip().lower()
        if recompute not in ("true", "false"):
            raise ModelError(f"{where}: column 'recompute' must be true or false, got {recompute!r}")
        strategy = (row.get("strategy") or "").strip()
        gpus, per_node = values["gpus"], values["gpus_per_node"]
        if per_node < 1 or gpus % per_node:
            raise ModelError(f"{where}: column 'gpus' ({gpus}) must be a whole number of nodes of {per_node}")
        try:
            decoder = Decoder(row["model"], values["layers"], values["d_model"], values["heads"], values["vocab"])
            run = Run(
                values["seq_len"], gpus // per_node, per_node, strategy, values["micro_batch"], values["grad_accum"],
                recompute == "true",
            )  # fmt: skip
        except ModelError as exc:
            column = "strategy" if "strategy" in str(exc) else "gpus_per_node"
            raise ModelError(f"{where}: column {column!r}: {exc}") from None
        out.append(Measured(decoder, run, measured, dict(row)))
    return out


def predict_rows(rows: Sequence[Measured], machine: Machine) -> list[dict[str, Any]]:
    """Each row predicted on ``machine``: the prediction's figures beside the measured
    throughput and the relative error (predicted / measured - 1)."""
    out = []
    for r in rows:
        p = predict(r.model, r.run, machine)
        out.append(
            {
                "model": r.model.name,
                "seq_len": r.run.seq,
                "gpus": r.run.gpus,
                "strategy": r.run.strategy,
                "recompute": r.run.recompute,
                "micro_batch": r.run.micro_batch,
                "grad_accum": r.run.grad_accum,
                "predicted_tokens_per_s_per_gpu": p.tokens_per_s_per_gpu,
                "measured": r.tokens_per_s_per_gpu,
                "error": p.tokens_per_s_per_gpu / r.tokens_per_s_per_gpu - 1.0,
                "mfu": p.mfu,
                "hfu": p.hfu,
                "memory_gb": p.memory / 1e9,
                "fits": p.fits,
            }
        )
    return out


def summarise(predicted: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Median and 90th-percentile absolute error, Spearman's rank correlation of predicted and
    measured over all rows and within each model with 4 rows or more."""
    from scipy.stats import spearmanr

    errors = np.abs([r["error"] for r in predicted])

    def rank(rows: Sequence[dict[str, Any]]) -> float | None:
        if len(rows) < 2:
            return None
        rho = spearmanr([r["predicted_tokens_per_s_per_gpu"] for r in rows], [r["measured"] for r in rows])[0]
        return None if math.isnan(rho) else float(rho)

    by_model: dict[str, list[dict[str, Any]]] = {}
    for r in predicted:
        by_model.setdefault(r["model"], []).append(r)
    return {
        "median_abs_error": float(np.median(errors)),
        "p90_abs_error": float(np.percentile(errors, 90)),
        "spearman": rank(predicted),
        "spearman_by_model": {m: rank(rows) for m, rows in by_model.items() if len(rows) >= 4},
    }


def calibrate(
    rows: Sequence[Measured], machine: Machine, *, progress: Callable[[str], None] | None = None
) -> tuple[Machine, dict[str, Any]]:
    """``machine`` with the :data:`FITTED` parameters of its calibration fitted to ``rows``
    (least squares on log(predicted / measured), from the machine's current calibration), and a
    summary of the fit: its cost, the parameters, and :func:`summarise` of the fitted rows."""
    from scipy.optimize import least_squares

    if not rows:
        raise ModelError("calibrate: no measured rows to fit")
    names = list(FITTED)
    start = calibration_of(machine)
    low = np.array([FITTED[n][0] for n in names])
    high = np.array([FITTED[n][1] for n in names])
    x0 = np.clip([getattr(start, n) for n in names], low, high)
    measured = np.log([r.tokens_per_s_per_gpu for r in rows])

    def with_params(x: np.ndarray) -> Machine:
        calibration = dataclasses.replace(start, **{n: float(v) for n, v in zip(names, x, strict=True)})
        return dataclasses.replace(machine, calibration=tuple(sorted(calibration.to_dict().items())))

    def residuals(x: np.ndarray) -> np.ndarray:
        m = with_params(x)
        return np.log([predict(r.model, r.run, m).tokens_per_s_per_gpu for r in rows]) - measured

    first = residuals(x0)
    if not np.all(np.isfinite(first)):
        r = rows[int(np.flatnonzero(~np.isfinite(first))[0])]
        raise ModelError(
            f"calibrate: the fit cannot start: {r.model.name} (seq {r.run.seq}, {r.run.gpus} GPUs, {r.run.strategy}) "
            f"is predicted no finite throughput from {machine.name}'s calibration"
        )
    try:
        fit = least_squares(residuals, x0, bounds=(low, high), x_scale="jac", max_nfev=400)
    except ValueError as exc:  # scipy refuses what it cannot fit: say why in one line
        raise ModelError(f"calibrate: the fit cannot run: {exc}") from None
    fitted = with_params(fit.x)
    if progress is not None:
        progress(f"calibrate: {len(rows)} rows, {fit.nfev} evaluations, cost {fit.cost:.4g}")
    summary = {"rows": len(rows), "cost": float(fit.cost), "calibration": dict(fitted.calibration)}
    summary.update(summarise(predict_rows(rows, fitted)))
    return fitted, summary


def predict_file(path: str, machine: Machine) -> dict[str, Any]:
    """What ``stratopt predict --measurements FILE`` prints: every row predicted
    (:func:`predict_rows`, in file order) and :func:`summarise` of them."""
    predicted = predict_rows(read_measurements(path), machine)
    return {"machine": machine.name, "rows": predicted, **summarise(predicted)}


def calibrate_file(
    path: str, machine: Machine, *, fit_seq_max: int | None = None, progress: Callable[[str], None] | None = None
) -> tuple[Machine, dict[str, Any]]:
    """What ``stratopt calibrate FILE`` does: the rows of ``path`` (those with ``seq_len`` at most
    ``fit_seq_max`` when given) fitted by :func:`calibrate`; with ``fit_seq_max``, the summary also
    holds the rows left out, predicted by the fitted machine (``"held_out"``)."""
    rows = read_measurements(path)
    fit = [r for r in rows if fit_seq_max is None or r.run.seq <= fit_seq_max]
    held = [r for r in rows if r not in fit]
    fitted, summary = calibrate(fit, machine, progress=progress)
    summary["fitted_rows"] = predict_rows(fit, fitted)
    if held:
        predicted = predict_rows(held, fitted)
        summary["held_out"] = {"rows": predicted, **summarise(predicted)}
    return fitted, summary
