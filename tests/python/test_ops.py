# xgrad.ops: every op of ops/ops.hpp is there under its C++ name, each passes a float64 gradcheck through
# the Python API, and bad arguments (ids, masks, dropout p) are exceptions, never crashes.
import os
import re

import numpy as np
import pytest

import xgrad
from xgrad import ops

rng = np.random.default_rng(7)


def cpp_op_names(source_dir):
    text = open(os.path.join(source_dir, "ops", "ops.hpp")).read()
    return sorted(set(re.findall(r"var<T> (\w+)\(", text)))


def test_every_cpp_op_is_exposed_under_its_name(source_dir):
    names = cpp_op_names(source_dir)
    assert len(names) > 30
    for name in names:
        assert name in ops.__all__ and callable(getattr(ops, name)), name
        assert getattr(ops, name).__doc__, name


positive = np.abs(rng.standard_normal((2, 3))) + 0.5
CHECKS = {
    "add": ([rng.standard_normal((2, 3)), rng.standard_normal(3)], lambda a, b: ops.add(a, b)),
    "sub": ([rng.standard_normal((2, 1)), rng.standard_normal(3)], lambda a, b: ops.sub(a, b)),
    "mul": ([rng.standard_normal((2, 3)), rng.standard_normal((1, 3))], lambda a, b: ops.mul(a, b)),
    "div": ([rng.standard_normal((2, 3)), positive], lambda a, b: ops.div(a, b)),
    "scale": ([rng.standard_normal(4)], lambda a: ops.scale(a, -1.5)),
    "add_scalar": ([rng.standard_normal(4)], lambda a: ops.add_scalar(a, 2.0)),
    "neg": ([rng.standard_normal(4)], lambda a: ops.neg(a)),
    "exp": ([rng.standard_normal(4)], lambda a: ops.exp(a)),
    "log": ([positive], lambda a: ops.log(a)),
    "sqrt": ([positive], lambda a: ops.sqrt(a)),
    "rsqrt": ([positive], lambda a: ops.rsqrt(a)),
    "pow": ([positive], lambda a: ops.pow(a, 2.5)),
    "tanh": ([rng.standard_normal(4)], lambda a: ops.tanh(a)),
    "relu": ([np.array([-1.0, -0.2, 0.3, 2.0])], lambda a: ops.relu(a)),
    "sigmoid": ([rng.standard_normal(4)], lambda a: ops.sigmoid(a)),
    "gelu": ([rng.standard_normal(4)], lambda a: ops.gelu(a)),
    "sum": ([rng.standard_normal((2, 3, 4))], lambda a: ops.sum(a, axis=(0, -1), keepdims=True)),
    "mean": ([rng.standard_normal((2, 3, 4))], lambda a: ops.mean(a, axis=1)),
    "max": ([rng.standard_normal((2, 3, 4))], lambda a: ops.max(a, axis=1)),
    "variance": ([rng.standard_normal((2, 3, 4))], lambda a: ops.variance(a, axis=-1)),
    "reshape": ([rng.standard_normal((2, 6))], lambda a: ops.reshape(a, (3, -1))),
    "permute": ([rng.standard_normal((2, 3, 4))], lambda a: ops.permute(a, (2, 0, 1))),
    "transpose": ([rng.standard_normal((2, 3, 4))], lambda a: ops.transpose(a, 0, 2)),
    "slice": ([rng.standard_normal((2, 5))], lambda a: ops.slice(a, -1, 1, 4)),
    "concat": ([rng.standard_normal((2, 1)), rng.standard_normal((2, 3))], lambda a, b: ops.concat([a, b, a], 1)),
    "abs": ([rng.standard_normal((2, 3))], lambda a: ops.abs(a)),
    "sin": ([rng.standard_normal((2, 3))], lambda a: ops.sin(a)),
    "cos": ([rng.standard_normal((2, 3))], lambda a: ops.cos(a)),
    "maximum": ([rng.standard_normal((2, 3)), rng.standard_normal(3)], lambda a, b: ops.maximum(a, b)),
    "minimum": ([rng.standard_normal((2, 3)), rng.standard_normal(3)], lambda a, b: ops.minimum(a, b)),
    "where": ([rng.standard_normal((2, 3)), rng.standard_normal(3)],
              lambda a, b: ops.where(np.array([[True], [False]]), a, b)),
    "clip": ([rng.standard_normal((2, 3))], lambda a: ops.clip(a, -0.4, 0.6)),
    "take_along_axis": ([rng.standard_normal((2, 3))], lambda a: ops.take_along_axis(a, np.array([[2, 0, 0]]), 1)),
    "take": ([rng.standard_normal((2, 3))], lambda a: ops.take(a, np.array([5, 0, 5]))),
    "scatter_add": ([rng.standard_normal((2, 2))], lambda a: ops.scatter_add(a, np.array([[1, 1], [0, 4]]), (2, 3))),
    "stack": ([rng.standard_normal((2, 3)), rng.standard_normal((2, 3))], lambda a, b: ops.stack([a, b, a], 1)),
    "embedding": ([rng.standard_normal((4, 3))], lambda w: ops.embedding(w, np.array([[3, 0], [3, 3]]))),
    "matmul": ([rng.standard_normal((2, 4, 3)), rng.standard_normal((2, 5, 3))],
               lambda a, b: ops.matmul(a, b, transpose_b=True)),
    "masked_softmax": ([rng.standard_normal((2, 3))],
                       lambda a: ops.masked_softmax(a, np.array([[True, False, True], [False] * 3]), 0.7)),
    "softmax": ([rng.standard_normal((2, 3))], lambda a: ops.softmax(a, 2.0)),
    "attention": ([rng.standard_normal((1, 2, 3, 2)), rng.standard_normal((1, 1, 4, 2)),
                   rng.standard_normal((1, 1, 4, 2))],
                  lambda q, k, v: ops.attention(q, k, v, mask=np.array([True, True, False, True]), causal=True)),
    "attention_token_major": ([rng.standard_normal((1, 3, 4)), rng.standard_normal((1, 4, 2)),
                               rng.standard_normal((1, 4, 2))],
                              lambda q, k, v: ops.attention_token_major(
                                  q, k, v, 2, 1, mask=np.array([True, True, False, True]), causal=True)),
    "linear": ([rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 5)), rng.standard_normal(5)],
               lambda x, w, b: ops.linear(x, w, b)),
    "linear_gelu": ([rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 5)), rng.standard_normal(5)],
                    lambda x, w, b: ops.linear_gelu(x, w, b)),
    "linear_gelu_exact": ([rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 5)), rng.standard_normal(5)],
                          lambda x, w, b: ops.linear_gelu_exact(x, w, b)),
    "log_softmax": ([rng.standard_normal((2, 3))], lambda a: ops.log_softmax(a)),
    "cross_entropy": ([rng.standard_normal((2, 3, 4))],
                      lambda a: ops.cross_entropy(a, np.array([[0, -1, 3], [2, 2, 1]]))),
    "layer_norm": ([rng.standard_normal((2, 5)), rng.standard_normal(5), rng.standard_normal(5)],
                   lambda x, w, b: ops.layer_norm(x, w, b)),
    "dropout": ([rng.standard_normal((3, 4))], lambda a: ops.dropout(a, 0.5, seed=3)),
    "erf": ([rng.standard_normal(4)], lambda a: ops.erf(a)),
    "silu": ([rng.standard_normal(4)], lambda a: ops.silu(a)),
    "gelu_exact": ([rng.standard_normal(4)], lambda a: ops.gelu_exact(a)),
    "swiglu": ([rng.standard_normal((2, 3)), rng.standard_normal((2, 3))], lambda g, u: ops.swiglu(g, u)),
    "rms_norm": ([rng.standard_normal((2, 5)), rng.standard_normal(5)], lambda x, w: ops.rms_norm(x, w)),
    "rope": ([rng.standard_normal((1, 2, 3, 4))], lambda x: ops.rope(x, 100.0, position_offset=2)),
}


