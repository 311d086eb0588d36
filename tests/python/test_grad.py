# xgrad.grad, xgrad.gradgradcheck and xgrad.hvp: gradients of gradients from Python. Every op of xgrad.ops
# has a gradgradcheck case here (a test fails when one is added without one); bad input raises ValueError.
import numpy as np
import pytest

import xgrad
from xgrad import ops

rng = np.random.default_rng(0)


def r(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape)


def away_from_zero(*shape):
    return r(*shape, lo=0.3, hi=1.3) * np.where(r(*shape) > 0, 1.0, -1.0)


def sq(x):
    return x * x


MASK = np.array([[True, False, True, True], [False, False, False, False], [True, True, False, True]])
PADDING = np.ones((1, 1, 3, 3), dtype=bool)
PADDING[0, 0, 2, :] = False

# op name -> list of (f, inputs); f takes vars, returns a var.
CASES = {
    "add": [(lambda a, b: a + b, [r(2, 3), r(3)]), (lambda a: ops.add(a, a), [r(2, 3)])],
    "sub": [(lambda a, b: ops.sub(a, b), [r(2, 3), r(2, 1)])],
    "mul": [(lambda a, b: ops.mul(a, b), [r(2, 3), r(3)]), (lambda a: a * a * a, [r(1)])],
    "div": [(lambda a, b: ops.div(a, b), [r(2, 3), away_from_zero(3)])],
    "scale": [(lambda a: ops.scale(sq(a), 2.5), [r(2, 3)])],
    "add_scalar": [(lambda a: sq(ops.add_scalar(a, 1.0)), [r(2, 3)])],
    "neg": [(lambda a: ops.neg(sq(a)), [r(2, 3)])],
    "exp": [(ops.exp, [r(2, 3)])],
    "log": [(ops.log, [r(2, 3, lo=0.5, hi=2.0)])],
    "sqrt": [(ops.sqrt, [r(2, 3, lo=0.5, hi=2.0)])],
    "rsqrt": [(ops.rsqrt, [r(2, 3, lo=0.5, hi=2.0)])],
    "pow": [(lambda a: ops.pow(a, 3.0), [r(2, 3)]), (lambda a: ops.pow(a, 2.5), [r(3, lo=0.5, hi=2.0)])],
    "tanh": [(ops.tanh, [r(2, 3)])],
    "relu": [(lambda a: ops.relu(a) * a, [away_from_zero(2, 3)])],
    "sigmoid": [(ops.sigmoid, [r(2, 3, lo=-3, hi=3)])],
    "gelu": [(ops.gelu, [r(2, 3, lo=-3, hi=3)])],
    "erf": [(ops.erf, [r(2, 3, lo=-2, hi=2)])],
    "silu": [(ops.silu, [r(2, 3, lo=-3, hi=3)])],
    "gelu_exact": [(ops.gelu_exact, [r(2, 3, lo=-3, hi=3)])],
    "swiglu": [(ops.swiglu, [r(2, 3), r(2, 3)])],
    "sum": [(lambda a: sq(ops.sum(a, axis=1, keepdims=True)), [r(2, 3, 4)])],
    "mean": [(lambda a: sq(ops.mean(a, axis=(0, 2))), [r(2, 3, 4)])],
    "max": [(lambda a: sq(ops.max(a, axis=1)), [r(2, 3, 4)])],
    "variance": [(lambda a: ops.variance(a, axis=2), [r(2, 3, 4)])],
    "reshape": [(lambda a: sq(ops.reshape(a, (4, -1))), [r(2, 3, 4)])],
    "permute": [(lambda a: sq(ops.permute(a, (2, 0, 1))), [r(2, 3, 4)])],
    "transpose": [(lambda a: sq(ops.transpose(a, 1, 2)), [r(2, 3, 4)])],
    "slice": [(lambda a: sq(ops.slice(a, 2, 1, 3)), [r(2, 3, 4)])],
    "concat": [(lambda a, b: sq(ops.concat([a, b, a], 1)), [r(2, 3), r(2, 2)])],
    "embedding": [(lambda w: sq(ops.embedding(w, np.array([[1, 0, 1], [3, 1, 0]]))), [r(4, 2)])],
    "matmul": [(lambda a, b: ops.matmul(ops.matmul(a, b, transpose_a=True), b, transpose_b=True),
                [r(3, 2), r(3, 3)]),
               (lambda a, b: sq(a @ b), [r(2, 1, 3, 4), r(3, 4, 2)])],
    "masked_softmax": [(lambda a: ops.masked_softmax(a, MASK, 1.5), [r(2, 3, 4)])],
    "softmax": [(lambda a: ops.softmax(a, 0.7), [r(2, 3, 4)])],
    "log_softmax": [(ops.log_softmax, [r(2, 3, 4)])],
    "cross_entropy": [(lambda a: ops.cross_entropy(a, np.array([[1, -1, 3], [0, -1, 2]])), [r(2, 3, 4)])],
    "layer_norm": [(ops.layer_norm, [r(2, 3, 4), r(4, lo=0.5, hi=1.5), r(4)])],
    "rms_norm": [(ops.rms_norm, [r(2, 3, 4), r(4, lo=0.5, hi=1.5)])],
    "linear": [(lambda x, w, b: sq(ops.linear(x, w, b)), [r(2, 3, 4), r(4, 3), r(3)])],
    "linear_gelu": [(ops.linear_gelu, [r(2, 3, 4), r(4, 3), r(3)])],
    "linear_gelu_exact": [(ops.linear_gelu_exact, [r(2, 3, 4), r(4, 3), r(3)])],
    "dropout": [(lambda a: ops.dropout(sq(a), 0.4, seed=3), [r(2, 3)])],
    "rope": [(lambda a: ops.rope(sq(a), base=100.0, position_offset=2), [r(1, 2, 3, 4)])],
    "attention": [(lambda q, k, v: ops.attention(q, k, v, causal=True),
                   [r(1, 2, 3, 2), r(1, 1, 3, 2), r(1, 1, 3, 2)]),
                  (lambda q, k, v: ops.attention(q, k, v, mask=PADDING),
                   [r(1, 2, 3, 2), r(1, 1, 3, 2), r(1, 1, 3, 2)])],
    "attention_token_major": [(lambda q, k, v: ops.attention_token_major(q, k, v, 2, 1, causal=True),
                               [r(1, 3, 4), r(1, 3, 2), r(1, 3, 2)])],
    # The NumPy-shaped ops, kinks and ties kept away from the inputs.
    "abs": [(lambda a: ops.abs(a) * a, [r(2, 3, lo=0.2, hi=1.0)])],
    "sin": [(ops.sin, [r(2, 3)])],
    "cos": [(ops.cos, [r(2, 3)])],
    "clip": [(lambda a: ops.clip(a, -0.5, 0.5) * a, [r(2, 3, lo=0.6, hi=1.0)])],
    "maximum": [(lambda a, b: ops.maximum(a, b) * a, [r(2, 3), r(3)])],
    "minimum": [(lambda a, b: ops.minimum(a, b) * b, [r(2, 3), r(3)])],
    "where": [(lambda a, b: ops.where(np.array([[True], [False]]), a * a, b * a), [r(2, 3), r(3)])],
    "stack": [(lambda a, b: sq(ops.stack([a, b], 1)), [r(2, 3), r(2, 3)])],
    "take": [(lambda a: sq(ops.take(a, np.array([5, 0, 5, 3]))), [r(2, 3)])],
    "take_along_axis": [(lambda a: sq(ops.take_along_axis(a, np.array([[2, 0], [1, 1]]), 1)), [r(2, 3)])],
    "scatter_add": [(lambda a: sq(ops.scatter_add(a, np.array([5, 0, 5, 3]), (2, 3))), [r(4)])],
}


