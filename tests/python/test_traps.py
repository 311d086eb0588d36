"""What used to trap a new user now behaves clearly (issue: a course can be taught on it)."""

import numpy as np
import pytest

import xgrad


def test_grad_of_an_intermediate_after_backward_raises_instead_of_zeros():
    t = xgrad.Tape()
    x = t.input(np.array([1.0, 2.0]))
    h = (x * x).named("h")
    loss = h.sum()
    loss.backward()
    with pytest.raises(RuntimeError, match=r"intermediate result \(op 'mul', label 'h'\).*retain_graph=True"):
        h.grad
    np.testing.assert_array_equal(x.grad, [2.0, 4.0])  # leaves keep theirs
    np.testing.assert_array_equal(loss.grad, 1.0)      # so does the root


def test_grad_of_an_intermediate_with_retain_graph_or_off_the_path():
    t = xgrad.Tape()
    x = t.input(np.array([1.0, 2.0]))
    h = x * x
    unused = x * 3
    h.sum().backward(retain_graph=True)
    np.testing.assert_array_equal(h.grad, [1.0, 1.0])
    np.testing.assert_array_equal(unused.grad, [0.0, 0.0])  # no gradient arrived: zeros, as documented


def test_max_defaults_to_every_axis_like_numpy():
    t = xgrad.Tape()
    a = np.array([[1.0, 5.0], [7.0, 2.0]])
    x = t.input(a)
    m = x.max()
    assert m.shape == () and m.value == a.max()
    assert x.max(keepdims=True).shape == (1, 1)
    assert xgrad.ops.max(x).value == 7.0
    np.testing.assert_array_equal(x.max(axis=1).value, a.max(axis=1))
    m.backward()
    np.testing.assert_array_equal(x.grad, [[0, 0], [1, 0]])
    with pytest.raises(ValueError, match="max: one axis or None"):
        x.max(axis=(0, 1))


def test_ops_take_arrays_and_numbers_as_the_operators_do():
    t = xgrad.Tape()
    v = t.input(np.array([1.0, 2.0]))
    a = np.array([[3.0, 4.0]])
    np.testing.assert_array_equal(xgrad.ops.mul(v, a).value, (v * a).value)
    np.testing.assert_array_equal(xgrad.ops.sub(a, v).value, (a - v).value)
    np.testing.assert_array_equal(xgrad.ops.add(v, 2).value, [3.0, 4.0])
    with pytest.raises(ValueError, match="at least one operand must be an xgrad.Var"):
        xgrad.ops.add(a, a)


def test_mixing_float64_and_float32_names_the_dtypes():
    a = xgrad.Tape().input(np.ones(2))
    b = xgrad.Tape(dtype="float32").input(np.ones(2))
    with pytest.raises(ValueError, match="a float64 var and a float32 var"):
        a + b
    with pytest.raises(ValueError, match="matmul: a float64 var and a float32 var"):
        xgrad.ops.matmul(a.reshape(1, 2), b.reshape(2, 1))
    c = xgrad.Tape().input(np.ones(2))
    with pytest.raises(ValueError, match="different tapes"):
        a + c


def test_the_default_dtype_is_float64_and_says_so():
    assert xgrad.Tape().dtype is np.float64
    assert "default is float64" in xgrad.Tape.__doc__
