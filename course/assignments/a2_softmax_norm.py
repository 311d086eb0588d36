"""Assignment 2: the backward of softmax, masked softmax and layer norm, on NumPy arrays.

Each function gets what the forward pass produced and the gradient of the loss with respect to the
output (``grad``), and returns the gradient(s) with respect to the input(s). Everything is along the
last axis; leading axes are rows (any number of them).

Grade it: ``python3 -m xgrad.course check DIR --exercise 2``.
"""

import numpy as np


def softmax_backward(y, grad):
    """y = softmax(x) along the last axis (given); returns dL/dx."""
    raise NotImplementedError("softmax_backward")


def masked_softmax_backward(y, grad, mask):
    """y = softmax of x among the entries where ``mask`` (bool, x's shape) is True, 0 where it is False;
    a row with no True entry is all 0. Returns dL/dx (0 at masked entries, never NaN)."""
    raise NotImplementedError("masked_softmax_backward")


def layer_norm_forward(x, weight, bias, eps=1e-5):
    """Given: y = (x - mean) / sqrt(var + eps) * weight + bias along the last axis (var biased)."""
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def layer_norm_backward(x, weight, grad, eps=1e-5):
    """Returns (dL/dx, dL/dweight, dL/dbias) for layer_norm_forward(x, weight, bias, eps)."""
    raise NotImplementedError("layer_norm_backward")
