# xgrad.Module: parameters declared once in visit, walked by initialisation, named_parameters, bind,
# zero_grad and the optimiser; sub-modules under a prefix; a declared model trains.
import numpy as np
import pytest

import xgrad


class Affine(xgrad.Module):
    def __init__(self, d_in, d_out, bias=True):
        self.shape, self.bias = (d_in, d_out), bias

    def visit(self, f):
        f("W", xgrad.declare.normal(self.shape, 0.5))
        if self.bias:
            f("b", xgrad.declare.zeros(self.shape[1:]))


class Net(xgrad.Module):
    def __init__(self, seed=0, dtype="float64", last_bias=True):
        self.parts = [Affine(2, 8), Affine(8, 1, bias=last_bias)]
        super().__init__(seed, dtype)

    def visit(self, f):
        f("scale", xgrad.declare.ones((1,)))
        for i, part in enumerate(self.parts):
            self.visit_child("parts.%d." % i, part, f)

    def __call__(self, t, x):
        w = self.bind(t)
        h = (x @ w["parts.0.W"] + w["parts.0.b"]).tanh()
        out = h @ w["parts.1.W"]
        if "parts.1.b" in w:
            out = out + w["parts.1.b"]
        return out * w["scale"]


def test_declaration_order_names_and_initialisation():
    net = Net(seed=3)
    assert [n for n, _ in net.named_parameters()] == ["scale", "parts.0.W", "parts.0.b", "parts.1.W", "parts.1.b"]
    assert net.parameter_count() == 1 + 16 + 8 + 8 + 1
    state = net.state()
    assert state["scale"][0] == 1 and not state["parts.0.b"].any() and state["parts.0.W"].std() > 0.1
    again = Net(seed=3)
    for name, value in again.named_parameters():
        np.testing.assert_array_equal(value, state[name])
    assert [n for n, _ in Net(last_bias=False).named_parameters()][-1] == "parts.1.W"  # a variant declares less
    assert Net(dtype="float32").parameters()[0].value.dtype == np.float32


def test_declared_twice_and_undeclared():
    class Twice(xgrad.Module):
        def visit(self, f):
            f("a", xgrad.declare.zeros((1,)))
            f("a", xgrad.declare.zeros((1,)))

    with pytest.raises(ValueError, match="declared twice"):
        Twice()
    with pytest.raises(NotImplementedError):
        xgrad.Module()


def test_gradients_state_and_training():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((32, 2))
    y = np.tanh(X[:, :1] * X[:, 1:])
    net = Net(seed=1)
    t = xgrad.Tape()
    loss = ((net(t, X) - y) ** 2).mean()
    loss.backward()
    grads = net.grads()
    assert set(grads) == {n for n, _ in net.named_parameters()} and grads["parts.0.W"].any()
    net.zero_grad()
    assert not any(g.any() for g in net.grads().values())

    opt = xgrad.optim.AdamW(net, lr=0.05, weight_decay=0.0)
    first = None
    for _ in range(150):
        t = xgrad.Tape()
        loss = ((net(t, X) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = first if first is not None else float(loss.value)
    assert float(loss.value) < 0.2 * first

    copy = Net(seed=9)
    copy.load_state(net.state())
    np.testing.assert_array_equal(copy(xgrad.Tape(), X).value, net(xgrad.Tape(), X).value)
    with pytest.raises(ValueError, match="missing"):
        copy.load_state({"scale": np.ones(1)})
    with pytest.raises(ValueError, match="shape"):
        copy.load_state({**net.state(), "scale": np.ones(2)})


def test_save_and_load_against_the_declaration(tmp_path):
    net = Net(seed=4)
    path = tmp_path / "net.safetensors"
    net.save(path, {"kind": "net", "width": 8})
    other = Net(seed=5)
    meta = other.load(path, {"kind": "net"})
    assert meta["width"] == "8"
    for (name, a), (_, b) in zip(net.named_parameters(), other.named_parameters()):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(RuntimeError, match="kind"):
        other.load(path, {"kind": "other"})
    with pytest.raises(RuntimeError, match="parts.1.b"):
        Net(last_bias=False).load(path)  # a tensor the model does not declare
    Net(last_bias=False).save(path)
    with pytest.raises(RuntimeError, match="parts.1.b"):
        other.load(path)  # a declared tensor is missing
    f32 = Net(dtype="float32")
    f32.save(tmp_path / "f32.safetensors")
    back = Net(seed=9)
    back.load(tmp_path / "f32.safetensors")
    np.testing.assert_allclose(back.state()["parts.0.W"], f32.state()["parts.0.W"])
