"""Models: multi-head attention composed on the tape (models/mha.hpp), its hand-derived twin on arrays
(``xgrad.models.manual``), masks, counting, and the small GPT (``xgrad.models.GPT``, also ``xgrad.GPT``).

Row-vector convention: ``Q = Xq @ W_Q`` with inputs (B, T, d) and weights (d_in, d_out); head h owns
columns [h dh, (h+1) dh) of W_Q, W_K, W_V and rows [h dh, (h+1) dh) of W_O; scores are scaled by
1/sqrt(dh). Masks are bool, True = this query may attend to this key, broadcast to (B, H, Tq, Tk);
causal is bottom-right aligned. A query row with every key masked gives weights 0 and output 0.
"""

from .. import _core
from .._tape import Var, as_mask, whole_number
from ..ops import _vars
from . import manual
from .gpt import GPT, GPTOutput


def multi_head_attention(xq, xk, xv, W_Q, W_K, W_V, W_O, heads, kv_heads=None, mask=None, causal=False,
                         fused=False):
    """Cross-attention composed from primitive ops: queries from Xq (B, Tq, d), keys and values from
    Xk, Xv (B, Tk, d). W_Q, W_O (d, d); W_K, W_V (d, G dh) with G = kv_heads (default H). Returns
    (output (B, Tq, d), attention weights (B, H, Tq, Tk)) as vars; with ``fused`` attention is the one
    fused op (online softmax, no weights kept) and the weights are None. Bad shapes: ValueError."""
    _vars("multi_head_attention", xq, xk, xv, W_Q, W_K, W_V, W_O)
    m = None if mask is None else as_mask(mask, "multi_head_attention mask")
    heads = whole_number("multi_head_attention: heads", heads, low=1)
    kv_heads = whole_number("multi_head_attention: kv_heads", kv_heads or 0)  # 0: as many as heads
    out, weights = _core.multi_head_attention(xq._v, xk._v, xv._v, W_Q._v, W_K._v, W_V._v, W_O._v, heads,
                                              kv_heads, m, bool(causal), bool(fused))
    return Var(out, xq.tape), None if weights is None else Var(weights, xq.tape)


def self_attention(x, W_Q, W_K, W_V, W_O, heads, kv_heads=None, mask=None, causal=False, fused=False):
    """Self-attention: one X (B, T, d) feeds the three projections, so its gradient is the sum of the three
    paths. Otherwise as multi_head_attention; returns (output, attention weights)."""
    return multi_head_attention(x, x, x, W_Q, W_K, W_V, W_O, heads, kv_heads, mask, causal, fused)


def split_heads(x, heads):
    """(..., T, d) -> reshape (..., T, H, dh) -> swap the last two but one (..., H, T, dh), on the tape
    (one node for (B, T, d))."""
    _vars("split_heads", x)
    if x.ndim == 3:
        return Var(_core.split_heads(x._v, int(heads)), x.tape)
    if x.ndim < 2 or heads < 1 or x.shape[-1] % heads:
        raise ValueError("split_heads: input must be (..., T, d) with d divisible by heads = %d, got shape %s"
                         % (heads, x.shape))
    return x.reshape(x.shape[:-1] + (heads, x.shape[-1] // heads)).transpose(-3, -2)


def combine_heads(x):
    """(..., H, T, dh) -> swap (..., T, H, dh) -> reshape (..., T, H dh), on the tape (one node for 4
    axes)."""
    _vars("combine_heads", x)
    if x.ndim == 4:
        return Var(_core.combine_heads(x._v), x.tape)
    if x.ndim < 3:
        raise ValueError("combine_heads: input must be (..., H, T, dh), got shape %s" % (x.shape,))
    swapped = x.transpose(-3, -2)
    return swapped.reshape(swapped.shape[:-2] + (swapped.shape[-2] * swapped.shape[-1],))


def causal_mask(tq, tk):
    """The (Tq, Tk) bool causal mask, bottom-right aligned: query i sees key j iff j <= i + (Tk - Tq)."""
    return _core.causal_mask(int(tq), int(tk))


def padding_mask(lengths, tk):
    """A (B, 1, 1, Tk) bool padding mask: key j of sequence b is kept iff j < lengths[b]."""
    return _core.padding_mask([int(n) for n in lengths], int(tk))


def parameter_count(d_model, heads=1, kv_heads=None):
    """Parameters of MHA without biases: 4 d^2, or 2 d^2 + 2 d (G dh) with G key/value heads."""
    return _core.mha_parameter_count(int(d_model), int(heads), int(kv_heads or 0))


def self_attention_multiply_adds(batch, length, d_model):
    """Equation (20.5): 4 B T d^2 + 2 B T^2 d multiply-adds (FLOPs are twice this) for the forward pass."""
    return _core.self_attention_multiply_adds(int(batch), int(length), int(d_model))


def cross_attention_multiply_adds(batch, tq, tk, d_model, heads=1, kv_heads=None):
    """2 B Tq d^2 + 2 B Tk d^2 + 2 B Tq Tk d multiply-adds (K, V projections d x G dh with G kv heads)."""
    return _core.cross_attention_multiply_adds(int(batch), int(tq), int(tk), int(d_model), int(heads),
                                               int(kv_heads or 0))


__all__ = ["multi_head_attention", "self_attention", "split_heads", "combine_heads", "causal_mask",
           "padding_mask", "parameter_count", "self_attention_multiply_adds", "cross_attention_multiply_adds",
           "manual", "GPT", "GPTOutput"]
