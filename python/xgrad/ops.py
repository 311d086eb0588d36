"""Every primitive op of xgrad, under its C++ name (``xgrad::ops::<name>``).

Each takes vars of one tape, records one node with its backward rule, and returns the result var. The
elementwise ops of two operands (add sub mul div maximum minimum where ...) also take an array or a number
for either operand as the operators do (``ops.mul(v, array)`` is ``v * array``): it becomes a constant on
the other operand's tape.
Bad shapes or arguments raise ValueError with the C++ message naming the op and the shapes.

Elementwise (NumPy broadcasting): add sub mul div, scale add_scalar neg pow, exp log sqrt rsqrt,
tanh relu sigmoid gelu. Reductions: sum mean (all or given axes), max (one axis), variance.
Shapes: reshape permute transpose slice concat, embedding. Products: matmul (batched, broadcast,
transpose flags). Fused, hand-derived rules: masked_softmax softmax log_softmax cross_entropy
layer_norm dropout attention attention_token_major linear linear_gelu linear_gelu_exact. The
architecture variants': erf silu gelu_exact swiglu rms_norm rope softcap.
"""

import numpy as np

from . import _core
from ._tape import Var, _axes, _operand, as_ids, as_mask, different_tapes, whole_number


def _vars(what, *vs):
    for v in vs:
        if not isinstance(v, Var):
            raise ValueError("%s: expected xgrad.Var arguments, got %s" % (what, type(v).__name__))
    for v in vs[1:]:
        if v.tape is not vs[0].tape:
            raise different_tapes(what, vs[0], v)
    return vs[0]


def _operands(what, *xs):
    """The operands as vars of one tape: arrays and numbers become constants on the first var's tape."""
    first = next((x for x in xs if isinstance(x, Var)), None)
    if first is None:
        raise ValueError("%s: at least one operand must be an xgrad.Var, got %s"
                         % (what, ", ".join(type(x).__name__ for x in xs)))
    return [_operand(first, x, what) for x in xs]


def _unary(name, doc):
    core = getattr(_core, name)

    def op(x):
        _vars(name, x)
        return Var(core(x._v), x.tape)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc
    return op


def _binary(name, doc):
    core = getattr(_core, name)

    def op(a, b):
        a, b = _operands(name, a, b)
        return Var(core(a._v, b._v), a.tape)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc
    return op


add = _binary("add", "a + b, broadcasting like NumPy. Backward: d a = sum_to(g, a.shape), d b likewise.")
sub = _binary("sub", "a - b, broadcasting. Backward: d a = g, d b = -g (each summed to its shape).")
mul = _binary("mul", "a * b, broadcasting. Backward: d a = g b, d b = g a.")
div = _binary("div", "a / b, broadcasting. Backward: d a = g / b, d b = -g a / b^2.")
neg = _unary("neg", "-x. Backward: d x = -g.")
exp = _unary("exp", "e^x. Backward: d x = g e^x (the saved output).")
log = _unary("log", "natural log. Backward: d x = g / x.")
sqrt = _unary("sqrt", "sqrt(x). Backward: d x = g / (2 sqrt(x)).")
rsqrt = _unary("rsqrt", "1 / sqrt(x). Backward: d x = -g / (2 x^1.5).")
tanh = _unary("tanh", "tanh(x). Backward: d x = g (1 - y^2).")
relu = _unary("relu", "max(x, 0). Backward: d x = g where x > 0, else 0.")
sigmoid = _unary("sigmoid", "1 / (1 + e^-x). Backward: d x = g y (1 - y).")
gelu = _unary("gelu", "GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), fused.")
erf = _unary("erf", "erf(x). Backward: d x = g (2 / sqrt(pi)) e^(-x^2).")
silu = _unary("silu", "x sigmoid(x). Backward: d x = g (s + x s (1 - s)), s = sigmoid(x).")
gelu_exact = _unary("gelu_exact", "The exact GELU 0.5 x (1 + erf(x / sqrt 2)) (torch.nn.GELU()), fused.")
swiglu = _binary("swiglu", "silu(gate) * up, gate and up of the same shape. Backward: d gate = g up silu'(gate), "
                 "d up = g silu(gate).")


