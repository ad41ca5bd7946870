"""Operator graphs: the IR, configurations, layer builders and the JSON format."""

from stratopt.graph.configs import ConfigPolicy, configurations, divisors
from stratopt.graph.ir import OPS, Graph, Input, Operator, TensorUse
from stratopt.graph.layers import GraphBuilder, TensorRef

__all__ = [
    "OPS",
    "ConfigPolicy",
    "Graph",
    "GraphBuilder",
    "Input",
    "Operator",
    "TensorRef",
    "TensorUse",
    "configurations",
    "divisors",
]
