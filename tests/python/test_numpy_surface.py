"""The NumPy-shaped surface: softmax along any axis, stack, negative slice bounds, rope on (..., T, dh)
at any positions, attention with any leading axes; each against NumPy and with a float64 gradcheck."""

import numpy as np
import pytest

import xgrad
from xgrad import ops

rng = np.random.default_rng(34)


def np_softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("axis", [0, 1, -1, -3])
def test_softmax_and_log_softmax_along_any_axis(axis):
    a = rng.standard_normal((2, 3, 4))
    t = xgrad.Tape()
    x = t.input(a)
    np.testing.assert_allclose(x.softmax(axis=axis).value, np_softmax(a, axis), rtol=1e-13)
    np.testing.assert_allclose(x.log_softmax(axis).value, np.log(np_softmax(a, axis)), rtol=1e-12)
    np.testing.assert_allclose(ops.softmax(x, 2.0, axis=axis).value, np_softmax(2 * a, axis), rtol=1e-13)
    w = rng.standard_normal(a.shape)
    assert xgrad.gradcheck(lambda x: (x.softmax(axis=axis) * w).sum(), [a])
    assert xgrad.gradcheck(lambda x: (ops.log_softmax(x, axis) * w).sum(), [a])


def test_stack_like_numpy():
    parts = [rng.standard_normal((2, 3)) for _ in range(3)]
    t = xgrad.Tape()
    vs = [t.input(p) for p in parts]
    for axis in (0, 1, 2, -1):
        np.testing.assert_array_equal(ops.stack(vs, axis).value, np.stack(parts, axis))
    w = rng.standard_normal((2, 3, 3))
    assert xgrad.gradcheck(lambda a, b, c: (ops.stack([a, b, c], -1) * w).sum(), parts)
    with pytest.raises(ValueError, match="stack: part 1 has shape"):
        ops.stack([vs[0], vs[0].reshape(3, 2)])


def test_slice_with_negative_bounds():
    a = np.arange(10.0)
    x = xgrad.Tape().input(a)
    np.testing.assert_array_equal(ops.slice(x, 0, -3, -1).value, a[-3:-1])
    np.testing.assert_array_equal(ops.slice(x, -1, 2, -2).value, a[2:-2])
    with pytest.raises(ValueError, match="out of range"):
        ops.slice(x, 0, -11, 2)


def np_rope(x, positions, base):
    dh = x.shape[-1]
    angles = np.asarray(positions)[:, None] * base ** (-np.arange(0, dh, 2) / dh)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * np.cos(angles) - b * np.sin(angles)
    out[..., 1::2] = a * np.sin(angles) + b * np.cos(angles)
    return out


@pytest.mark.parametrize("shape", [(5, 4), (3, 5, 6), (2, 2, 1, 5, 4)])
def test_rope_on_any_leading_axes_at_any_positions(shape):
    a = rng.standard_normal(shape)
    positions = rng.permutation(40)[:shape[-2]]
    t = xgrad.Tape()
    x = t.input(a)
    np.testing.assert_allclose(ops.rope(x, 100.0, positions).value, np_rope(a, positions, 100.0), rtol=1e-12,
                               atol=1e-14)
    np.testing.assert_allclose(ops.rope(x, position_offset=3).value,
                               np_rope(a, 3 + np.arange(shape[-2]), 10000.0), rtol=1e-12, atol=1e-14)
    w = rng.standard_normal(shape)
    assert xgrad.gradcheck(lambda x: (ops.rope(x, 100.0, positions) * w).sum(), [a])


def test_rope_composed_equals_the_fused_op_on_four_axes():
    a = rng.standard_normal((2, 3, 5, 8))
    t = xgrad.Tape()
    x = t.input(a)
    fused = ops.rope(x, 500.0, position_offset=4)
    assert fused.op == "rope"
    assert ops.rope(x, 500.0, positions=4 + np.arange(5)).op == "rope"
    shuffled = np.array([4, 5, 6, 8, 7])
    composed = ops.rope(x, 500.0, positions=shuffled)
    assert composed.op != "rope"
    np.testing.assert_allclose(fused.value[:, :, :3], composed.value[:, :, :3], rtol=1e-13, atol=1e-15)
    with pytest.raises(ValueError, match="positions must be 5 integers"):
        ops.rope(x, positions=np.arange(4))
    with pytest.raises(ValueError, match="dh even"):
        ops.rope(t.input(np.ones((3, 5))))


