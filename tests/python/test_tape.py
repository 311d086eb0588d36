# The tape as Python sees it: docs/spec.md's example, operators against NumPy, dtypes, conversions at the boundary,
# copies, lifetimes, no_grad, introspection, and every way a caller can misuse it (each an exception).
import gc

import numpy as np
import pytest

import xgrad


def test_spec_example():
    t = xgrad.Tape(dtype="float64")
    x = t.input(np.array(-4.0))
    c = t.constant(np.ones((2, 3)))
    y = x * 2 + 2 + x
    z = y.relu() + y.tanh() + y.exp() + y.log() + y.sigmoid()
    with np.errstate(invalid="ignore"):
        assert np.isnan(z.value)  # log of a negative number: IEEE, not an error
    z.sum().backward()
    yv = -10.0
    sig = 1 / (1 + np.exp(-yv))
    expected = 3 * (0 + (1 - np.tanh(yv) ** 2) + np.exp(yv) + 1 / yv + sig * (1 - sig))
    assert x.grad.shape == () and x.value.shape == ()
    assert x.grad == pytest.approx(expected, rel=1e-14)
    assert x.value == -4.0
    assert c.grad.shape == (2, 3) and not c.grad.any()


def test_operators_broadcast_and_reflect_like_numpy():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 3)), rng.standard_normal(3) + 3
    t = xgrad.Tape()
    x, y = t.input(a), t.input(b)
    out = (2 - x) * y + a / y - 1 / (x * x + 1) + (b @ x.T).reshape(2, 1) - x ** 2 + (-y) + 3 * x / 2
    expected = (2 - a) * b + a / b - 1 / (a * a + 1) + (b @ a.T).reshape(2, 1) - a ** 2 + (-b) + 3 * a / 2
    np.testing.assert_allclose(out.value, expected, rtol=1e-14)
    expression = lambda x, y: ((2 - x) * y + a / y - 1 / (x * x + 1) + (b @ x.T).reshape(2, 1) - x ** 2 + (-y)
                               + 3 * x / 2)
    assert xgrad.gradcheck(lambda x, y: expression(x, y).sum(), [a, b])


def test_numpy_array_on_the_left_calls_the_reflected_operator():
    t = xgrad.Tape()
    x = t.input(np.ones(3))
    for out in (np.ones(3) + x, np.ones(3) - x, np.ones(3) * x, np.ones(3) / x, np.ones((2, 3)) @ x):
        assert isinstance(out, xgrad.Var)


def test_float32_tape_computes_in_float32():
    t = xgrad.Tape(dtype="float32")
    x = t.input(np.array([1.0, 2.0]))  # float64 in, converted
    y = (x * x).sum()
    y.backward()
    assert x.value.dtype == np.float32 and x.grad.dtype == np.float32 and y.value.dtype == np.float32
    np.testing.assert_array_equal(x.grad, [2, 4])


def test_inputs_are_copied_and_outputs_are_fresh_copies():
    a = np.ones(3)
    t = xgrad.Tape()
    x = t.input(a)
    a[0] = 100
    assert x.value[0] == 1
    v = x.value
    v[1] = 50
    assert x.value[1] == 1


@pytest.mark.parametrize("make", [
    lambda: np.asfortranarray(np.arange(6.0).reshape(2, 3)),
    lambda: np.arange(12.0).reshape(2, 6)[:, ::2],
    lambda: np.arange(6).reshape(2, 3),           # int: converted to float
    lambda: np.arange(6, dtype=np.uint8).reshape(2, 3),
    lambda: [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]],  # nested lists
])
def test_any_layout_or_real_dtype_is_converted(make):
    a = make()
    t = xgrad.Tape()
    x = t.input(a)
    np.testing.assert_array_equal(x.value, np.asarray(a, dtype=np.float64))
    (x * np.arange(3.0)).sum().backward()
    np.testing.assert_array_equal(x.grad, np.broadcast_to(np.arange(3.0), (2, 3)))


def test_zero_d_and_size_one():
    t = xgrad.Tape()
    s = t.input(np.array(3.0))
    one = t.input(np.ones((1, 1)))
    y = (s * one).sum()
    y.backward()
    assert s.grad.shape == () and s.grad == 1
    assert one.grad.shape == (1, 1) and one.grad[0, 0] == 3
    assert t.input(2.5).value == 2.5


def test_reused_input_sums_its_gradients():
    t = xgrad.Tape()
    x = t.input(np.array([1.0, -2.0]))
    (x * x + x).sum().backward()
    np.testing.assert_array_equal(x.grad, [3.0, -3.0])


@pytest.mark.parametrize("bad", [np.array(["a", "b"]), np.array([1 + 2j]), np.array([object()])])
def test_non_real_arrays_are_value_errors(bad):
    with pytest.raises(ValueError, match="Tape.input"):
        xgrad.Tape().input(bad)


def test_bad_dtype_name():
    with pytest.raises(ValueError, match="dtype"):
        xgrad.Tape(dtype="int32")
    with pytest.raises(TypeError):
        xgrad.Tape(dtype=object())


def test_shape_errors_carry_the_cpp_message():
    t = xgrad.Tape()
    with pytest.raises(ValueError, match=r"add: shapes \(2\) and \(3\) do not broadcast"):
        t.input(np.ones(2)) + t.input(np.ones(3))
    with pytest.raises(ValueError, match="matmul"):
        t.input(np.ones((2, 3))) @ t.input(np.ones((2, 3)))
    with pytest.raises(ValueError, match="reshape"):
        t.input(np.ones(6)).reshape(4, 2)
    with pytest.raises(ValueError, match="axis"):
        t.input(np.ones((2, 2))).sum(axis=2)