def test_every_op_has_a_gradcheck():
    assert sorted(CHECKS) == sorted(ops.__all__)


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_gradcheck(name):
    inputs, f = CHECKS[name]
    assert xgrad.gradcheck(lambda *xs: f(*xs), inputs)


def test_gradcheck_failure_names_the_worst_entry():
    def detached(a, b):  # the product rule's second term lost: the constant copy of a gets no gradient
        return (a * a.tape.constant(a.value) + b).sum()

    with pytest.raises(xgrad.GradcheckError) as e:
        xgrad.gradcheck(detached, [np.array([[0.0, 1.0], [2.0, 3.0]]), np.ones(2)])
    assert e.value.input == 0 and e.value.index == (1, 1)
    assert e.value.analytic == pytest.approx(3) and e.value.numeric == pytest.approx(6)
    assert "input 0 (2, 2) at index (1, 1)" in str(e.value)
    assert xgrad.gradcheck(detached, [np.ones((2, 2)), np.ones(2)], raise_exception=False) is False


def test_gradcheck_of_a_large_input_uses_random_directions():
    a = rng.standard_normal((30, 30))
    assert xgrad.gradcheck(lambda x: (x @ x).tanh(), [a], full_jacobian_limit=100)


def test_gradcheck_lent_tape_expires():
    kept = []
    xgrad.gradcheck(lambda a: kept.append(a.tape) or a.sum(), [np.ones(2)])
    with pytest.raises(RuntimeError, match="gradcheck"):
        kept[0].input(np.ones(1))