def test_every_op_has_a_gradgradcheck_case():
    missing = sorted(set(ops.__all__) - set(CASES))
    assert not missing, "ops without a gradgradcheck case in tests/python/test_grad.py: %s" % missing


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradgradcheck_every_op(name):
    for f, inputs in CASES[name]:
        assert xgrad.gradgradcheck(f, inputs)


def test_grad_first_order_equals_backward_and_leaves_grad_untouched():
    t = xgrad.Tape()
    x, w = t.input(r(3, 4)), t.input(r(4, 2))
    y = (x @ w).tanh().sum()
    gx, gw = xgrad.grad(y, [x, w], retain_graph=True)
    assert not gx.requires_grad
    assert np.array_equal(x.grad, np.zeros((3, 4)))
    y.backward()
    np.testing.assert_array_equal(gx.value, x.grad)
    np.testing.assert_array_equal(gw.value, w.grad)


def test_hessian_vector_product_of_a_cube_and_hvp():
    x0, v = r(5), r(5)
    t = xgrad.Tape()
    x = t.input(x0)
    gx, = xgrad.grad((x * x * x).sum(), [x], create_graph=True)
    np.testing.assert_allclose(gx.value, 3 * x0 ** 2, rtol=1e-14)
    hv, = xgrad.grad((gx * v).sum(), [x])  # v an array
    np.testing.assert_allclose(hv.value, 6 * x0 * v, rtol=1e-14)
    value, (hv2,) = xgrad.hvp(lambda x: (x * x * x).sum(), [x0], [v])
    assert value == pytest.approx(np.sum(x0 ** 3))
    np.testing.assert_allclose(hv2, 6 * x0 * v, rtol=1e-14)