abs = _unary("abs", "|x|. Backward: d x = g sign(x) (0 at x = 0, as torch.abs).")
sin = _unary("sin", "sin x. Backward: d x = g cos x.")
cos = _unary("cos", "cos x. Backward: d x = -g sin x.")
maximum = _binary("maximum", "max(a, b) elementwise, broadcasting. Backward: g to a where a >= b (ties), "
                  "to b elsewhere.")
minimum = _binary("minimum", "min(a, b) elementwise, broadcasting. Backward: g to a where a <= b (ties), "
                  "to b elsewhere.")


def where(cond, a, b):
    """cond ? a : b elementwise (NumPy's where), cond, a and b broadcast together. ``cond``: a bool array
    (copied; a constant, it gets no gradient); a and b vars, arrays or numbers (at least one a var).
    Backward: g to a where cond, to b elsewhere."""
    a, b = _operands("where", a, b)
    c = np.asarray(cond)
    if c.dtype != np.bool_:
        raise ValueError("where: cond must be a bool array (e.g. x.value > 0), got dtype %s" % c.dtype)
    return Var(_core.where(np.asarray(c, order="C"), a._v, b._v), a.tape)


def clip(x, lo, hi):
    """min(max(x, lo), hi) for numbers lo <= hi (None: no bound on that side). Backward: g where
    lo <= x <= hi, 0 elsewhere (as torch.clamp)."""
    _vars("clip", x)
    lo = -np.inf if lo is None else float(lo)
    hi = np.inf if hi is None else float(hi)
    return Var(_core.clip(x._v, lo, hi), x.tape)


def take_along_axis(x, indices, axis):
    """NumPy's take_along_axis: ``indices`` (an integer array of x's rank, broadcasting against x on the
    other axes; negative entries count from the end) picks along ``axis``. One take node; the backward
    scatter-adds."""
    _vars("take_along_axis", x)
    ids = np.asarray(indices)
    if ids.dtype.kind not in "iu":
        raise ValueError("take_along_axis: indices must be an integer array, got dtype %s" % ids.dtype)
    (axis,) = _axes(axis, x.ndim, "take_along_axis")
    positions = np.arange(int(np.prod(x.shape)), dtype=np.int64).reshape(x.shape)
    try:
        picked = np.take_along_axis(positions, ids, axis)
    except (IndexError, ValueError) as e:
        raise ValueError("take_along_axis: %s (x of shape %s, indices of shape %s)"
                         % (e, x.shape, ids.shape)) from None
    return Var(_core.take(x._v, np.asarray(picked, order="C")), x.tape)


def take(x, positions):
    """x.flat[positions] (NumPy's take without an axis): ``positions`` an integer array in [0, x.size);
    the result has its shape. Backward: scatter_add."""
    _vars("take", x)
    return Var(_core.take(x._v, as_ids(positions, "take positions")), x.tape)


def scatter_add(values, positions, shape):
    """zeros(shape) with values[i] added at flat position positions[i] (NumPy's add.at; repeats add up);
    positions of values' shape. take's adjoint. Backward: take."""
    _vars("scatter_add", values)
    ids = as_ids(positions, "scatter_add positions")
    return Var(_core.scatter_add(values._v, ids, [int(n) for n in shape]), values.tape)


def scale(x, factor):
    """factor * x for a number factor. Backward: d x = factor g."""
    _vars("scale", x)
    return Var(_core.scale(x._v, float(factor)), x.tape)


def softcap(x, cap):
    """cap * tanh(x / cap) for a number cap > 0 (the logits' soft cap), one node. Backward:
    d x = g (1 - (y / cap)^2)."""
    _vars("softcap", x)
    return Var(_core.softcap(x._v, float(cap)), x.tape)


def add_scalar(x, c):
    """x + c for a number c. Backward: d x = g."""
    _vars("add_scalar", x)
    return Var(_core.add_scalar(x._v, float(c)), x.tape)


def pow(x, exponent):
    """x ** exponent: a number exponent (Backward: d x = g exponent x^(exponent - 1)), or a var or array,
    broadcasting (Backward also d exponent = g x^exponent ln x, 0 where x = 0 and exponent >= 0)."""
    if isinstance(exponent, (Var, np.ndarray, list)) or not isinstance(x, Var):
        x, exponent = _operands("pow", x, exponent)
        return Var(_core.pow_var(x._v, exponent._v), x.tape)
    _vars("pow", x)
    return Var(_core.pow(x._v, float(exponent)), x.tape)


