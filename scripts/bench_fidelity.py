"""Predicted against measured training throughput: the step predictor on published runs.

``python scripts/bench_fidelity.py [FILE.csv] [--plot fidelity.png]`` (default: the 52 H100 runs in
``../shared/measurements``) prints, from the predictor's default calibration:

1. the fit on every row (``stratopt calibrate``'s least squares on log error), row by row, with
   the median and 90th-percentile absolute error and Spearman's rank correlation overall and
   within each model of 4 rows or more;
2. the held-out split: fitted on the rows with sequences of at most 4096 tokens, the error on
   the longer ones, which the fit never saw;
3. the shipped ``h100`` preset on every row;

and plots predicted against measured (log-log, one colour per model; hollow: held out).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT.parent / "shared" / "measurements" / "mpt-h100-bf16.csv"


def _figures(label: str, out: dict) -> None:
    by_model = ", ".join(f"{m} {rho:.2f}" for m, rho in out["spearman_by_model"].items() if rho is not None)
    print(
        f"| {label} | {100 * out['median_abs_error']:.1f}% | {100 * out['p90_abs_error']:.1f}% | "
        f"{out['spearman']:.3f} | {by_model} |"
    )


def main() -> None:
    from stratopt.machine import get_machine
    from stratopt.planning.calibrate import calibrate, predict_rows, read_measurements, summarise

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", default=str(DEFAULT))
    parser.add_argument("--plot", default=None, metavar="FILE.png")
    parser.add_argument("--split", type=int, default=4096, help="fit sequences up to this many tokens")
    args = parser.parse_args()
    print(f"machine: {platform.node() or 'vm'}: {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    rows = read_measurements(args.file)
    base = dataclasses.replace(get_machine("h100"), calibration=())  # the predictor's defaults
    fitted, whole = calibrate(rows, base)
    short = [r for r in rows if r.run.seq <= args.split]
    held = [r for r in rows if r.run.seq > args.split]
    fitted_short, _ = calibrate(short, base)
    on_fit = predict_rows(short, fitted_short)
    on_held = predict_rows(held, fitted_short)

    print(f"\n{len(rows)} rows of {Path(args.file).name}; fitted on all of them:\n")
    print("| model | seq | GPUs | recompute | micro-batch x accum | predicted | measured | error |")
    print("|---|---|---|---|---|---|---|---|")
    for r in predict_rows(rows, fitted):
        print(
            f"| {r['model']} | {r['seq_len']} | {r['gpus']} | {'yes' if r['recompute'] else 'no'} | "
            f"{r['micro_batch']} x {r['grad_accum']} | {r['predicted_tokens_per_s_per_gpu']:,.0f} | "
            f"{r['measured']:,.0f} | {100 * r['error']:+.1f}% |"
        )
    print("\n| fit | median abs error | p90 abs error | Spearman | Spearman within a model |")
    print("|---|---|---|---|---|")
    _figures(f"all {len(rows)} rows, fitted on them", whole)
    _figures(f"{len(short)} rows with seq <= {args.split}, fitted on them", summarise(on_fit))
    _figures(f"{len(held)} rows with seq > {args.split}, held out", summarise(on_held))
    _figures("the shipped h100 preset, all rows", summarise(predict_rows(rows, get_machine("h100"))))
    print("\nparameters fitted on all rows: " + ", ".join(f"{k} {v:.4g}" for k, v in whole["calibration"].items()))
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 6))
        models = sorted({r["model"] for r in on_fit + on_held}, key=lambda m: -len(m))
        colours = {m: plt.cm.tab10(i % 10) for i, m in enumerate(models)}
        for rows_, hollow in ((on_fit, False), (on_held, True)):
            for r in rows_:
                c = colours[r["model"]]
                ax.scatter(r["measured"], r["predicted_tokens_per_s_per_gpu"], s=30,
                           facecolors="none" if hollow else c, edgecolors=c)  # fmt: skip
        low = min(r["measured"] for r in on_fit + on_held) / 1.5
        high = max(r["measured"] for r in on_fit + on_held) * 1.5
        ax.plot([low, high], [low, high], color="grey", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("measured tokens/s per GPU")
        ax.set_ylabel("predicted tokens/s per GPU")
        ax.set_title(f"fitted on seq <= {args.split} (filled), held out (hollow)")
        for m in models:
            ax.scatter([], [], color=colours[m], label=m)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
