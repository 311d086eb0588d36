"""Optimisers that say what they do: parameter groups, AdamW against torch.optim.AdamW over 1000 steps,
the schedule's min_lr and step origin, an assignable Parameter.grad, errors naming the optimiser."""

import os

import numpy as np
import pytest

import xgrad

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "adamw_groups.npz")


def gradient(p, target):
    return p - target + 0.5 * np.sin(3 * p)


def run(groups_of, fixture, steps=1000):
    params = {"W": xgrad.Parameter(fixture["W0"], "W"), "b": xgrad.Parameter(fixture["b0"], "b")}
    opt = xgrad.optim.AdamW(groups_of(params), lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    seen = {}
    for step in range(1, steps + 1):
        for k, p in params.items():
            p.grad = gradient(p.value, fixture["target_" + k])
        opt.step()
        if step == 10:
            seen = {k + "_10": p.value for k, p in params.items()}
    seen.update({k: p.value for k, p in params.items()})
    return seen


@pytest.mark.parametrize("case, groups_of", [
    ("one_group", lambda p: [{"params": [p["W"], p["b"]]}]),
    ("two_groups", lambda p: [{"params": [p["W"]], "weight_decay": 0.1},
                              {"params": [p["b"]], "weight_decay": 0.0, "lr": 3e-3}]),
])
def test_adamw_groups_equal_torch_over_1000_steps(case, groups_of):
    fixture = np.load(FIXTURE)
    got = run(groups_of, fixture)
    for k in ("W", "b", "W_10", "b_10"):
        np.testing.assert_allclose(got[k], fixture["%s/%s" % (case, k)], rtol=0, atol=1e-6)


def test_a_plain_list_keeps_vectors_undecayed_and_groups_decay_them():
    def shrink(params_of):
        b = xgrad.Parameter(np.ones(2), "b")
        b.grad = np.zeros(2)
        xgrad.optim.AdamW(params_of(b), lr=0.5, weight_decay=0.1).step()
        return b.value

    np.testing.assert_array_equal(shrink(lambda b: [b]), [1.0, 1.0])
    np.testing.assert_array_equal(shrink(lambda b: [{"params": [b]}]), [0.95, 0.95])


def test_param_groups_are_torch_shaped_and_step_reads_their_lr():
    w = xgrad.Parameter(np.ones((2, 2)), "w")
    b = xgrad.Parameter(np.ones(2), "b")
    opt = xgrad.optim.SGD([{"params": [w]}, {"params": [b], "lr": 0.5}], lr=0.1)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5]
    assert opt.param_groups[1]["weight_decay"] == 0.0
    opt.param_groups[1]["lr"] = 0.25
    w.grad, b.grad = np.ones((2, 2)), np.ones(2)
    opt.step()
    np.testing.assert_allclose(w.value, np.full((2, 2), 0.9))
    np.testing.assert_allclose(b.value, [0.75, 0.75])
    opt.lr = 1.0
    assert [g["lr"] for g in opt.param_groups] == [1.0, 1.0]
    state = opt.state_dict()
    assert set(state) == {"optim.step"}
    opt.load_state_dict(state)


def test_state_dict_round_trip_across_groups():
    w = xgrad.Parameter(np.ones((2, 2)), "w")
    b = xgrad.Parameter(np.ones(2), "b")
    opt = xgrad.optim.AdamW([{"params": [w]}, {"params": [b], "weight_decay": 0.0}])
    w.grad, b.grad = np.ones((2, 2)), np.ones(2)
    opt.step()
    state = opt.state_dict()
    assert {"optim.step", "optim.exp_avg.w", "optim.exp_avg.b", "optim.exp_avg_sq.w",
            "optim.exp_avg_sq.b"} == set(state)
    fresh = xgrad.optim.AdamW([{"params": [w]}, {"params": [b], "weight_decay": 0.0}])
    fresh.load_state_dict(state)
    assert fresh.step_count == 1
    np.testing.assert_array_equal(fresh.state_dict()["optim.exp_avg.b"], state["optim.exp_avg.b"])


def test_errors_name_the_optimiser_called():
    w = xgrad.Parameter(np.ones((2, 2)), "w")
    with pytest.raises(ValueError, match="adamw: beta1"):
        xgrad.optim.AdamW([w], betas=(1.5, 0.9))
    with pytest.raises(ValueError, match="AdamW: parameter group 0 has unknown keys"):
        xgrad.optim.AdamW([{"params": [w], "momentum": 0.9}])
    with pytest.raises(ValueError, match="AdamW: parameter name 'w' appears twice"):
        xgrad.optim.AdamW([{"params": [w]}, {"params": [w]}])
    with pytest.raises(ValueError, match="SGD: no parameters"):
        xgrad.optim.SGD([])
    with pytest.raises(ValueError, match="AdamW: learning rate must be a finite number >= 0"):
        xgrad.optim.AdamW([w]).lr = -1
    for bad in (float("inf"), float("nan")):
        with pytest.raises(ValueError, match="learning rate must be a finite number >= 0"):
            xgrad.optim.SGD([w], lr=bad)
        with pytest.raises(ValueError, match="weight_decay must be a finite number >= 0"):
            xgrad.optim.AdamW([w], weight_decay=bad)


def test_parameter_grad_is_assignable_and_checked():
    p = xgrad.Parameter(np.ones((2, 3)), "p")
    p.grad = np.full((2, 3), 2.0)
    np.testing.assert_array_equal(p.grad, np.full((2, 3), 2.0))
    with pytest.raises(ValueError, match=r"Parameter.grad: gradient of shape \(3\) for parameter 'p'"):
        p.grad = np.ones(3)
    t = xgrad.Tape()
    (t.param(p) * 3).sum().backward()  # backward adds to the assigned gradient
    np.testing.assert_array_equal(p.grad, np.full((2, 3), 5.0))


def test_schedule_min_lr_and_step_zero():
    s = xgrad.optim.LRSchedule(1.0, 10, warmup=2, min_lr=0.0)
    assert s.min_lr == 0.0
    assert s(0) == 0.0 and s(1) == 0.5 and s(2) == 1.0
    assert s(10) == pytest.approx(0.0, abs=1e-15) and s(11) == 0.0
    assert xgrad.optim.LRSchedule(1.0, 10, warmup=0)(0) == 1.0
    assert xgrad.optim.LRSchedule(1.0, 10).min_lr == 0.1
    with pytest.raises(ValueError, match="steps count from 1"):
        s(-1)
