"""Assignment 1: backward rules of elementwise, reduction, broadcasting and matmul ops, as xgrad.Functions.

Each op below is an ``xgrad.Function``: ``forward`` gets NumPy arrays (one per var input) and returns one
array; ``backward`` gets the gradient of the loss with respect to the output and returns one gradient
per var input, each of its input's shape (docs/python.md, "Your own op in Python"). Replace every
``raise NotImplementedError`` with your code; forward is given where it is one line of NumPy.

Broadcasting: ``Add`` and ``Mul`` take inputs of different shapes as NumPy does (a (3, 4) and a (4,));
the gradient of an input that was broadcast must be summed back to that input's shape: write
``unbroadcast`` first and use it in both.

Grade it: ``python3 -m xgrad.course check DIR --exercise 1``.
"""

import numpy as np

import xgrad


def unbroadcast(grad, shape):
    """``grad`` summed over the axes that broadcasting added (leading ones) or stretched (size 1 in
    ``shape``), so that the result has exactly ``shape``."""
    raise NotImplementedError("unbroadcast")


class Add(xgrad.Function):
    """a + b, broadcasting."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a.shape, b.shape)
        return a + b

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError("write it")


class Mul(xgrad.Function):
    """a * b, broadcasting."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError("write it")


class Exp(xgrad.Function):
    """e^x."""

    @staticmethod
    def forward(ctx, x):
        raise NotImplementedError("write it (and save what backward needs)")

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError("write it")


class Log(xgrad.Function):
    """The natural logarithm (x > 0)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return np.log(x)

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError("write it")


class Sum(xgrad.Function):
    """The sum over one axis (``axis``, an int: NumPy's ``x.sum(axis)``), the axis removed."""

    @staticmethod
    def forward(ctx, x, axis):
        ctx.save_for_backward(x.shape)
        ctx.axis = axis
        return x.sum(axis=axis)

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError("write it")


class MatMul(xgrad.Function):
    """a @ b for matrices a (M, K) and b (K, N)."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError("write it")
