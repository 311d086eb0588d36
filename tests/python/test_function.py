"""xgrad.Function: your own op in Python, checked like the library's own."""

import numpy as np
import pytest

import xgrad


class Softplus(xgrad.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return np.log1p(np.exp(x))

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / (1 + np.exp(-x))


def sum_to(g, shape):
    """g summed over the axes broadcasting added or stretched, down to ``shape``."""
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    return g.sum(axis=tuple(i for i, n in enumerate(shape) if n == 1), keepdims=True)


class ScaledMul(xgrad.Function):
    """a * b * factor: two var inputs and a number that passes through."""

    @staticmethod
    def forward(ctx, a, factor, b):
        ctx.save_for_backward(a, b)
        ctx.factor = factor
        return a * b * factor

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        g = grad * ctx.factor
        return sum_to(g * b, a.shape), None, sum_to(g * a, b.shape)


def test_softplus_value_and_gradient_match_the_formula():
    t = xgrad.Tape()
    x0 = np.array([-2.0, 0.0, 3.0])
    x = t.input(x0)
    y = Softplus.apply(x)
    assert y.op == "Softplus"
    np.testing.assert_allclose(y.value, np.log1p(np.exp(x0)))
    y.sum().backward()
    np.testing.assert_allclose(x.grad, 1 / (1 + np.exp(-x0)))


def test_gradcheck_through_functions_with_broadcasting_and_a_passed_through_number():
    rng = np.random.default_rng(0)
    assert xgrad.gradcheck(lambda x: Softplus.apply(x * 2).sum(), [rng.standard_normal((3, 4))])
    assert xgrad.gradcheck(lambda a, b: ScaledMul.apply(a, 1.5, b).tanh().sum(),
                           [rng.standard_normal((3, 4)), rng.standard_normal((4,))])


def test_a_wrong_backward_fails_gradcheck():
    class Wrong(xgrad.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 2

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * x  # missing the factor 2

    with pytest.raises(xgrad.GradcheckError):
        xgrad.gradcheck(lambda x: Wrong.apply(x).sum(), [np.array([1.0, 2.0])])


def test_trace_dot_and_float32():
    t = xgrad.Tape(dtype="float32")
    x = t.input(np.ones(3, dtype=np.float32))
    y = Softplus.apply(x).named("sp")
    assert y.dtype is np.float32 and y.value.dtype == np.float32
    assert "Softplus" in t.trace() and "Softplus" in t.to_dot()
    y.sum().backward()
    assert x.grad.dtype == np.float32


def test_none_gradient_and_a_constant_input():
    class FirstOnly(xgrad.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a + b

        @staticmethod
        def backward(ctx, grad):
            return grad, None

    t = xgrad.Tape()
    a, b = t.input(np.ones(2)), t.input(np.ones(2))
    FirstOnly.apply(a, b).sum().backward()
    np.testing.assert_array_equal(a.grad, [1, 1])
    np.testing.assert_array_equal(b.grad, [0, 0])
    c = t.constant(np.ones(2))
    y = Softplus.apply(c)
    assert not y.requires_grad


def test_wrong_shape_or_dtype_names_the_class_and_the_tape_stays_usable():
    class BadShape(xgrad.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad.sum(axis=0)

    class BadDtype(xgrad.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad.astype(np.float32)

    t = xgrad.Tape()
    x = t.input(np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"BadShape\.backward: the gradient for input 0 has shape \(3,\)"):
        BadShape.apply(x).sum().backward()
    with pytest.raises(ValueError, match=r"BadDtype\.backward: .* float32; the tape's dtype is float64"):
        BadDtype.apply(x).sum().backward()
    (x * 3).sum().backward()  # the tape still records and walks
    np.testing.assert_array_equal(x.grad, np.full((2, 3), 3.0))


def test_exceptions_in_forward_and_backward_keep_their_type_and_name_the_class():
    class Raises(xgrad.Function):
        @staticmethod
        def forward(ctx, x, where):
            if where == "forward":
                raise KeyError("boom")
            return x

        @staticmethod
        def backward(ctx, grad):
            raise NotImplementedError("write me")

    t = xgrad.Tape()
    x = t.input(np.ones(2))
    with pytest.raises(KeyError, match="Raises.forward: boom"):
        Raises.apply(x, "forward")
    y = Raises.apply(x, "backward").sum()
    with pytest.raises(NotImplementedError, match="Raises.backward: write me"):
        y.backward()
    z = (x * x).sum()
    z.backward()
    np.testing.assert_array_equal(x.grad, [2.0, 2.0])


def test_forward_must_return_numbers_and_apply_needs_a_var():
    class ReturnsString(xgrad.Function):
        @staticmethod
        def forward(ctx, x):
            return "no"

    t = xgrad.Tape()
    with pytest.raises(ValueError, match="ReturnsString.forward: must return an array of real numbers"):
        ReturnsString.apply(t.input(np.ones(2)))
    with pytest.raises(ValueError, match="Softplus.apply: no xgrad.Var"):
        Softplus.apply(np.ones(2))


def test_mixed_dtypes_are_named():
    a = xgrad.Tape().input(np.ones(2))
    b = xgrad.Tape(dtype="float32").input(np.ones(2))
    with pytest.raises(ValueError, match="a float64 var and a float32 var"):
        ScaledMul.apply(a, 1.0, b)


def test_anomaly_error_names_the_class():
    class Reciprocal(xgrad.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            with np.errstate(divide="ignore"):
                return 1 / x

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            with np.errstate(divide="ignore"):
                return -grad / x ** 2

    t = xgrad.Tape()
    t.detect_anomaly()
    x = t.input(np.array([0.0, 1.0]))
    with pytest.raises(xgrad.AnomalyError, match="Reciprocal"):
        Reciprocal.apply(x).sum().backward()


def test_first_divergence_compares_a_function_s_gradients():
    t = xgrad.Tape()
    x = t.input(np.array([0.5, -1.0]))
    Softplus.apply(x).sum().backward()
    reference = {"x": 1 / (1 + np.exp(-np.array([0.5, -1.0])))}
    assert not xgrad.first_divergence({"x": x.grad}, reference).diverged
    assert xgrad.first_divergence({"x": x.grad * 2}, reference).first == "x"


def test_saved_arrays_count_as_saved_for_backward():
    t = xgrad.Tape()
    x = t.input(np.ones(1000))
    before = t.bytes_saved_for_backward()
    Softplus.apply(x)
    assert t.bytes_saved_for_backward() >= before + 8000


def test_xgrad_grad_goes_through_a_function_and_a_second_order_stops_naming_it():
    t = xgrad.Tape()
    x0 = np.array([0.5, -1.0])
    x = t.input(x0)
    (g,) = xgrad.grad(Softplus.apply(x).sum(), [x])
    np.testing.assert_allclose(g.value, 1 / (1 + np.exp(-x0)))
    with pytest.raises(RuntimeError, match="the backward of 'Softplus' works on arrays only"):
        xgrad.grad(Softplus.apply(x), [x], seed=np.ones(2), create_graph=True)


class Total(xgrad.Function):
    """x.sum(): forward returns a 0-d array, backward receives a 0-d gradient."""

    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        return x.sum()

    @staticmethod
    def backward(ctx, grad):
        assert np.shape(grad) == ()
        return np.broadcast_to(grad, ctx.shape).copy()


def test_a_function_returning_a_zero_dimensional_array_gives_a_scalar_var():
    t = xgrad.Tape()
    x = t.input(np.ones(3))
    y = Total.apply(x)
    assert y.shape == ()
    y.backward()
    np.testing.assert_array_equal(x.grad, np.ones(3))