def test_vars_of_different_tapes_never_mix():
    t1, t2, t3 = xgrad.Tape(), xgrad.Tape(), xgrad.Tape("float32")
    a, b, c = t1.input(np.ones(2)), t2.input(np.ones(2)), t3.input(np.ones(2))
    for other in (b, c):
        with pytest.raises(ValueError, match="different tapes"):
            a + other
        with pytest.raises(ValueError, match="different tapes"):
            xgrad.ops.mul(a, other)
    with pytest.raises(ValueError, match="another tape"):
        t1.backward(b.sum())


def test_backward_of_a_non_scalar_needs_a_seed():
    t = xgrad.Tape()
    x = t.input(np.ones(3))
    y = x * 2
    with pytest.raises(ValueError, match="root has shape"):
        y.backward()
    with pytest.raises(ValueError, match="seed shape"):
        y.backward(np.ones(2))
    y.backward(np.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(x.grad, [2, 4, 6])


def test_second_backward_through_a_freed_graph_raises():
    t = xgrad.Tape()
    x = t.input(np.ones(3))
    y = (x.exp() * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="retain_graph"):
        y.backward()
    t2 = xgrad.Tape()
    x2 = t2.input(np.ones(3))
    y2 = (x2.exp() * x2).sum()
    y2.backward(retain_graph=True)
    y2.backward()
    np.testing.assert_allclose(x2.grad, 2 * (np.e + np.e))  # accumulated twice


def test_cleared_tape_makes_old_vars_raise():
    t = xgrad.Tape()
    x = t.input(np.ones(2))
    t.clear()
    with pytest.raises(RuntimeError):
        x.value
    with pytest.raises(RuntimeError):
        x + 1
    assert "stale" in repr(x)


def test_a_var_keeps_its_tape_alive():
    def make():
        t = xgrad.Tape()
        x = t.input(np.array([1.0, 2.0]))
        return x, (x * x).sum()

    x, y = make()
    gc.collect()
    y.backward()
    np.testing.assert_array_equal(x.grad, [2, 4])
    assert len(y.tape) == 3


def test_pow_takes_numbers_vars_and_arrays_but_not_strings():
    t = xgrad.Tape()
    x = t.input(np.ones(2))
    assert (x ** x).shape == (2,) and (x ** np.ones(2)).shape == (2,)
    with pytest.raises(ValueError):
        x ** "two"


def test_bool_of_a_var_is_ambiguous():
    with pytest.raises(TypeError):
        bool(xgrad.Tape().input(np.ones(1)))


def test_no_grad_records_no_rules():
    t = xgrad.Tape()
    x = t.input(np.ones(2))
    with t.no_grad():
        y = x * 2
    assert not y.requires_grad
    z = x * 2
    assert z.requires_grad
    with pytest.raises(ValueError, match="does not depend"):
        y.sum().backward()


def test_introspection_trace_dot_and_counting():
    t = xgrad.Tape()
    a = t.input(np.ones((2, 3)), "A")
    b = t.input(np.ones((3, 4)), "B")
    c = (a @ b).named("C")
    assert c.label == "C" and c.op == "matmul"
    assert "C" in t.trace() and "matmul" in t.trace()
    assert t.to_dot().startswith("digraph")
    assert t.multiply_adds() == 2 * 3 * 4
    nodes = t.nodes()
    assert [n["op"] for n in nodes] == ["input", "input", "matmul"]
    assert nodes[2]["inputs"] == [0, 1] and nodes[2]["shape"] == [2, 4]
    assert t.bytes_held() >= 3 * 8 * (6 + 12 + 8) / 3


def test_anomaly_mode_names_the_node():
    t = xgrad.Tape()
    t.detect_anomaly()
    x = t.input(np.array([1000.0]))
    with pytest.raises(xgrad.AnomalyError, match="exp"):
        x.exp().named("big").sum()
    assert issubclass(xgrad.AnomalyError, RuntimeError)


def test_parameters_accumulate_across_tapes():
    p = xgrad.Parameter(np.array([1.0, 2.0]), "w")
    for _ in range(2):
        t = xgrad.Tape()
        (t.param(p) * 3).sum().backward()
    np.testing.assert_array_equal(p.grad, [6, 6])
    p.zero_grad()
    assert not p.grad.any()
    p.assign([5, 6])
    np.testing.assert_array_equal(p.value, [5, 6])
    with pytest.raises(ValueError, match="shape"):
        p.assign(np.ones(3))
    with pytest.raises(ValueError, match="float32"):
        xgrad.Tape("float32").param(p)


def test_help_documents_the_package():
    import pydoc
    text = pydoc.render_doc(xgrad, renderer=pydoc.plaintext)
    for word in ("Tape", "gradcheck", "GPT", "first_divergence", "Copies and views"):
        assert word in text
    for thing in (xgrad.Tape, xgrad.Var, xgrad.Parameter, xgrad.GPT, xgrad.gradcheck, xgrad.first_divergence,
                  xgrad.optim.AdamW, xgrad.train.run, xgrad.models.self_attention,
                  xgrad.models.manual.mha_forward, xgrad.Module):
        assert thing.__doc__ and len(thing.__doc__) > 40, thing
