"""pyfuse: a fusion compiler for NVIDIA GPUs written in pure Python.

Only the public names are exported here; everything else is private by module.
Importing pyfuse is cheap: no GPU, no driver, no torch.
"""

from pyfuse.errors import FusionError, InputError, LaunchError, PyfuseError, ScheduleError
from pyfuse.frontend.fuse import FusedFunction, fuse
from pyfuse.frontend.ops import (
    abs,
    add,
    broadcast_to,
    cast,
    cos,
    div,
    eq,
    exp,
    ge,
    gelu,
    gt,
    layer_norm,
    le,
    linear,
    log,
    logical_and,
    logical_not,
    logical_or,
    lt,
    matmul,
    max,
    maximum,
    mean,
    min,
    minimum,
    mul,
    ne,
    neg,
    permute,
    pow,
    reciprocal,
    relu,
    reshape,
    rms_norm,
    rsqrt,
    sigmoid,
    silu,
    sin,
    softmax,
    sqrt,
    squeeze,
    sub,
    sum,
    tanh,
    transpose,
    unsqueeze,
    where,
)
from pyfuse.frontend.spec import Spec, spec
from pyfuse.frontend.tensor import Tensor
from pyfuse.ir.dtypes import DType, bfloat16, float16, float32, int32, int64
from pyfuse.ir.dtypes import bool_ as bool  # noqa: A004 - the public name is pf.bool
from pyfuse.ir.fusion import Fusion
from pyfuse.ir.params import MatmulParams

__version__ = "0.1.0"

__all__ = [
    "DType", "Fusion", "FusedFunction", "FusionError", "InputError", "LaunchError",
    "MatmulParams", "PyfuseError", "ScheduleError", "Spec", "Tensor", "__version__",
    "abs", "add", "bfloat16", "bool", "broadcast_to", "cast", "cos", "div", "eq", "exp",
    "float16", "float32", "fuse", "ge", "gelu", "gt", "int32", "int64", "layer_norm", "le",
    "linear", "log", "logical_and", "logical_not", "logical_or", "lt", "matmul", "max",
    "maximum", "mean", "min", "minimum", "mul", "ne", "neg", "permute", "pow", "reciprocal",
    "relu", "reshape", "rms_norm", "rsqrt", "sigmoid", "silu", "sin", "softmax", "spec",
    "sqrt", "squeeze", "sub", "sum", "tanh", "transpose", "unsqueeze", "where",
]