def sum(x, axis=None, keepdims=False):
    """Sum over all axes (None), one axis or a tuple of axes. Backward: g broadcast back."""
    _vars("sum", x)
    return x.sum(axis, keepdims)


def mean(x, axis=None, keepdims=False):
    """Mean over all axes (None), one axis or a tuple of axes. Backward: g / count, broadcast back."""
    _vars("mean", x)
    return x.mean(axis, keepdims)


def max(x, axis=None, keepdims=False):
    """Largest entry over every axis (None, NumPy's default) or along one axis; the gradient goes to the
    first largest entry (as torch.max(dim))."""
    _vars("max", x)
    return x.max(axis, keepdims)


def variance(x, axis=None, keepdims=False):
    """Biased (population) variance mean((x - mean(x))^2) over the given axes (all when None)."""
    _vars("variance", x)
    return x.variance(axis, keepdims)


def reshape(x, shape):
    """The same values in a new shape (one entry may be -1). Backward: g reshaped back."""
    _vars("reshape", x)
    return x.reshape(tuple(shape))


def permute(x, axes):
    """Axes reordered. Backward: g permuted by the inverse permutation."""
    _vars("permute", x)
    return x.permute(tuple(axes))


def transpose(x, axis1, axis2):
    """Two axes swapped. Backward: g with the same axes swapped."""
    _vars("transpose", x)
    return x.transpose(axis1, axis2)


def slice(x, axis, begin, end):
    """Entries [begin, end) of one axis; a negative bound counts from the end, as in Python (-1 is the
    last). Out of range after that: ValueError. Backward: g placed back, zeros elsewhere."""
    _vars("slice", x)
    (axis,) = _axes(axis, x.ndim, "slice")
    n = x.shape[axis]
    b, e = (int(i) + n if i < 0 else int(i) for i in (begin, end))
    if b < 0 or e < 0:
        raise ValueError("slice: bounds %d, %d are out of range for an axis of length %d" % (begin, end, n))
    return Var(_core.slice(x._v, axis, b, e), x.tape)


def stack(parts, axis=0):
    """Joins vars of one shape along a new axis (NumPy's stack): each gets an axis of length 1 there
    (a reshape), then concat. Backward: g sliced back into the parts."""
    parts = list(parts)
    if not parts:
        raise ValueError("stack: no parts")
    _vars("stack", *parts)
    shape = parts[0].shape
    for k, p in enumerate(parts):
        if p.shape != shape:
            raise ValueError("stack: part %d has shape %s, part 0 %s" % (k, p.shape, shape))
    (axis,) = _axes(axis, len(shape) + 1, "stack")
    grown = shape[:axis] + (1,) + shape[axis:]
    return concat([p.reshape(grown) for p in parts], axis)


def concat(parts, axis):
    """Joins vars along one axis; every other axis must agree. Backward: g sliced back into the parts."""
    parts = list(parts)
    if not parts:
        raise ValueError("concat: no parts")
    _vars("concat", *parts)
    (axis,) = _axes(axis, parts[0].ndim, "concat")
    return Var(_core.concat([p._v for p in parts], axis), parts[0].tape)


def embedding(weight, ids):
    """Row gather: out[..., :] = weight[ids[...], :], shape ids.shape + (d,). ``ids``: an integer array
    (copied). Backward scatter-adds, so repeated ids accumulate. An id outside [0, V) is a ValueError."""
    _vars("embedding", weight)
    return Var(_core.embedding(weight._v, as_ids(ids, "embedding ids")), weight.tape)


def matmul(a, b, transpose_a=False, transpose_b=False):
    """Matrix product over the last two axes; leading (batch) axes broadcast. transpose_a / transpose_b
    use an operand's last two axes swapped. Backward: d a = g b^T, d b = a^T g (summed over broadcast)."""
    _vars("matmul", a, b)
    return Var(_core.matmul(a._v, b._v, bool(transpose_a), bool(transpose_b)), a.tape)


def masked_softmax(x, mask, scale=1.0):
    """softmax(scale * x) over the last axis among the entries where ``mask`` (bool, broadcast to x's
    shape, copied) is True. A row with no True entry gives zeros and a zero gradient, never NaN."""
    _vars("masked_softmax", x)
    return Var(_core.masked_softmax(x._v, as_mask(mask, "masked_softmax mask"), float(scale)), x.tape)


