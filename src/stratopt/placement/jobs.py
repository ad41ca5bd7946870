"""Built-in placement jobs: seed 004's appendix example and three image networks as layer graphs.

The networks follow the sizes seed 004 reports (VGG-19 24 nodes, ResNet-50 176, Inception-v3 311);
how each count comes about is in its builder. Node costs depend only on the operator type and the
device kind, as in the paper's Table 4 (its costs are "synthetic ... only relative cost of each
operation is important"). Table 4's four operators keep its CPU:GPU numbers, read as milliseconds
and written in microseconds; the other types are ours, chosen in the same spirit (dense compute
faster on the GPU, small memory-bound operators no faster there, concatenation slower):

==========  ========  ========  ==================================================
operator    CPU (us)  GPU (us)  why
==========  ========  ========  ==================================================
conv          4000      2000    Table 4 (CV 4 / 2)
maxpool       6000      5000    Table 4 (MP 6 / 5)
avgpool       1000      3000    Table 4 (AP 1 / 3)
concat        5000      7000    Table 4 (CC 5 / 7)
fc            3000      1000    a GEMM: like conv, the GPU's advantage a little larger
batchnorm     1500      1000    memory-bound, a modest GPU advantage
relu           500       500    elementwise: launch cost on the GPU eats its bandwidth edge
add            500       500    elementwise, as relu
softmax        500       700    small and reduction-bound, as concat
input          100       300    the batch is in host memory; the GPU pays the copy
==========  ========  ========  ==================================================

Edges carry the producer's activation in bytes (batch 32, float32), so a bandwidth can be added
(transfers are free by default, as in the paper). A node's memory is its output activation plus its
weights; GPUs have 12 GB (a 2017 Titan X / half a K80), each CPU core 16 GB of host memory.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from stratopt.placement.instance import Device, PlacementInstance

__all__ = ["DEVICE_SETS", "JOBS", "OP_COSTS", "appendix", "device_set", "job"]

#: (CPU, GPU) microseconds per operator type.
OP_COSTS: dict[str, tuple[float, float]] = {
    "conv": (4000, 2000),
    "maxpool": (6000, 5000),
    "avgpool": (1000, 3000),
    "concat": (5000, 7000),
    "fc": (3000, 1000),
    "batchnorm": (1500, 1000),
    "relu": (500, 500),
    "add": (500, 500),
    "softmax": (500, 700),
    "input": (100, 300),
}

#: name -> (CPU cores, GPUs): seed 004's three physical topologies.
DEVICE_SETS: dict[str, tuple[int, int]] = {"small": (2, 1), "medium": (20, 10), "large": (40, 20)}

BATCH = 32
FLOAT_BYTES = 4
GPU_MEMORY = 12e9
CPU_MEMORY = 16e9


def device_set(name: str) -> list[Device]:
    """The CPU cores (``cpu0``...) then the GPUs (``gpu0``...) of a named device set."""
    cpus, gpus = DEVICE_SETS[name]
    return [Device(f"cpu{i}", "cpu", CPU_MEMORY) for i in range(cpus)] + [
        Device(f"gpu{i}", "gpu", GPU_MEMORY) for i in range(gpus)
    ]


def appendix() -> PlacementInstance:
    """Seed 004's appendix example: five nodes (Figure 1a: 1 -> 2 -> {3, 4} -> 5), two CPU
    cores and a GPU, the costs of its Table 5, capacity 100, free transfers."""
    devices = [Device("core1", "cpu"), Device("core2", "cpu"), Device("gpu1", "gpu")]
    cost = [[4, 4, 2], [6, 6, 5], [1, 1, 3], [4, 4, 2], [5, 5, 7]]
    ops = ["conv", "maxpool", "avgpool", "conv", "concat"]
    edges = [
        ("node1", "node2", 0),
        ("node2", "node3", 0),
        ("node2", "node4", 0),
        ("node3", "node5", 0),
        ("node4", "node5", 0),
    ]
    return PlacementInstance.build(
        devices=devices,
        nodes=[f"node{j}" for j in range(1, 6)],
        ops=ops,
        cost=cost,
        edges=edges,
        capacity=100,
        name="appendix",
    )


class _Net:
    """Records a layer graph while tracking activation shapes (channels, height, width)."""

    def __init__(self) -> None:
        self.nodes: list[tuple[str, str, list[str], float]] = []  # name, op, inputs, weight bytes
        self.shape: dict[str, tuple[int, int, int]] = {}

    def add(self, name: str, op: str, inputs: list[str], shape: tuple[int, int, int], weights: float = 0.0) -> str:
        assert name not in self.shape, name
        self.nodes.append((name, op, inputs, weights))
        self.shape[name] = shape
        return name

    def conv(self, name: str, x: str, cout: int, k: tuple[int, int] | int, stride: int = 1, same: bool = True) -> str:
        kh, kw = (k, k) if isinstance(k, int) else k
        c, h, w = self.shape[x]
        if same:
            oh, ow = math.ceil(h / stride), math.ceil(w / stride)
        else:
            oh, ow = (h - kh) // stride + 1, (w - kw) // stride + 1
        return self.add(name, "conv", [x], (cout, oh, ow), kh * kw * c * cout * FLOAT_BYTES)

    def pool(self, name: str, op: str, x: str, k: int, stride: int, same: bool = False) -> str:
        c, h, w = self.shape[x]
        oh, ow = (
            (math.ceil(h / stride), math.ceil(w / stride)) if same else ((h - k) // stride + 1, (w - k) // stride + 1)
        )
        return self.add(name, op, [x], (c, oh, ow))

    def same_shape(self, name: str, op: str, xs: list[str]) -> str:
        return self.add(
            name, op, xs, self.shape[xs[0]], 2 * self.shape[xs[0]][0] * FLOAT_BYTES if op == "batchnorm" else 0.0
        )

    def concat(self, name: str, xs: list[str]) -> str:
        _, h, w = self.shape[xs[0]]
        return self.add(name, "concat", xs, (sum(self.shape[x][0] for x in xs), h, w))

    def fc(self, name: str, x: str, out: int) -> str:
        c, h, w = self.shape[x]
        return self.add(name, "fc", [x], (out, 1, 1), c * h * w * out * FLOAT_BYTES)

    def instance(self, devices: list[Device], name: str) -> PlacementInstance:
        kinds = [d.kind for d in devices]
        names: list[str] = []
        ops: list[str] = []
        cost: list[list[float]] = []
        memory: list[float] = []
        edges: list[tuple[str, str, float]] = []
        for node, op, inputs, weights in self.nodes:
            cpu, gpu = OP_COSTS[op]
            names.append(node)
            ops.append(op)
            cost.append([cpu if k == "cpu" else gpu for k in kinds])
            memory.append(_bytes(self.shape[node]) + weights)
            edges.extend((x, node, _bytes(self.shape[x])) for x in inputs)
        return PlacementInstance.build(
            devices=devices, nodes=names, ops=ops, cost=cost, edges=edges, node_memory=memory, name=name
        )


def _bytes(shape: tuple[int, int, int]) -> float:
    c, h, w = shape
    return float(BATCH * c * h * w * FLOAT_BYTES)


def _vgg19() -> _Net:
    """24 nodes: 16 convolutions (ReLU fused), 5 max-pools, 3 fully connected layers (the softmax
    fused into the last); a chain. The image enters the first convolution directly."""
    net = _Net()
    net.add("data", "input", [], (3, 224, 224))
    x = "data"
    for stage, (reps, cout) in enumerate([(2, 64), (2, 128), (4, 256), (4, 512), (4, 512)], start=1):
        for r in range(1, reps + 1):
            x = net.conv(f"conv{stage}_{r}", x, cout, 3)
        x = net.pool(f"pool{stage}", "maxpool", x, 2, 2)
    x = net.fc("fc6", x, 4096)
    x = net.fc("fc7", x, 4096)
    net.fc("fc8", x, 1000)
    # The data node is only there to size conv1_1's input; the paper's 24 nodes start at conv1_1.
    net.nodes = [(n, op, [i for i in ins if i != "data"], w) for n, op, ins, w in net.nodes if n != "data"]
    return net


def _resnet50() -> _Net:
    """176 nodes: input; stem conv, batchnorm, relu, max-pool (4); 16 bottleneck blocks of
    3 x (conv, batchnorm) + 2 relu + add + relu (10 each, 160); a projection shortcut (conv,
    batchnorm) in the first block of each of the 4 stages (8); average pool, fc, softmax (3)."""
    net = _Net()
    x = net.add("input", "input", [], (3, 224, 224))
    x = net.conv("conv1", x, 64, 7, 2)
    x = net.same_shape("bn1", "batchnorm", [x])
    x = net.same_shape("relu1", "relu", [x])
    x = net.pool("pool1", "maxpool", x, 3, 2, same=True)
    for stage, (blocks, width) in enumerate([(3, 64), (4, 128), (6, 256), (3, 512)], start=2):
        for b in range(1, blocks + 1):
            p = f"res{stage}{chr(ord('a') + b - 1)}"
            stride = 2 if b == 1 and stage > 2 else 1
            shortcut = x
            if b == 1:
                shortcut = net.conv(f"{p}_proj", x, 4 * width, 1, stride)
                shortcut = net.same_shape(f"{p}_proj_bn", "batchnorm", [shortcut])
            y = net.conv(f"{p}_conv1", x, width, 1, stride)
            y = net.same_shape(f"{p}_bn1", "batchnorm", [y])
            y = net.same_shape(f"{p}_relu1", "relu", [y])
            y = net.conv(f"{p}_conv2", y, width, 3)
            y = net.same_shape(f"{p}_bn2", "batchnorm", [y])
            y = net.same_shape(f"{p}_relu2", "relu", [y])
            y = net.conv(f"{p}_conv3", y, 4 * width, 1)
            y = net.same_shape(f"{p}_bn3", "batchnorm", [y])
            y = net.same_shape(f"{p}_add", "add", [y, shortcut])
            x = net.same_shape(f"{p}_relu", "relu", [y])
    x = net.pool("avgpool", "avgpool", x, 7, 1)
    x = net.fc("fc", x, 1000)
    net.add("softmax", "softmax", [x], (1000, 1, 1))
    return net


def _inception3() -> _Net:
    """311 nodes: each of Inception-v3's 94 convolutions as conv, batchnorm, relu (282); its 13
    pools and 15 concatenations (the two E modules split their 3x3 branches and concatenate the
    halves, 3 concatenations each); one logits node (global average pool folded into the fc).
    No auxiliary head. The image enters the first convolution directly."""
    net = _Net()
    net.add("data", "input", [], (3, 299, 299))

    def cbr(name: str, x: str, cout: int, k: tuple[int, int] | int, stride: int = 1, same: bool = True) -> str:
        y = net.conv(f"{name}_conv", x, cout, k, stride, same)
        y = net.same_shape(f"{name}_bn", "batchnorm", [y])
        return net.same_shape(f"{name}_relu", "relu", [y])

    x = cbr("c1a", "data", 32, 3, 2, same=False)
    x = cbr("c2a", x, 32, 3, same=False)
    x = cbr("c2b", x, 64, 3)
    x = net.pool("pool1", "maxpool", x, 3, 2)
    x = cbr("c3b", x, 80, 1)
    x = cbr("c4a", x, 192, 3, same=False)
    x = net.pool("pool2", "maxpool", x, 3, 2)

    def mod_a(p: str, x: str, pool_features: int) -> str:
        b1 = cbr(f"{p}_1x1", x, 64, 1)
        b5 = cbr(f"{p}_5x5_2", cbr(f"{p}_5x5_1", x, 48, 1), 64, 5)
        b3 = cbr(f"{p}_dbl_3", cbr(f"{p}_dbl_2", cbr(f"{p}_dbl_1", x, 64, 1), 96, 3), 96, 3)
        bp = cbr(f"{p}_pool_proj", net.pool(f"{p}_pool", "avgpool", x, 3, 1, same=True), pool_features, 1)
        return net.concat(f"{p}_concat", [b1, b5, b3, bp])

    def mod_b(p: str, x: str) -> str:
        b3 = cbr(f"{p}_3x3", x, 384, 3, 2, same=False)
        bd = cbr(f"{p}_dbl_3", cbr(f"{p}_dbl_2", cbr(f"{p}_dbl_1", x, 64, 1), 96, 3), 96, 3, 2, same=False)
        bp = net.pool(f"{p}_pool", "maxpool", x, 3, 2)
        return net.concat(f"{p}_concat", [b3, bd, bp])

    def mod_c(p: str, x: str, c7: int) -> str:
        b1 = cbr(f"{p}_1x1", x, 192, 1)
        b7 = cbr(f"{p}_7x7_3", cbr(f"{p}_7x7_2", cbr(f"{p}_7x7_1", x, c7, 1), c7, (1, 7)), 192, (7, 1))
        d = cbr(f"{p}_dbl_1", x, c7, 1)
        for k, (kk, cout) in enumerate([((7, 1), c7), ((1, 7), c7), ((7, 1), c7), ((1, 7), 192)], start=2):
            d = cbr(f"{p}_dbl_{k}", d, cout, kk)
        bp = cbr(f"{p}_pool_proj", net.pool(f"{p}_pool", "avgpool", x, 3, 1, same=True), 192, 1)
        return net.concat(f"{p}_concat", [b1, b7, d, bp])

    def mod_d(p: str, x: str) -> str:
        b3 = cbr(f"{p}_3x3_2", cbr(f"{p}_3x3_1", x, 192, 1), 320, 3, 2, same=False)
        b7 = cbr(f"{p}_7x7x3_1", x, 192, 1)
        b7 = cbr(f"{p}_7x7x3_2", b7, 192, (1, 7))
        b7 = cbr(f"{p}_7x7x3_3", b7, 192, (7, 1))
        b7 = cbr(f"{p}_7x7x3_4", b7, 192, 3, 2, same=False)
        bp = net.pool(f"{p}_pool", "maxpool", x, 3, 2)
        return net.concat(f"{p}_concat", [b3, b7, bp])

    def mod_e(p: str, x: str) -> str:
        b1 = cbr(f"{p}_1x1", x, 320, 1)
        t = cbr(f"{p}_3x3_1", x, 384, 1)
        b3 = net.concat(f"{p}_3x3_concat", [cbr(f"{p}_3x3_2a", t, 384, (1, 3)), cbr(f"{p}_3x3_2b", t, 384, (3, 1))])
        d = cbr(f"{p}_dbl_2", cbr(f"{p}_dbl_1", x, 448, 1), 384, 3)
        bd = net.concat(f"{p}_dbl_concat", [cbr(f"{p}_dbl_3a", d, 384, (1, 3)), cbr(f"{p}_dbl_3b", d, 384, (3, 1))])
        bp = cbr(f"{p}_pool_proj", net.pool(f"{p}_pool", "avgpool", x, 3, 1, same=True), 192, 1)
        return net.concat(f"{p}_concat", [b1, b3, bd, bp])

    for name, pf in (("mixed_5b", 32), ("mixed_5c", 64), ("mixed_5d", 64)):
        x = mod_a(name, x, pf)
    x = mod_b("mixed_6a", x)
    for name, c7 in (("mixed_6b", 128), ("mixed_6c", 160), ("mixed_6d", 160), ("mixed_6e", 192)):
        x = mod_c(name, x, c7)
    x = mod_d("mixed_7a", x)
    x = mod_e("mixed_7b", x)
    x = mod_e("mixed_7c", x)
    c, _, _ = net.shape[x]
    net.add("logits", "fc", [x], (1000, 1, 1), c * 1000 * FLOAT_BYTES)
    net.nodes = [(n, op, [i for i in ins if i != "data"], w) for n, op, ins, w in net.nodes if n != "data"]
    return net


#: job name -> builder of its layer graph.
JOBS: dict[str, Callable[[], _Net]] = {"vgg19": _vgg19, "resnet50": _resnet50, "inception3": _inception3}


def job(network: str, devices: str) -> PlacementInstance:
    """One of the paper's nine instances: a network of :data:`JOBS` on a device set of
    :data:`DEVICE_SETS`, named ``<network>-<devices>``.

    Examples
    --------
    >>> [job(n, "small").num_nodes for n in JOBS]
    [24, 176, 311]
    """
    return JOBS[network]().instance(device_set(devices), f"{network}-{devices}")
