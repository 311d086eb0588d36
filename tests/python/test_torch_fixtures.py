# The Python API against PyTorch: every case of tests/python/make_fixtures.py written with xgrad's operators
# and ops, its output and the gradient of sum(output * w) compared with torch's, in float64 (tight) and
# float32 (loose).
import os

import numpy as np
import pytest

import xgrad
from xgrad import ops

FIXTURES = np.load(os.path.join(os.path.dirname(__file__), "fixtures", "expressions.npz"))


def causal(tq, tk):
    return xgrad.models.causal_mask(tq, tk)


XGRAD_CASES = {
    "broadcast_arith": lambda x, ids, m: ((x[0] * x[1] - x[2] / (x[1] * x[1] + 1) + 2) ** 2 / 3
                                          - (1 - x[0]) + 3 / (x[2] * x[2] + 1) - x[1] * 2 + (-x[0])),
    "array_operands": lambda x, ids, m: ((np.arange(6.0).reshape(2, 3) - x[0]) * (x[1] + np.full(3, 0.5))
                                         / np.array([1.0, 2.0, 4.0])),
    "matmul_batched_broadcast": lambda x, ids, m: x[0] @ x[1],
    "matmul_vectors": lambda x, ids, m: (x[0] @ x[1]) * (x[2] @ x[0]).sum(),
    "unary_chain": lambda x, ids, m: (x[0].relu() + x[0].tanh() + (x[0] / 3).exp() + (x[0] * x[0] + 1).log()
                                      + x[0].sigmoid() + (x[0] * x[0] + 1).sqrt() + (x[0] * x[0] + 2).rsqrt()
                                      + x[0] ** 3),
    "softmax_family": lambda x, ids, m: ops.softmax(x[0], 0.5) + ops.log_softmax(x[0]),
    "cross_entropy_ignore": lambda x, ids, m: ops.cross_entropy(x[0], ids),
    "layer_norm": lambda x, ids, m: ops.layer_norm(x[0], x[1], x[2]),
    "gelu_tanh": lambda x, ids, m: (3 * x[0]).gelu(),
    "reductions": lambda x, ids, m: (x[0].sum(axis=(0, 2)) + x[0].mean(axis=1, keepdims=True).sum()
                                     + x[0].variance(axis=-1).sum(axis=0) + x[0].max(axis=1).sum() + x[0].mean()),
    "embedding_repeat": lambda x, ids, m: ops.embedding(x[0], ids) * 2,
    "shape_ops": lambda x, ids, m: ops.transpose(
        ops.concat([ops.slice(x[0].permute(0, 2, 1).reshape(2, 3, 4), 1, 1, 3), x[1]], axis=1), 0, 2),
    "masked_softmax_fully_masked": lambda x, ids, m: ops.masked_softmax(x[0], m, scale=2.0),
    "attention_gqa_causal": lambda x, ids, m: ops.attention(x[0], x[1], x[2], causal=True),
}

CASE_NAMES = sorted({key.split("/")[0] for key in FIXTURES.files})


def test_every_fixture_case_has_an_xgrad_expression():
    assert sorted(XGRAD_CASES) == CASE_NAMES


@pytest.mark.parametrize("dtype,tolerance", [("float64", 1e-10), ("float32", 2e-4)])
@pytest.mark.parametrize("name", CASE_NAMES)
def test_matches_pytorch(name, dtype, tolerance):
    count = sum(1 for key in FIXTURES.files if key.startswith(name + "/in"))
    inputs = [FIXTURES["%s/in%d" % (name, k)] for k in range(count)]
    ids = FIXTURES[name + "/ids"] if name + "/ids" in FIXTURES.files else None
    mask = FIXTURES[name + "/mask"] if name + "/mask" in FIXTURES.files else None
    t = xgrad.Tape(dtype)
    xs = [t.input(a) for a in inputs]
    out = XGRAD_CASES[name](xs, ids, mask)
    expected = FIXTURES[name + "/out"]
    assert out.shape == expected.shape
    assert out.value.dtype == np.dtype(dtype)
    scale = max(1.0, np.abs(expected).max())
    np.testing.assert_allclose(out.value, expected, rtol=tolerance, atol=tolerance * scale)
    (out * FIXTURES[name + "/w"]).sum().backward()
    for k, x in enumerate(xs):
        g = FIXTURES["%s/grad%d" % (name, k)]
        np.testing.assert_allclose(x.grad, g, rtol=tolerance, atol=tolerance * max(1.0, np.abs(g).max()),
                                   err_msg="%s: gradient of input %d" % (name, k))