def np_attention(q, k, v, keep):
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    s = np.where(keep, s, -np.inf)
    return np_softmax(s, -1) @ v


@pytest.mark.parametrize("lead", [(), (3,), (2, 3, 2)])
def test_attention_with_any_leading_axes(lead):
    q = rng.standard_normal(lead + (4, 6))
    k = rng.standard_normal(lead + (5, 6))
    v = rng.standard_normal(lead + (5, 6))
    keep = np.tril(np.ones((4, 5), dtype=bool), k=1)
    t = xgrad.Tape()
    out = ops.attention(t.input(q), t.input(k), t.input(v), mask=keep)
    assert out.shape == lead + (4, 6)
    np.testing.assert_allclose(out.value, np_attention(q, k, v, keep), rtol=1e-12, atol=1e-14)
    causal = ops.attention(t.input(q), t.input(k), t.input(v), causal=True)
    keep_causal = xgrad.models.causal_mask(4, 5)
    np.testing.assert_allclose(causal.value, np_attention(q, k, v, keep_causal), rtol=1e-12, atol=1e-14)
    w = rng.standard_normal(lead + (4, 6))
    assert xgrad.gradcheck(lambda q, k, v: (ops.attention(q, k, v, mask=keep) * w).sum(), [q, k, v])


@pytest.mark.parametrize("window", [1, 2, 5, 9])
def test_attention_sliding_window_is_the_causal_band(window):
    # SPEC: query i (at position t = i + Tk - Tq) sees keys s with t - w < s <= t.
    q, k, v = rng.standard_normal((2, 4, 6)), rng.standard_normal((2, 7, 6)), rng.standard_normal((2, 7, 6))
    t_pos = np.arange(4)[:, None] + 3
    s_pos = np.arange(7)[None, :]
    keep = (s_pos <= t_pos) & (s_pos > t_pos - window)
    t = xgrad.Tape()
    out = ops.attention(t.input(q), t.input(k), t.input(v), causal=True, window=window)
    np.testing.assert_allclose(out.value, np_attention(q, k, v, keep), rtol=1e-12, atol=1e-14)
    w = rng.standard_normal((2, 4, 6))
    assert xgrad.gradcheck(lambda q, k, v: (ops.attention(q, k, v, causal=True, window=window) * w).sum(),
                           [q, k, v])


def test_attention_window_needs_causal_and_a_count():
    t = xgrad.Tape()
    x = t.input(np.ones((1, 1, 3, 2)))
    with pytest.raises(ValueError, match="needs causal"):
        ops.attention(x, x, x, window=2)
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match=r"window must be an integer in \[0, "):
            ops.attention(x, x, x, causal=True, window=bad)
        with pytest.raises(ValueError, match=r"window must be an integer in \[0, "):
            ops.attention_token_major(t.input(np.ones((1, 3, 2))), t.input(np.ones((1, 3, 2))),
                                      t.input(np.ones((1, 3, 2))), 1, 1, causal=True, window=bad)


def test_attention_leading_axes_must_agree():
    t = xgrad.Tape()
    with pytest.raises(ValueError, match="same leading axes"):
        ops.attention(t.input(np.ones((2, 4, 3))), t.input(np.ones((3, 4, 3))), t.input(np.ones((3, 4, 3))))


@pytest.mark.parametrize("shape", [(6, 8), (2, 6, 8), (2, 3, 6, 8)])
def test_split_and_combine_heads_on_any_leading_axes(shape):
    a = rng.standard_normal(shape)
    x = xgrad.Tape().input(a)
    split = xgrad.models.split_heads(x, 2)
    want = np.swapaxes(a.reshape(shape[:-1] + (2, 4)), -3, -2)
    np.testing.assert_array_equal(split.value, want)
    np.testing.assert_array_equal(xgrad.models.combine_heads(split).value, a)
    with pytest.raises(ValueError, match="divisible by heads"):
        xgrad.models.split_heads(xgrad.Tape().input(np.ones((4, 6))), 4)


