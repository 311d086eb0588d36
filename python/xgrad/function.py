"""Your own op in Python: ``xgrad.Function``, with its forward and backward written on NumPy arrays.

    class Softplus(xgrad.Function):
        @staticmethod
        def forward(ctx, x):              # NumPy arrays in (one per input var), one NumPy array out
            ctx.save_for_backward(x)
            return np.log1p(np.exp(x))

        @staticmethod
        def backward(ctx, grad):          # one gradient per input (a tuple when there are several), or None
            x, = ctx.saved_tensors
            return grad / (1 + np.exp(-x))

    y = Softplus.apply(x)                 # a Var on x's tape; non-var arguments pass through to forward

The node's op is the class name (in ``Tape.trace``, ``to_dot``, anomaly reports). What is checked, each
failure a Python exception naming the class, the tape staying usable:
- ``forward`` returns an array (or number) of real numbers, converted to the tape's dtype;
- ``backward`` returns one entry per var input, or one per argument of ``apply`` (as torch's backward
  does; then the entries of non-var arguments must be None); a single array when there is one input;
- each gradient is None (no gradient) or an array of its input's shape and of the tape's dtype;
- an exception raised inside ``forward`` or ``backward`` keeps its type; its message gains the prefix
  ``"<Class>.forward: "`` or ``"<Class>.backward: "``.
A backward written on NumPy arrays is not itself recorded, so a second-order gradient cannot go through it.
"""

import numpy as np

from . import _core
from ._tape import Var


class FunctionCtx:
    """What ``forward`` and ``backward`` share: ``save_for_backward(*arrays)`` then ``saved_tensors``;
    ``needs_input_grad`` (one bool per argument of ``apply``); any attribute you set (``ctx.axis = 1``)."""

    def __init__(self, needs_input_grad):
        self.needs_input_grad = needs_input_grad
        self._saved = ()

    def save_for_backward(self, *values):
        """Keeps arrays (or anything) for backward, in this order; they are not copied."""
        self._saved = values

    @property
    def saved_tensors(self):
        """What save_for_backward kept, as a tuple."""
        return self._saved

    def _saved_bytes(self):
        return sum(a.nbytes for a in self._saved if isinstance(a, np.ndarray))


class Function:
    """Subclass it with two static methods, ``forward(ctx, *args)`` and ``backward(ctx, grad)`` (see the
    module's text), and call ``YourClass.apply(*args)``: every xgrad.Var among the arguments (1 to 4 of
    them, all of one tape) becomes a NumPy array for forward and an input of the recorded node."""

    @staticmethod
    def forward(ctx, *args):
        raise NotImplementedError("Function.forward: write it in your subclass")

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError("Function.backward: write it in your subclass")

    @classmethod
    def apply(cls, *args):
        name = cls.__name__
        positions = [i for i, a in enumerate(args) if isinstance(a, Var)]
        inputs = [args[i] for i in positions]
        _check_inputs(name, inputs)
        tape = inputs[0].tape
        ctx = FunctionCtx(tuple(isinstance(a, Var) and a.requires_grad for a in args))
        arrays = [a.value if isinstance(a, Var) else a for a in args]
        value = _call(name, "forward", cls.forward, ctx, *arrays)
        value = _as_value(name, value, tape.dtype)
        rule = _rule(cls, ctx, len(args), positions, [v.shape for v in inputs], tape.dtype)
        core = _core.record_function(name, [v._v for v in inputs], value, rule, ctx._saved_bytes())
        return Var(core, tape)


def _call(name, method, f, *args):
    """f(*args); an exception keeps its type and gains the prefix '<name>.<method>: ' in its message."""
    try:
        return f(*args)
    except Exception as e:
        prefix = "%s.%s: " % (name, method)
        if e.args and isinstance(e.args[0], str):
            e.args = (prefix + e.args[0],) + e.args[1:]
        else:
            e.args = (prefix + "%s raised" % type(e).__name__,) + e.args
        raise


def _check_inputs(name, inputs):
    if not inputs:
        raise ValueError("%s.apply: no xgrad.Var among the arguments (a Function records on a var's tape)"
                         % name)
    if len(inputs) > 4:
        raise ValueError("%s.apply: a node takes at most 4 var inputs, got %d" % (name, len(inputs)))
    for v in inputs[1:]:
        if v.tape is not inputs[0].tape:
            raise ValueError("%s.apply: the var inputs were recorded on different tapes%s"
                             % (name, _dtype_note(inputs[0], v)))


def _dtype_note(a, b):
    if a.dtype is not b.dtype:
        return " (a %s var and a %s var)" % (np.dtype(a.dtype).name, np.dtype(b.dtype).name)
    return ""


def _as_value(name, value, dtype):
    """forward's result as a C-ordered array of the tape's dtype; ValueError naming the class otherwise."""
    a = np.asarray(value)
    if a.dtype.kind not in "fiub":
        got = "dtype %s" % a.dtype if isinstance(value, np.ndarray) else type(value).__name__
        raise ValueError("%s.forward: must return an array of real numbers, got %s" % (name, got))
    return np.asarray(a, dtype=dtype, order="C")


def _rule(cls, ctx, arg_count, positions, shapes, dtype):
    """The callable the node's backward runs: grad -> [gradient or None, one per var input], checked.
    It holds the class, ctx and the inputs' shapes, never a var or the tape (no reference cycle)."""
    name = cls.__name__

    def run(grad):
        answer = _call(name, "backward", cls.backward, ctx, grad)
        grads = _per_input(name, answer, arg_count, positions)
        return [_checked_grad(name, k, g, shapes[k], dtype) for k, g in enumerate(grads)]

    return run


def _per_input(name, answer, arg_count, positions):
    """backward's answer as one entry per var input."""
    if not isinstance(answer, (tuple, list)):
        answer = (answer,)
    answer = tuple(answer)
    if len(answer) == len(positions):
        return list(answer)
    if len(answer) == arg_count:
        for i, g in enumerate(answer):
            if i not in positions and g is not None:
                raise ValueError("%s.backward: returned a gradient for argument %d, which is not an "
                                 "xgrad.Var (return None there)" % (name, i))
        return [answer[i] for i in positions]
    raise ValueError("%s.backward: returned %d gradients; expected %d (one per var input)%s"
                     % (name, len(answer), len(positions),
                        " or %d (one per argument)" % arg_count if arg_count != len(positions) else ""))


def _checked_grad(name, k, g, shape, dtype):
    if g is None:
        return None
    a = np.asarray(g)
    if a.shape != tuple(shape):
        raise ValueError("%s.backward: the gradient for input %d has shape %s; the input has shape %s"
                         % (name, k, a.shape, tuple(shape)))
    if a.dtype != dtype:
        raise ValueError("%s.backward: the gradient for input %d has dtype %s; the tape's dtype is %s"
                         % (name, k, a.dtype, np.dtype(dtype).name))
    return np.asarray(a, order="C")