def softmax(x, scale=1.0, axis=-1):
    """softmax(scale * x) along ``axis`` (the last by default; another axis is moved last and back by two
    permutes). Backward: d x = scale y (g - sum(g y))."""
    _vars("softmax", x)
    return x.softmax(axis, scale)


def log_softmax(x, axis=-1):
    """log softmax along ``axis`` (the last by default). Backward: d x = g - softmax(x) sum(g)."""
    _vars("log_softmax", x)
    return x.log_softmax(axis)


def cross_entropy(logits, targets):
    """Mean over the positions whose target is not -1 of -log softmax(logits)[target]. ``targets``: an
    integer array of logits' shape without the last axis. All ignored: 0 and a zero gradient."""
    _vars("cross_entropy", logits)
    return Var(_core.cross_entropy(logits._v, as_ids(targets, "cross_entropy targets")), logits.tape)


def layer_norm(x, weight, bias, eps=1e-5):
    """(x - mean) / sqrt(var + eps) * weight + bias over the last axis (var biased); weight, bias (d,)."""
    _vars("layer_norm", x, weight, bias)
    return Var(_core.layer_norm(x._v, weight._v, bias._v, float(eps)), x.tape)


def rms_norm(x, weight, eps=1e-5):
    """x / sqrt(mean(x^2) + eps) * weight over the last axis (no mean subtraction, no bias); weight (d,)."""
    _vars("rms_norm", x, weight)
    return Var(_core.rms_norm(x._v, weight._v, float(eps)), x.tape)


