"""Assignment 3: multi-head self-attention's backward by hand, in NumPy (the chapter's Listing 20.3).

The forward (Listing 20.2) is given: ``mha_forward`` returns the output and a cache of every intermediate.
Conventions (docs/spec.md): row vectors, X (B, T, d), W_Q, W_K, W_V, W_O (d, d); head h owns columns
[h dh, (h+1) dh) of W_Q, W_K, W_V and rows [h dh, (h+1) dh) of W_O; scores scaled by 1/sqrt(dh); the
causal mask lets query i see keys j <= i.

Write ``mha_backward``: it returns a dict of gradients of the loss. "X", "W_Q", "W_K", "W_V" and "W_O"
are required; the intermediates "joined" (B, T, d), "O", "Q", "K", "V" (B, H, T, dh), "P" and "S"
(B, H, T, T) are optional, but every one you give is checked, so that a mistake is located at the first
wrong one (in backward order: joined, W_O, O, P, V, S, Q, K, W_Q, W_K, W_V, X).
Then the same in C++ (course/assignments/cpp/, against models/mha_manual.hpp).

Grade it: ``python3 -m xgrad.course check DIR --exercise 3``.
"""

import numpy as np


def split_heads(x, heads):
    """(B, T, d) -> (B, H, T, dh)."""
    b, t, d = x.shape
    return x.reshape(b, t, heads, d // heads).transpose(0, 2, 1, 3)


def combine_heads(x):
    """(B, H, T, dh) -> (B, T, H dh)."""
    b, h, t, dh = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, t, h * dh)


def mha_forward(X, W_Q, W_K, W_V, W_O, heads):
    """Causal multi-head self-attention: returns (output (B, T, d), cache)."""
    Q, K, V = (split_heads(X @ W, heads) for W in (W_Q, W_K, W_V))
    dh = Q.shape[-1]
    t = X.shape[1]
    mask = np.tril(np.ones((t, t), dtype=bool))
    S = Q @ K.transpose(0, 1, 3, 2) / np.sqrt(dh)
    S_masked = np.where(mask, S, -np.inf)
    P = np.exp(S_masked - S_masked.max(axis=-1, keepdims=True))
    P = P / P.sum(axis=-1, keepdims=True)
    O = P @ V
    joined = combine_heads(O)
    out = joined @ W_O
    cache = dict(X=X, W_Q=W_Q, W_K=W_K, W_V=W_V, W_O=W_O, heads=heads, Q=Q, K=K, V=V, S=S, P=P, O=O,
                 joined=joined, mask=mask)
    return out, cache


def mha_backward(grad_out, cache):
    """dL/d(everything) given dL/d output (B, T, d): a dict, see the module's text."""
    raise NotImplementedError("mha_backward")