INDEX_KEYS = [
    1, -1, (0, 2), (slice(1, None), slice(None, None, 2)), (Ellipsis, -1), [0, 2, 2], (None, 1),
    (slice(None, None, -1), slice(-3, -1)), (slice(None), [1, 0], None),
    (np.array([[0, 1], [2, 2]]), Ellipsis),
    (Ellipsis, None, slice(4, 0, -2)), (1, [0, 3], slice(None)), (1, 2, 3), (-1, -1, -1),
]


@pytest.mark.parametrize("key", INDEX_KEYS, ids=[repr(k) for k in INDEX_KEYS])
def test_indexing_like_numpy_with_scatter_add_gradients(key):
    a = rng.standard_normal((3, 4, 5))
    x = xgrad.Tape().input(a)
    y = x[key]
    assert y.shape == np.shape(a[key])  # one element is NumPy's shape (), not (1,)
    np.testing.assert_array_equal(y.value, a[key])
    assert y.op == "take"
    w = rng.standard_normal(a[key].shape)
    assert xgrad.gradcheck(lambda x: (x[key] * w).sum(), [a])


def test_boolean_mask_indexing_and_repeated_positions_accumulate():
    a = rng.standard_normal((3, 4))
    t = xgrad.Tape()
    x = t.input(a)
    mask = a > 0
    np.testing.assert_array_equal(x[mask].value, a[mask])
    x[[0, 0, 2]].sum().backward()
    np.testing.assert_array_equal(x.grad, np.array([[2.0] * 4, [0.0] * 4, [1.0] * 4]))
    with pytest.raises(IndexError, match=r"Var\[...\]: .*shape \(3, 4\)"):
        x[5]
    with pytest.raises(TypeError, match="index with arrays, not vars"):
        x[x]
    with pytest.raises(TypeError, match="does not support item assignment"):
        x[0] = 1.0


def test_zero_dimensional_arrays_stay_zero_dimensional():
    t = xgrad.Tape()
    w = t.input(np.arange(6.0).reshape(3, 2))
    assert xgrad.ops.embedding(w, np.array(1)).shape == (2,)  # ids.shape + (d,)
    x = t.input(np.array([1.0, -2.0]))
    assert xgrad.ops.where(np.array(True), x, -x).shape == (2,)
    assert xgrad.ops.stack([x[0], x[1]]).shape == (2,)
    x[1].backward()
    np.testing.assert_array_equal(x.grad, [0.0, 1.0])


def test_take_along_axis_like_numpy():
    a = rng.standard_normal((3, 5))
    ids = np.array([[4], [0], [-1]])
    x = xgrad.Tape().input(a)
    np.testing.assert_array_equal(xgrad.ops.take_along_axis(x, ids, 1).value, np.take_along_axis(a, ids, 1))
    np.testing.assert_array_equal(xgrad.ops.take_along_axis(x, np.array([[0, 2, 1, 1, 0]]), 0).value,
                                  np.take_along_axis(a, np.array([[0, 2, 1, 1, 0]]), 0))
    # cross-entropy without a one-hot matrix: -log softmax picked at the targets
    targets = np.array([1, 4, 0])
    loss = -xgrad.ops.take_along_axis(x.log_softmax(), targets[:, None], 1).mean()
    assert loss.value == pytest.approx(xgrad.ops.cross_entropy(x, targets).value, rel=1e-14)
    assert xgrad.gradcheck(lambda x: xgrad.ops.take_along_axis(x, ids, 1).tanh().sum(), [a])
    with pytest.raises(ValueError, match="take_along_axis: indices must be an integer array"):
        xgrad.ops.take_along_axis(x, np.array([[0.5]]), 1)


@pytest.mark.parametrize("name, reference", [("abs", np.abs), ("sin", np.sin), ("cos", np.cos)])
def test_abs_sin_cos(name, reference):
    a = rng.standard_normal((3, 4))
    x = xgrad.Tape().input(a)
    np.testing.assert_allclose(getattr(x, name)().value, reference(a), rtol=1e-15, atol=1e-16)
    np.testing.assert_allclose(getattr(xgrad.ops, name)(x).value, reference(a), rtol=1e-15, atol=1e-16)
    assert xgrad.gradcheck(lambda x: getattr(x, name)().sum(), [a])
    np.testing.assert_array_equal(abs(x).value, np.abs(a))


