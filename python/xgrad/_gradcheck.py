"""gradcheck: the tape's gradients of your function against central finite differences, in float64."""

import numpy as np

from . import _core
from ._tape import Tape, Var, as_float_array


class GradcheckError(RuntimeError):
    """Raised by gradcheck when an analytic gradient differs from the finite differences. ``input``,
    ``index``, ``analytic`` and ``numeric`` describe the worst entry; ``report`` is the per-input table."""

    def __init__(self, message, report, input=None, index=None, analytic=None, numeric=None):
        super().__init__(message)
        self.report, self.input, self.index, self.analytic, self.numeric = report, input, index, analytic, numeric


def gradcheck(f, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, full_jacobian_limit=20000, directions=3, seed=42,
              raise_exception=True):
    """Checks ``f``'s gradients on the tape against central differences (xgrad::gradcheck), in float64.

    ``f(*vars)`` takes one var per array of ``inputs`` (each called on a fresh tape) and returns a var;
    an entry passes when |analytic - numeric| <= atol + rtol |numeric|. Small inputs get the full
    Jacobian; inputs with more than ``full_jacobian_limit`` Jacobian entries get ``directions`` random
    directions. Returns True, or raises GradcheckError naming the worst entry (input, index, both values)
    with the per-input table (or returns False when ``raise_exception`` is False). The arrays are copied.

    >>> gradcheck(lambda a, b: (a @ b).tanh().sum(), [np.ones((2, 3)), np.ones((3, 2))])
    True
    """
    arrays = [as_float_array(a, np.float64, "gradcheck input") for a in inputs]
    if not arrays:
        raise ValueError("gradcheck: no inputs")

    def evaluate(core_tape, core_vars):
        tape = Tape._lent(core_tape, np.float64)
        out = f(*[Var(v, tape) for v in core_vars])
        if not isinstance(out, Var):
            raise ValueError("gradcheck: f must return an xgrad.Var, got %s" % type(out).__name__)
        return out._v

    report = _core.gradcheck(evaluate, arrays, eps, atol, rtol, full_jacobian_limit, directions, seed)
    if report["ok"]:
        return True
    if not raise_exception:
        return False
    failing = [r for r in report["inputs"] if not r["ok"]]
    k = max(failing, key=lambda r: r["max_abs_error"])["input"]
    index, analytic, numeric, projected = _worst_entry(f, arrays, k, eps, atol, rtol, seed)
    what = "d <v, f> / d x" if projected else "d f / d x"
    message = ("gradcheck failed: worst entry is input %d %s at index %s: analytic %s = %.10g, numeric %.10g "
               "(difference %.3g)\n%s" % (k, tuple(arrays[k].shape), index, what, analytic, numeric,
                                          abs(analytic - numeric), report["summary"]))
    raise GradcheckError(message, report, k, index, analytic, numeric)


def _worst_entry(f, arrays, k, eps, atol, rtol, seed):
    """The entry of input k whose analytic and numeric derivatives differ most beyond the tolerance. A
    scalar output is differentiated as it is; a larger one projected on a random direction v."""

    def projected_value(xs, v):
        t = Tape()
        return float(np.sum(v * f(*[t.input(x) for x in xs]).value))

    t = Tape()
    xs = [t.input(a) for a in arrays]
    out = f(*xs)
    v = np.ones(out.shape) if out.value.size == 1 else np.random.default_rng(seed).standard_normal(out.shape)
    if out.requires_grad:
        out.backward(v)
    analytic = xs[k].grad
    worst = (-np.inf, None, 0.0, 0.0)
    for index in np.ndindex(*arrays[k].shape):
        shifted = [a.copy() for a in arrays]
        shifted[k][index] += eps
        plus = projected_value(shifted, v)
        shifted[k][index] -= 2 * eps
        numeric = (plus - projected_value(shifted, v)) / (2 * eps)
        excess = abs(analytic[index] - numeric) - (atol + rtol * abs(numeric))
        if excess > worst[0]:
            worst = (excess, index, float(analytic[index]), numeric)
    return worst[1], worst[2], worst[3], out.value.size != 1
