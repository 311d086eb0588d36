"""Gradients as vars (xgrad::grad): gradients of gradients, gradgradcheck and Hessian-vector products."""

import numpy as np

from . import _core, ops
from ._gradcheck import GradcheckError, gradcheck
from ._tape import Tape, Var, as_float_array


def grad(output, inputs, seed=None, create_graph=False, retain_graph=None):
    """d output / d input for each of ``inputs``, as a tuple of Vars on ``output``'s tape.

    ``output`` must hold one element, or ``seed`` (an array, number or Var of ``output``'s shape) gives
    the vector-Jacobian product seed^T J. With ``create_graph`` the backward records itself, so each
    gradient is a var that can be differentiated again (a seed given as a Var is part of that graph);
    without it the gradients are constants. ``retain_graph`` defaults to ``create_graph``: without it the
    rules used are freed, and a second backward through them raises RuntimeError naming the op. An input
    that ``output`` does not depend on gets zeros. Leaves' ``.grad`` are not touched.

    >>> t = Tape()
    >>> x = t.input(np.array([1.0, 2.0]))
    >>> gx, = grad((x * x * x).sum(), [x], create_graph=True)     # 3 x^2
    >>> hv, = grad((gx * np.array([1.0, 0.0])).sum(), [x])        # 6 x v
    >>> hv.value
    array([6., 0.])
    """
    if not isinstance(output, Var):
        raise ValueError("grad: output must be an xgrad.Var, got %s" % type(output).__name__)
    if isinstance(inputs, Var):
        inputs = [inputs]
    inputs = list(inputs)
    for k, x in enumerate(inputs):
        if not isinstance(x, Var):
            raise ValueError("grad: input %d is a %s, not an xgrad.Var" % (k, type(x).__name__))
        if x.tape is not output.tape:
            raise ValueError("grad: input %d is not on the output's tape" % k)
    if seed is not None and not isinstance(seed, Var):
        seed = output.tape.constant(as_float_array(seed, output.dtype, "grad seed"))
    if isinstance(seed, Var) and seed.tape is not output.tape:
        raise ValueError("grad: seed is not on the output's tape")
    retain = bool(create_graph) if retain_graph is None else bool(retain_graph)
    core_seed = None if seed is None else seed._v
    grads = _core.grad(output._v, [x._v for x in inputs], core_seed, bool(create_graph), retain)
    return tuple(Var(g, output.tape) for g in grads)


def gradgradcheck(f, inputs, seed=None, eps=1e-6, atol=1e-5, rtol=1e-3, full_jacobian_limit=20000,
                  directions=3, random_seed=42, raise_exception=True):
    """PyTorch's gradgradcheck, in float64: gradcheck of the function (inputs, seed) -> the vector-Jacobian
    product seed^T J_f(inputs) (``grad`` with ``create_graph``), with respect to the inputs and the seed.

    ``f(*vars)`` returns a var, as for ``gradcheck``; ``seed`` defaults to normal numbers of f's output
    shape (drawn with ``random_seed``). Returns True, or raises GradcheckError naming the worst entry: input
    ``k`` is the k-th of ``inputs``, and input ``len(inputs)`` is the seed.

    >>> gradgradcheck(lambda a, b: (a @ b).tanh(), [np.ones((2, 3)), np.ones((3, 2))])
    True
    """
    arrays = [as_float_array(a, np.float64, "gradgradcheck input") for a in inputs]
    if not arrays:
        raise ValueError("gradgradcheck: no inputs")
    n = len(arrays)
    if seed is None:
        t = Tape()
        shape = f(*[t.input(a) for a in arrays]).shape
        seed = np.random.default_rng(random_seed).standard_normal(shape)
    seed = as_float_array(seed, np.float64, "gradgradcheck seed")

    def vector_jacobian_product(*xs):
        grads = grad(f(*xs[:n]), list(xs[:n]), seed=xs[n], create_graph=True)
        parts = [g.reshape(-1) for g in grads]
        return parts[0] if n == 1 else ops.concat(parts, 0)

    try:
        return gradcheck(vector_jacobian_product, arrays + [seed], eps, atol, rtol, full_jacobian_limit,
                         directions, random_seed, raise_exception)
    except GradcheckError as e:
        message = str(e).replace("gradcheck failed", "gradgradcheck failed (input %d is the seed)" % n, 1)
        raise GradcheckError(message, e.report, e.input, e.index, e.analytic, e.numeric) from None


def hvp(f, inputs, vectors):
    """f(inputs) and the Hessian-vector products H v, where H is the Hessian of the scalar ``f`` with
    respect to all ``inputs`` together: one NumPy array per input. ``f(*vars)`` returns a var of one
    element; ``vectors`` has one array of each input's shape. On a fresh float64 tape.

    >>> value, (hv,) = hvp(lambda x: (x * x * x).sum(), [np.array([1.0, 2.0])], [np.array([1.0, 1.0])])
    >>> value, hv
    (9.0, array([ 6., 12.]))
    """
    arrays = [as_float_array(a, np.float64, "hvp input") for a in inputs]
    vectors = [as_float_array(v, np.float64, "hvp vector") for v in vectors]
    if len(vectors) != len(arrays):
        raise ValueError("hvp: %d inputs but %d vectors" % (len(arrays), len(vectors)))
    for k, (a, v) in enumerate(zip(arrays, vectors)):
        if a.shape != v.shape:
            raise ValueError("hvp: vector %d has shape %s, input %d %s" % (k, v.shape, k, a.shape))
    t = Tape()
    xs = [t.input(a) for a in arrays]
    y = f(*xs)
    if not isinstance(y, Var) or y.value.size != 1:
        raise ValueError("hvp: f must return a var of one element")
    grads = grad(y, xs, create_graph=True)
    g_dot_v = (grads[0] * vectors[0]).sum()
    for g, v in zip(grads[1:], vectors[1:]):
        g_dot_v = g_dot_v + (g * v).sum()
    return float(y.value.reshape(())), [h.value for h in grad(g_dot_v, xs)]
