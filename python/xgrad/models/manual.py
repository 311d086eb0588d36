"""Multi-head attention with its backward derived by hand (models/mha_manual.hpp), on NumPy arrays, no
tape: Listing 20.2's forward and Listing 20.3's backward, to compare with the tape and with finite
differences (the chapter's three-way check). Every array in and out is a copy.

>>> out, cache = mha_forward(X, X, X, W_Q, W_K, W_V, W_O, heads=2, causal=True)
>>> g = mha_backward(np.ones_like(out), cache)     # g["W_Q"], ...; for self-attention dX = Xq + Xk + Xv
"""

import numpy as np

from .. import _core
from .._tape import _dtype_of, as_float_array, as_mask


class MHACache:
    """What mha_backward needs, saved by mha_forward. ``q``, ``k``, ``v`` (split heads), ``weights``
    (the softmax P, (B, H, Tq, Tk)), ``joined`` (combined heads, before W_O) and ``mask`` (the combined
    mask broadcast to (B, H, Tq, Tk), or None) are copies."""

    def __init__(self, core_cache, dtype):
        self._c, self.dtype = core_cache, dtype

    q = property(lambda self: self._c.q())
    k = property(lambda self: self._c.k())
    v = property(lambda self: self._c.v())
    weights = property(lambda self: self._c.weights())
    joined = property(lambda self: self._c.joined())
    mask = property(lambda self: self._c.mask())


def mha_forward(xq, xk, xv, W_Q, W_K, W_V, W_O, heads, kv_heads=None, mask=None, causal=False, dtype="float64"):
    """Listing 20.2 on arrays: returns (output (B, Tq, d), MHACache). Shapes as
    xgrad.models.multi_head_attention; computed in ``dtype``. Bad shapes: ValueError."""
    dtype = _dtype_of(dtype)
    arrays = [as_float_array(a, dtype, "mha_forward") for a in (xq, xk, xv, W_Q, W_K, W_V, W_O)]
    if arrays[3].ndim != 2:
        raise ValueError("mha_forward: W_Q must be (d, d), got shape %s" % (arrays[3].shape,))
    m = None if mask is None else as_mask(mask, "mha_forward mask")
    forward = _core.manual_mha_forward_f64 if dtype is np.float64 else _core.manual_mha_forward_f32
    out, cache = forward(*arrays, int(heads), int(kv_heads or 0), m, bool(causal))
    return out, MHACache(cache, dtype)


def mha_backward(grad_output, cache):
    """Listing 20.3: the gradients of every input given dL/d output (B, Tq, d), as a dict with keys
    "Xq", "Xk", "Xv", "W_Q", "W_K", "W_V", "W_O" (for self-attention, dX = Xq + Xk + Xv)."""
    if not isinstance(cache, MHACache):
        raise ValueError("mha_backward: expected the MHACache of mha_forward, got %s" % type(cache).__name__)
    return _core.manual_mha_backward(as_float_array(grad_output, cache.dtype, "mha_backward"), cache._c)
