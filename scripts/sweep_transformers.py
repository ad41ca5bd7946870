"""Import every architecture of the installed ``transformers`` that users train, built tiny.

``python scripts/sweep_transformers.py [--out sweep.md] [--only TYPE,..] [--timeout S]`` builds each
model class of the causal-LM, masked-LM, seq2seq and image-classification auto mappings from its own
configuration shrunk (:func:`stratopt.importers.catalogue.tiny`), runs it once on the CPU, imports
it, compares the flops on its priced products with PyTorch's count, and solves it at p = 8. Each
architecture runs in its own process (a hang or a crash is the row's, not the sweep's), at most
``--timeout`` seconds. Prints one row per architecture and a summary; writes the table as Markdown.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import sys
import time
from pathlib import Path


def _one(args: tuple[str, str, str], send) -> None:
    from stratopt.importers.catalogue import import_one

    try:
        send.send(import_one(*args))
    except BaseException as exc:
        send.send({"model_type": args[0], "task": args[1], "class": args[2], "status": "failed", "reason": repr(exc)})


def run(arch: tuple[str, str, str], timeout: float) -> dict:
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    proc = context.Process(target=_one, args=(arch, send), daemon=True)
    proc.start()
    row = receive.recv() if receive.poll(timeout) else None
    proc.join(1.0)
    if proc.is_alive():
        proc.kill()
    if row is None:
        reason = f"no answer in {timeout:g} s" if proc.exitcode is None else f"the process died (exit {proc.exitcode})"
        row = {"model_type": arch[0], "task": arch[1], "class": arch[2], "status": "skipped", "reason": reason}
    return row


def main() -> None:
    from stratopt.importers.catalogue import architectures

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="sweep.md", metavar="FILE.md")
    parser.add_argument("--json", default=None, metavar="FILE.jsonl", help="also write the rows as JSON lines")
    parser.add_argument("--only", default=None, metavar="TYPE,..", help="these model types only")
    parser.add_argument("--timeout", type=float, default=30.0, metavar="S")
    args = parser.parse_args()
    import transformers

    archs = architectures()
    if args.only:
        wanted = set(args.only.split(","))
        archs = [a for a in archs if a[0] in wanted]
    print(f"machine: {platform.node() or 'vm'}: {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
          f"transformers {transformers.__version__}; {len(archs)} architectures", flush=True)  # fmt: skip
    started = time.perf_counter()
    rows = []
    for i, arch in enumerate(archs, start=1):
        row = run(arch, args.timeout)
        rows.append(row)
        share = row.get("share")
        what = f"{share:.2%} of the flops, {row.get('solve')}" if share is not None else row.get("reason", "")
        print(f"[{i}/{len(archs)}] {arch[0]} {arch[1]} ({arch[2]}): {row['status']}; {what}", flush=True)
    took = time.perf_counter() - started
    ran = [r for r in rows if r["status"] != "skipped"]
    good = [r for r in ran if r["status"] == "imported" and 0.99 <= (r.get("share") or 0) <= 1.01
            and r.get("solve") in ("optimal", "feasible")]  # fmt: skip
    summary = (
        f"{len(rows)} architectures in {took:.0f} s: {len(ran)} built and ran on the CPU, of which {len(good)} "
        f"({len(good) / max(len(ran), 1):.2%}) import with 99-101% of PyTorch's flops on priced products and solve "
        f"at p = 8; {sum(r['status'] == 'failed' for r in rows)} failed; {len(rows) - len(ran)} skipped"
    )
    print(summary)
    lines = [f"{summary}.", "", "| architecture | task | class | status | flops share | operators | unmapped | import s | p = 8 | why |",
             "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        share = f"{r['share']:.2%}" if r.get("share") is not None else "-"
        lines.append(
            f"| {r['model_type']} | {r['task']} | {r['class']} | {r['status']} | {share} | {r.get('operators', '-')} | "
            f"{r.get('unmapped') or '-'} | {r.get('import_s', 0):.2f} | {r.get('solve', '-')} | "
            f"{(r.get('reason') or '').replace('|', '/')} |"
        )
    Path(args.out).write_text("\n".join(lines) + "\n")
    if args.json:
        Path(args.json).write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
