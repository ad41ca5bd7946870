"""Write seed 004's placement jobs to models/: the appendix example and the three networks on the
three device sets (stratopt.placement.jobs builds them).

Run after changing a builder:  python scripts/make_placement_jobs.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from stratopt.placement.jobs import DEVICE_SETS, JOBS, appendix, job

SOURCES = {
    "seed004-appendix": "seed 004 appendix: Figure 1a's graph, Table 5's costs, capacity 100, two CPU cores and a GPU",
    "vgg19": "VGG-19 layer graph (24 nodes as in seed 004), per-op-type costs (stratopt.placement.jobs)",
    "resnet50": "ResNet-50 layer graph (176 nodes as in seed 004), per-op-type costs (stratopt.placement.jobs)",
    "inception3": "Inception-v3 layer graph (311 nodes as in seed 004), per-op-type costs (stratopt.placement.jobs)",
}


def main() -> int:
    out = Path(__file__).resolve().parents[1] / "models"
    instances = [("seed004-appendix", appendix(), SOURCES["seed004-appendix"])]
    for network in JOBS:
        for devices in DEVICE_SETS:
            cpus, gpus = DEVICE_SETS[devices]
            instances.append(
                (f"{network}-{devices}", job(network, devices), f"{SOURCES[network]}; {cpus} CPU cores + {gpus} GPUs")
            )
    for name, inst, source in instances:
        data = inst.to_dict()
        data["name"] = name
        data["source"] = source
        path = out / f"{name}.json"
        path.write_text(json.dumps(data, separators=(",", ":")) + "\n", encoding="utf-8")
        print(
            f"{path.name:28s} {inst.num_nodes:4d} nodes {len(inst.edges):4d} edges {inst.num_devices:3d} devices {path.stat().st_size / 1024:8.1f} KiB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