def test_seed_gives_the_vector_jacobian_product_and_can_be_a_var():
    t = xgrad.Tape()
    x0, s0 = r(4), r(4)
    x, s = t.input(x0), t.input(s0)
    gx, = xgrad.grad(x * x, [x], seed=s, create_graph=True)  # 2 s x
    np.testing.assert_allclose(gx.value, 2 * s0 * x0)
    gs, = xgrad.grad(gx.sum(), [s])
    np.testing.assert_allclose(gs.value, 2 * x0)


def test_unused_input_gets_zeros():
    t = xgrad.Tape()
    x, unused = t.input(r(3)), t.input(r(2))
    _, gu = xgrad.grad((x * x).sum(), [x, unused], create_graph=True)
    assert np.array_equal(gu.value, np.zeros(2))


def test_bad_input():
    t, other = xgrad.Tape(), xgrad.Tape()
    x = t.input(r(3))
    y = x * x
    with pytest.raises(ValueError, match="seed"):
        xgrad.grad(y, [x])  # not a scalar, no seed
    with pytest.raises(ValueError, match="not on the output's tape"):
        xgrad.grad(y.sum(), [other.input(r(3))])
    with pytest.raises(ValueError, match=r"seed shape \(4\) != output shape \(3\)"):
        xgrad.grad(y, [x], seed=np.ones(4))
    with pytest.raises(ValueError):
        xgrad.grad(y.sum(), [np.ones(3)])
    with pytest.raises(ValueError, match="hvp"):
        xgrad.hvp(lambda a: (a * a).sum(), [r(3)], [r(2)])


def test_a_freed_graph_raises_naming_the_op():
    t = xgrad.Tape()
    x = t.input(r(3))
    y = x.exp().sum()
    xgrad.grad(y, [x])  # frees the rules it used
    with pytest.raises(RuntimeError, match="'sum'"):
        xgrad.grad(y, [x], create_graph=True)


def test_gradgradcheck_raises_when_the_differences_disagree():
    # relu's first derivative jumps at 0: central differences of the backward across the jump (x = 1e-7,
    # eps = 1e-6) see a slope of about 1 / (2 eps) where the rule's second derivative is 0. The error names
    # gradgradcheck and the worst entry.
    with pytest.raises(xgrad.GradcheckError, match="gradgradcheck failed .* input 0"):
        xgrad.gradgradcheck(ops.relu, [np.array([1e-7, 0.5])])


def test_train_run_logs_sharpness(tmp_path):
    data = tmp_path / "text.txt"
    data.write_text("the cat sat on the mat. dogs run fast!\n" * 300)
    xgrad.train.run(data, tmp_path / "run", steps=4, layers=1, d_model=16, heads=2, block_size=16, batch=4,
                    eval_windows=4, sample_tokens=0, progress=False, sharpness_every=2, sharpness_iters=5)
    rows = [line.split(",") for line in (tmp_path / "run" / "log.csv").read_text().splitlines()]
    assert rows[0][-1] == "sharpness"
    assert [row[-1] != "" for row in rows[1:]] == [False, True, False, True]
    assert all(np.isfinite(float(row[-1])) for row in rows[2::2])
    with pytest.raises(ValueError, match="sharpness"):
        xgrad.train.run(data, tmp_path / "bad", steps=1, sharpness_every=-1)
