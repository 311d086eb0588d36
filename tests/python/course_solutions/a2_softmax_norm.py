"""Assignment 2, solved as the library's fused rules do it (ops/softmax.cpp, ops/nn.cpp)."""

import numpy as np


def softmax_backward(y, grad):
    return y * (grad - (grad * y).sum(axis=-1, keepdims=True))


def masked_softmax_backward(y, grad, mask):
    return np.where(mask, softmax_backward(y, grad), 0.0)


def layer_norm_forward(x, weight, bias, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def layer_norm_backward(x, weight, grad, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    inv_std = 1 / np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + eps)
    xhat = (x - mean) * inv_std
    rows = tuple(range(x.ndim - 1))
    d_weight = (grad * xhat).sum(axis=rows)
    d_bias = grad.sum(axis=rows)
    d_xhat = grad * weight
    d_x = inv_std * (d_xhat - d_xhat.mean(axis=-1, keepdims=True)
                     - xhat * (d_xhat * xhat).mean(axis=-1, keepdims=True))
    return d_x, d_weight, d_bias