def test_gradcheck_errors_of_f_propagate():
    with pytest.raises(ValueError, match="must return an xgrad.Var"):
        xgrad.gradcheck(lambda a: 3.0, [np.ones(2)])
    with pytest.raises(ZeroDivisionError):
        xgrad.gradcheck(lambda a: 1 / 0, [np.ones(2)])


def test_float32_ops_agree_with_float64():
    for name in ("matmul", "layer_norm", "attention", "cross_entropy", "gelu", "masked_softmax"):
        inputs, f = CHECKS[name]
        values = []
        for dtype in ("float64", "float32"):
            t = xgrad.Tape(dtype)
            values.append(f(*[t.input(a) for a in inputs]).value)
        np.testing.assert_allclose(values[1], values[0], rtol=1e-4, atol=1e-5, err_msg=name)


def test_fully_masked_rows_give_zeros_and_no_nan():
    t = xgrad.Tape()
    x = t.input(np.array([[1e30, -1e30, 3.0]]))
    y = ops.masked_softmax(x, np.array([[False, False, False]]))
    y.sum().backward()
    assert not y.value.any() and not x.grad.any()
    q = t.input(np.ones((1, 1, 2, 2)))
    out = ops.attention(q, q, q, mask=np.array([[False, False], [True, False]]))
    out.sum().backward()
    assert np.isfinite(q.grad).all() and not out.value[0, 0, 0].any()


def test_large_logits_stay_finite():
    t = xgrad.Tape()
    x = t.input(np.array([[1000.0, -1000.0, 0.0]]))
    loss = ops.cross_entropy(x, np.array([1]))
    loss.backward()
    assert loss.value == pytest.approx(2000.0) and np.isfinite(x.grad).all()


@pytest.mark.parametrize("call,match", [
    (lambda t: ops.embedding(t.input(np.ones((3, 2))), np.array([0, 3])), "embedding"),
    (lambda t: ops.embedding(t.input(np.ones((3, 2))), np.array([0.0, 1.0])), "integer"),
    (lambda t: ops.embedding(t.input(np.ones((3, 2))), np.array([-2])), "embedding"),
    (lambda t: ops.cross_entropy(t.input(np.ones((2, 3))), np.array([0, 5])), "cross_entropy"),
    (lambda t: ops.cross_entropy(t.input(np.ones((2, 3))), np.array([0, 1, 2])), "cross_entropy"),
    (lambda t: ops.masked_softmax(t.input(np.ones((2, 3))), np.ones((2, 3))), "bool"),
    (lambda t: ops.masked_softmax(t.input(np.ones((2, 3))), np.ones((4, 3), bool)), "masked_softmax"),
    (lambda t: ops.dropout(t.input(np.ones(3)), 1.0), "dropout"),
    (lambda t: ops.dropout(t.input(np.ones(3)), 0.5, seed=-1), "seed"),
    (lambda t: ops.slice(t.input(np.ones(3)), 0, 2, 5), "slice"),
    (lambda t: ops.slice(t.input(np.ones(3)), 0, -5, 2), "slice"),
    (lambda t: ops.concat([], 0), "concat"),
    (lambda t: ops.permute(t.input(np.ones((2, 3))), (0, 0)), "permute"),
    (lambda t: ops.layer_norm(t.input(np.ones((2, 3))), t.input(np.ones(2)), t.input(np.ones(2))), "layer_norm"),
    (lambda t: ops.attention(t.input(np.ones((1, 3, 2, 2))), t.input(np.ones((1, 2, 2, 2))),
                             t.input(np.ones((1, 2, 2, 2)))), "attention"),
    (lambda t: ops.add(np.ones(2), np.ones(2)), "xgrad.Var"),
])
def test_bad_arguments_are_value_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call(xgrad.Tape())