def rope(x, base=10000.0, positions=None, position_offset=0):
    """Rotary embedding of x (..., T, dh), dh even: the pair (2i, 2i+1) of row t is rotated by the angle
    p_t * base^(-2i/dh): (a, b) -> (a cos - b sin, a sin + b cos), where p_t = position_offset + t, or
    ``positions[t]`` (T integers >= 0, any order) when given. Backward: the inverse rotation of g.
    On (B, H, T, dh) with consecutive positions it is one fused node; otherwise it is composed of
    primitive ops (x cos + swap(x) sin, with the angles as constants)."""
    _vars("rope", x)
    if x.ndim < 2 or x.shape[-1] % 2:
        raise ValueError("rope: input must be (..., T, dh) with dh even, got shape %s" % (x.shape,))
    t, dh = x.shape[-2], x.shape[-1]
    position_offset = whole_number("rope: position_offset", position_offset)
    if positions is None:
        if x.ndim == 4:
            return Var(_core.rope(x._v, float(base), int(position_offset)), x.tape)
        positions = position_offset + np.arange(t)
    positions = as_ids(positions, "rope positions")
    if positions.shape != (t,) or (positions.size and positions.min() < 0):
        raise ValueError("rope: positions must be %d integers >= 0 (one per row t), got shape %s"
                         % (t, positions.shape))
    if x.ndim == 4 and t and np.array_equal(positions, positions[0] + np.arange(t)):
        return Var(_core.rope(x._v, float(base), int(positions[0])), x.tape)
    angles = positions[:, None] * float(base) ** (-np.arange(0, dh, 2) / dh)   # (T, dh/2)
    cos = np.repeat(np.cos(angles), 2, axis=-1)
    sin = np.repeat(np.sin(angles), 2, axis=-1) * np.tile([-1.0, 1.0], dh // 2)  # (-b sin, a sin)
    pairs = x.reshape(x.shape[:-1] + (dh // 2, 2))
    swapped = concat([slice(pairs, -1, 1, 2), slice(pairs, -1, 0, 1)], -1).reshape(x.shape)  # (b, a)
    return x * cos + swapped * sin


def dropout(x, p, seed=0, training=True):
    """Inverted dropout: zeroes each entry with probability p (a generator seeded by ``seed``) and scales
    the rest by 1 / (1 - p). The identity when p == 0 or not training. p outside [0, 1): ValueError."""
    _vars("dropout", x)
    seed = whole_number("dropout: seed", seed, high=2**64)
    return Var(_core.dropout(x._v, float(p), seed, bool(training)), x.tape)


def _window(op, window):
    """The sliding window as an int >= 0 (0 = none), or ValueError naming the op."""
    return whole_number("%s: window" % op, window)


def attention(q, k, v, mask=None, causal=False, window=0):
    """Fused scaled dot-product attention softmax(Q K^T / sqrt(dh), mask) V, tile by tile with an online
    softmax. q (B, H, Tq, dh); k, v (B, G, Tk, dh) with H % G == 0. Or, with any leading axes,
    q (..., Tq, dh) and k, v (..., Tk, dh) with the same leading axes (folded into one batch axis).
    ``mask``: bool, True = attend, broadcast to (..., Tq, Tk), copied; ``causal`` is bottom-right
    aligned (query i sees key j <= i + Tk - Tq) and ANDed with it; ``window`` w > 0 (causal only) also
    needs j > i + Tk - Tq - w, and the op then works on the window's tiles alone. A row with no visible
    key gives 0 and no gradient. Returns q's shape."""
    _vars("attention", q, k, v)
    w = _window("attention", window)
    m = None if mask is None else as_mask(mask, "attention mask")
    if q.ndim == 4 and k.ndim == 4 and v.ndim == 4:
        return Var(_core.attention(q._v, k._v, v._v, m, bool(causal), w), q.tape)
    if q.ndim < 2 or q.shape[:-2] != k.shape[:-2] or k.shape[:-2] != v.shape[:-2]:
        raise ValueError("attention: q (..., Tq, dh), k and v (..., Tk, dh) need the same leading axes, got "
                         "shapes %s, %s, %s" % (q.shape, k.shape, v.shape))
    lead, tq, tk = q.shape[:-2], q.shape[-2], k.shape[-2]
    n = int(np.prod(lead))
    fold = lambda x: x.reshape((n, 1) + x.shape[-2:])  # noqa: E731
    if m is not None:
        try:
            m = np.ascontiguousarray(np.broadcast_to(m, lead + (tq, tk)).reshape(n, 1, tq, tk))
        except ValueError:
            raise ValueError("attention: mask of shape %s does not broadcast to %s"
                             % (m.shape, lead + (tq, tk))) from None
    out = Var(_core.attention(fold(q)._v, fold(k)._v, fold(v)._v, m, bool(causal), w), q.tape)
    return out.reshape(q.shape[:-1] + (v.shape[-1],))


def attention_token_major(q, k, v, heads, kv_heads, mask=None, causal=False, window=0):
    """attention on the projections' token-major layout, with no split into heads: q (B, Tq, H dh), k
    and v (B, Tk, G dh) with H % G == 0; ``mask``, ``causal`` and ``window`` as in attention. Returns
    (B, Tq, H dh)."""
    _vars("attention_token_major", q, k, v)
    w = _window("attention_token_major", window)
    m = None if mask is None else as_mask(mask, "attention mask")
    out = _core.attention_token_major(q._v, k._v, v._v, int(heads), int(kv_heads), m, bool(causal), w)
    return Var(out, q.tape)


def linear(x, weight, bias):
    """x W + b in one node: x (..., d), weight (d, n), bias (n) added to every row."""
    _vars("linear", x, weight, bias)
    return Var(_core.linear(x._v, weight._v, bias._v), x.tape)


def linear_gelu(x, weight, bias):
    """gelu(x W + b) in one node (the tanh approximation, as gelu): shapes as in linear."""
    _vars("linear_gelu", x, weight, bias)
    return Var(_core.linear_gelu(x._v, weight._v, bias._v), x.tape)


def linear_gelu_exact(x, weight, bias):
    """gelu_exact(x W + b) in one node: shapes as in linear."""
    _vars("linear_gelu_exact", x, weight, bias)
    return Var(_core.linear_gelu_exact(x._v, weight._v, bias._v), x.tape)


__all__ = [
    "add", "sub", "mul", "div", "scale", "add_scalar", "neg", "exp", "log", "sqrt", "rsqrt", "pow", "tanh",
    "relu", "sigmoid", "gelu", "sum", "mean", "max", "variance", "reshape", "permute", "transpose", "slice",
    "concat", "stack", "embedding", "abs", "sin", "cos", "maximum", "minimum", "where", "clip",
    "take_along_axis", "take", "scatter_add", "matmul", "masked_softmax", "softmax", "attention", "log_softmax",
    "cross_entropy",
    "layer_norm", "dropout", "erf", "silu", "gelu_exact", "swiglu", "rms_norm", "rope", "softcap",
    "attention_token_major", "linear", "linear_gelu", "linear_gelu_exact",
]
