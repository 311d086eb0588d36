"""xgrad: a small reverse-mode autodiff library (C++17 on xtensor) for NumPy users.

The tape
    t = xgrad.Tape(dtype="float64")        # or "float32"; an explicit tape, no hidden global one
    x = t.input(np.array(-4.0))            # a leaf that wants a gradient (any shape; copied in)
    c = t.constant(np.ones((2, 3)))        # a leaf that does not
    y = x * 2 + 2 + x                      # + - * / @ and ** (number exponent), unary -, with vars,
                                           # numbers or arrays on either side, broadcasting like NumPy
    z = y.relu() + y.tanh() + y.exp()      # methods: relu tanh exp log sigmoid sqrt gelu sum mean max ...
    z.sum().backward()                     # or t.backward(var); a var that is not a scalar needs a seed
    x.grad, x.value                        # NumPy arrays (copies) of x's shape
    t.trace(), t.to_dot()                  # the graph, node by node; Graphviz DOT

Modules
    xgrad.ops          every primitive op under its C++ name (matmul, softmax, layer_norm, attention, ...)
    xgrad.gradcheck    f: vars -> var, checked against central differences: True or a GradcheckError
    xgrad.models       multi-head attention on the tape; .manual: its hand-derived backward on arrays;
                       masks, counting; GPT (also xgrad.GPT): load, save, forward, manual twin, sampling
    xgrad.first_divergence   your gradients against a reference, in backward order: the first that differs
    xgrad.optim        SGD, Adam, AdamW, clip_grad_norm, LRSchedule
    xgrad.train        run(): xgrad-train's loop with a progress bar
    xgrad.Parameter    a learnable array that outlives tapes (t.param(p); optimisers update it in place)
    xgrad.Module       a model written in Python that declares each parameter once (visit), with declare
    xgrad.Tokenizer    bytes, SentencePiece or GPT-2's tokenizer of a checkpoint: encode, decode
    xgrad.Function     your own op: forward and backward on NumPy arrays (ctx.save_for_backward), .apply

Copies and views: every array going in is copied, every array coming out (value, grad, parameters,
gradients, caches) is a fresh copy; nothing points into memory xgrad may free. A var holds its tape.

Errors: bad shapes and arguments raise ValueError with the C++ message naming the op and the shapes;
anything else RuntimeError (a var of a cleared tape, a second backward through a freed graph, an
unreadable checkpoint); anomaly mode raises AnomalyError (a RuntimeError).
"""

from . import _core
from ._core import AnomalyError
from ._gradcheck import GradcheckError, gradcheck
from ._tape import Parameter, Tape, Var
from . import ops, optim, train
from . import models
from .divergence import DivergenceReport, first_divergence
from ._grad import grad, gradgradcheck, hvp
from .function import Function, FunctionCtx
from .models import GPT
from .module import Module, declare
from .tokenizer import Tokenizer

AnomalyError.__doc__ = """Raised in anomaly mode (Tape.detect_anomaly) by the first op whose value or
gradient holds NaN or inf although everything it read was finite; the message names the op, its label, the
node, the shapes, the first bad element and the chain of nodes that led to it. A RuntimeError."""

__version__ = "0.1.0"

__all__ = ["Tape", "Var", "Parameter", "ops", "gradcheck", "GradcheckError", "AnomalyError", "models", "GPT",
           "first_divergence", "DivergenceReport", "Function", "FunctionCtx", "optim", "train", "Module",
           "declare", "Tokenizer"]