def test_pow_with_vars_arrays_and_numbers():
    a = rng.uniform(0.5, 2.0, (2, 3))
    b = rng.standard_normal(3)
    t = xgrad.Tape()
    x, e = t.input(a), t.input(b)
    np.testing.assert_allclose((x ** e).value, a ** b, rtol=1e-15)
    np.testing.assert_allclose((x ** b).value, a ** b, rtol=1e-15)
    np.testing.assert_allclose((2.0 ** e).value, 2.0 ** b, rtol=1e-15)
    np.testing.assert_allclose(xgrad.ops.pow(x, e).value, a ** b, rtol=1e-15)
    assert (x ** 2).op == "pow"
    assert xgrad.gradcheck(lambda x, e: (x ** e).sum(), [a, b])
    assert xgrad.gradcheck(lambda e: (3.0 ** e).sum(), [b])


def test_where_maximum_minimum_clip():
    a = rng.standard_normal((2, 3))
    b = rng.standard_normal(3)
    t = xgrad.Tape()
    x, y = t.input(a), t.input(b)
    cond = a > 0
    np.testing.assert_array_equal(xgrad.ops.where(cond, x, y).value, np.where(cond, a, b))
    np.testing.assert_array_equal(xgrad.ops.where(cond, x, 0.0).value, np.where(cond, a, 0.0))
    np.testing.assert_array_equal(xgrad.ops.maximum(x, y).value, np.maximum(a, b))
    np.testing.assert_array_equal(xgrad.ops.minimum(x, 0.0).value, np.minimum(a, 0.0))
    np.testing.assert_array_equal(xgrad.ops.clip(x, -0.5, 0.5).value, np.clip(a, -0.5, 0.5))
    np.testing.assert_array_equal(xgrad.ops.clip(x, None, 0.1).value, np.clip(a, None, 0.1))
    assert xgrad.gradcheck(lambda x, y: xgrad.ops.where(cond, x, y).sum(), [a, b])
    assert xgrad.gradcheck(lambda x, y: (xgrad.ops.maximum(x, y) * 2).sum(), [a, b])
    assert xgrad.gradcheck(lambda x: xgrad.ops.clip(x, -0.5, 0.5).sum(), [a])
    with pytest.raises(ValueError, match="where: cond must be a bool array"):
        xgrad.ops.where(a, x, y)
    with pytest.raises(ValueError, match="clip: needs lo <= hi"):
        xgrad.ops.clip(x, 1.0, 0.0)


def test_take_and_scatter_add_are_adjoint():
    a = rng.standard_normal(6)
    x = xgrad.Tape().input(a)
    p = np.array([[5, 0], [0, 3]])
    np.testing.assert_array_equal(xgrad.ops.take(x, p).value, np.take(a, p))
    s = xgrad.ops.scatter_add(xgrad.ops.take(x, p), p, (6,))
    want = np.zeros(6)
    np.add.at(want, p, np.take(a, p))
    np.testing.assert_array_equal(s.value, want)
    v0 = rng.standard_normal((2, 2))
    assert xgrad.gradcheck(lambda v: (xgrad.ops.scatter_add(v, p, (6,)) ** 2).sum(), [v0])


@pytest.mark.parametrize("name", ["index", "take_along_axis", "abs", "sin", "cos", "pow", "where", "maximum",
                                  "minimum", "clip"])
def test_the_numpy_shaped_ops_are_twice_differentiable(name):
    a = rng.uniform(0.5, 1.5, (3, 4)) * np.sign(rng.standard_normal((3, 4)))
    b = rng.uniform(0.5, 1.5, 4)
    functions = {
        "index": lambda x, y: x[[0, 2, 2], ::-2].sin(),
        "take_along_axis": lambda x, y: xgrad.ops.take_along_axis(x.sin(), np.array([[3], [0], [3]]), 1),
        "abs": lambda x, y: x.sin().abs(),
        "sin": lambda x, y: x.sin(),
        "cos": lambda x, y: x.cos(),
        "pow": lambda x, y: x.abs() ** y,
        "where": lambda x, y: xgrad.ops.where(a > 0, x.sin(), y.cos()),
        "maximum": lambda x, y: xgrad.ops.maximum(x.sin(), y.cos()),
        "minimum": lambda x, y: xgrad.ops.minimum(x.cos(), y.sin()),
        "clip": lambda x, y: xgrad.ops.clip(x.sin(), -0.8, 0.8),
    }
    assert xgrad.gradgradcheck(functions[name], [a, b])
