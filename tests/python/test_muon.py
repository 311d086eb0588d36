"""xgrad.optim.Muon against PyTorch's steps from the update's text (tests/data/muon_fixtures/, written by
tests/fixtures/make_muon_fixtures.py), its state, and what it refuses."""
import os

import numpy as np
import pytest

import xgrad

NAMES = ["wide.W", "tall.W", "square.W"]
STEPS = 3


def fixture_dir(source_dir):
    return os.path.join(source_dir, "tests", "data", "muon_fixtures")


def set_grads(params, grads):
    """Puts `grads` into the parameters' gradients through a tape: d sum(p * g) / dp = g."""
    for p in params:
        p.zero_grad()
        t = xgrad.Tape(dtype=p.dtype)
        (t.param(p) * grads[p.name].astype(p.dtype)).sum().backward()


def fixture_parameters(root, dtype):
    return [xgrad.Parameter(np.load(os.path.join(root, "initial", n + ".npy")), n, dtype=dtype) for n in NAMES]


@pytest.mark.parametrize("dtype,folder,rtol", [("float64", "float64", 1e-12), ("float32", "float32", 1e-5)])
def test_muon_matches_the_torch_fixture(source_dir, dtype, folder, rtol):
    root = fixture_dir(source_dir)
    lr, momentum = np.load(os.path.join(root, "hyperparameters.npy"))
    params = fixture_parameters(root, dtype)
    grads = {n: np.load(os.path.join(root, "grads", n + ".npy")) for n in NAMES}
    opt = xgrad.optim.Muon(params, lr=lr, momentum=momentum)
    for step in range(STEPS):
        set_grads(params, {n: grads[n][step] for n in NAMES})
        opt.step()
        for p in params:
            after = np.load(os.path.join(root, folder, "after", p.name + ".npy"))[step]
            # Relative to the largest entry, as xgrad's compare does.
            assert np.max(np.abs(p.value - after)) <= rtol * np.max(np.abs(after)), (p.name, step)
    state = opt.state_dict()
    assert sorted(state) == sorted(["optim.step"] + ["optim.momentum." + n for n in NAMES])
    assert state["optim.step"] == STEPS
    for n in NAMES:
        expected = np.load(os.path.join(root, folder, "optim.momentum." + n + ".npy"))
        assert np.max(np.abs(state["optim.momentum." + n] - expected)) <= rtol * np.max(np.abs(expected))


def test_defaults_are_lr_0_02_and_momentum_0_95(source_dir):
    root = fixture_dir(source_dir)
    lr, momentum = np.load(os.path.join(root, "hyperparameters.npy"))
    assert (lr, momentum) == (0.02, 0.95)
    by_default, explicit = fixture_parameters(root, "float64"), fixture_parameters(root, "float64")
    a, b = xgrad.optim.Muon(by_default), xgrad.optim.Muon(explicit, lr=0.02, momentum=0.95)
    assert a.lr == 0.02
    grads = {n: np.load(os.path.join(root, "grads", n + ".npy"))[0] for n in NAMES}
    for params, opt in [(by_default, a), (explicit, b)]:
        set_grads(params, grads)
        opt.step()
    for p, q in zip(by_default, explicit):
        assert np.array_equal(p.value, q.value)


def test_state_dict_round_trip_resumes_exactly(source_dir):
    root = fixture_dir(source_dir)
    grads = {n: np.load(os.path.join(root, "grads", n + ".npy")) for n in NAMES}
    params = fixture_parameters(root, "float32")
    opt = xgrad.optim.Muon(params)
    for step in range(2):
        set_grads(params, {n: grads[n][step] for n in NAMES})
        opt.step()
    copies = [xgrad.Parameter(p.value, p.name, dtype="float32") for p in params]
    resumed = xgrad.optim.Muon(copies)
    resumed.load_state_dict(opt.state_dict())
    assert resumed.step_count == 2
    for group, o in [(params, opt), (copies, resumed)]:
        set_grads(group, {n: grads[n][2] for n in NAMES})
        o.step()
    for p, q in zip(params, copies):
        assert np.array_equal(p.value, q.value)


def test_a_parameter_that_is_not_a_matrix_is_a_value_error_naming_it():
    matrix = xgrad.Parameter(np.ones((2, 3)), "W")
    with pytest.raises(ValueError, match="'ln.bias'.*matrices"):
        xgrad.optim.Muon([matrix, xgrad.Parameter(np.ones(3), "ln.bias")])
    with pytest.raises(ValueError, match="'conv.W'"):
        xgrad.optim.Muon([xgrad.Parameter(np.ones((2, 2, 2)), "conv.W")])
    with pytest.raises(ValueError, match="momentum"):
        xgrad.optim.Muon([matrix], momentum=1.0)
    with pytest.raises(ValueError, match="learning rate"):
        xgrad.optim.Muon([matrix], lr=-1)
    with pytest.raises(ValueError, match="no parameters"):
        xgrad.optim.Muon([])


def test_muon_trains_a_small_perceptron_beside_adamw():
    """Muon on the matrices, AdamW on the biases: the loss of a two-layer perceptron falls."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((64, 3))
    y = np.sin(x.sum(axis=1, keepdims=True))
    w1, w2 = xgrad.Parameter(rng.standard_normal((3, 16)) * 0.5, "W1"), xgrad.Parameter(
        rng.standard_normal((16, 1)) * 0.5, "W2")
    b1 = xgrad.Parameter(np.zeros(16), "b1")
    muon, adamw = xgrad.optim.Muon([w1, w2], lr=0.05), xgrad.optim.AdamW([b1], lr=0.01, weight_decay=0.0)
    losses = []
    for _ in range(60):
        t = xgrad.Tape()
        h = (t.constant(x) @ t.param(w1) + t.param(b1)).tanh()
        loss = ((h @ t.param(w2) - y) ** 2).mean()
        loss.backward()
        losses.append(float(loss.value))
        muon.step(), adamw.step()
        muon.zero_grad(), adamw.zero_grad()
    assert losses[-1] < 0.5 * losses[0]
