"""Every task of the six assignments and its checks. A task is (id, name, run): run(module) returns when
the student's code is right and raises otherwise (TaskFailed saying what is wrong and where, or the
student's own exception). The reference is always the library: its ops on a tape, its hand-derived GPT
backward's tape twin (GPT.first_divergence), xgrad.optim and xgrad.train."""

import os
import re
import tempfile

import numpy as np

import xgrad
from .grader import TaskFailed

RTOL, ATOL = 1e-7, 1e-10  # float64; a correct NumPy solution agrees with the library to about 1e-15


# ---- the comparison that names the first wrong node --------------------------------------------------

def _first_wrong(mine, reference, what="node"):
    """TaskFailed naming the first name (in reference's order) whose array differs; None when all agree."""
    missing = [n for n, _ in reference if n not in mine]
    if missing:
        raise TaskFailed("no gradient for %s" % ", ".join("'%s'" % n for n in missing))
    for name, ref in reference:
        got = np.asarray(mine[name])
        if got.shape != np.shape(ref):
            raise TaskFailed("first wrong %s '%s': shape %s, expected %s"
                             % (what, name, got.shape, np.shape(ref)))
    report = xgrad.first_divergence(mine, reference, rtol=RTOL, atol=ATOL)
    if report.diverged:
        row = next(r for r in report.rows if r["name"] == report.first)
        order = " (in backward order)" if what == "node" else ""
        raise TaskFailed("first wrong %s '%s'%s: max |mine - reference| = %.3g, relative %.3g"
                         % (what, report.first, order, row["max_abs"], row["max_rel"]))


def _compare_graph(build, inputs, op_inputs):
    """Records build(t, vars, mine) twice, with the student's op (mine=True) and the library's; build
    returns (loss, [(name, var)] in backward order). Checks the forward values (first wrong one named, in
    forward order), then the gradients of every named node after loss.backward (first wrong one named, in
    backward order). ``op_inputs``: the names of the student op's inputs, to name a gradient it refused."""
    recorded = {}
    for mine in (False, True):
        t = xgrad.Tape()
        vs = [t.input(a, name) for name, a in inputs]
        recorded[mine] = build(t, vs, mine)
    (ref_loss, ref_nodes), (loss, nodes) = recorded[False], recorded[True]
    values = {name: v.value for name, v in nodes}
    for name, v in reversed(ref_nodes):
        if not np.allclose(values[name], v.value, rtol=RTOL, atol=ATOL) or values[name].shape != v.shape:
            raise TaskFailed("first wrong forward value: node '%s'" % name)
    ref_loss.backward(retain_graph=True)
    try:
        loss.backward(retain_graph=True)
    except ValueError as e:
        def named(m):
            return "for input %s ('%s')" % (m.group(1), op_inputs[int(m.group(1))])

        message = re.sub(r"for input (\d+)", named, str(e))
        raise TaskFailed("backward refused: %s" % message) from e
    _first_wrong({name: v.grad for name, v in nodes}, [(name, v.grad) for name, v in ref_nodes])


def _rng(seed):
    return np.random.default_rng(seed)


# ---- assignment 1: Functions -------------------------------------------------------------------------

def _binary_task(name, reference, shapes, positive=False):
    def run(m):
        rng = _rng(1)
        a, b = (rng.standard_normal(s) for s in shapes)
        w = rng.standard_normal(np.broadcast_shapes(*shapes))

        def build(t, vs, mine):
            x, y = vs
            h = (getattr(m, name).apply(x, y) if mine else reference(x, y)).named("h")
            return (h.tanh() * w).sum(), [("h", h), ("a", x), ("b", y)]

        _compare_graph(build, [("a", a), ("b", b)], ["a", "b"])
        assert xgrad.gradcheck(lambda x, y: getattr(m, name).apply(x, y).tanh().sum(), [a, b])
    return run


def _unary_task(name, reference, shape=(3, 4), positive=False):
    def run(m):
        rng = _rng(2)
        x0 = rng.uniform(0.5, 2.0, shape) if positive else rng.standard_normal(shape)
        w = rng.standard_normal(shape)

        def build(t, vs, mine):
            (x,) = vs
            u = (x * 1.5).named("u")
            h = (getattr(m, name).apply(u) if mine else reference(u)).named("h")
            return (h * w).sum(), [("h", h), ("u", u), ("x", x)]

        _compare_graph(build, [("x", x0)], ["u"])
        assert xgrad.gradcheck(lambda x: (getattr(m, name).apply(x) * w).sum(), [x0])
    return run


def _sum_task(m):
    rng = _rng(3)
    x0 = rng.standard_normal((3, 4, 5))
    w = rng.standard_normal((3, 5))

    def build(t, vs, mine):
        (x,) = vs
        h = (m.Sum.apply(x, 1) if mine else x.sum(axis=1)).named("h")
        return (h.tanh() * w).sum(), [("h", h), ("x", x)]

    _compare_graph(build, [("x", x0)], ["x"])


def _matmul_task(m):
    rng = _rng(4)
    for shape_a, shape_b in (((4, 4), (4, 4)), ((3, 5), (5, 2))):
        a0, b0 = rng.standard_normal(shape_a), rng.standard_normal(shape_b)
        w = rng.standard_normal((shape_a[0], shape_b[1]))

        def build(t, vs, mine):
            a, b = vs
            h = (m.MatMul.apply(a, b) if mine else a @ b).named("h")
            return (h.tanh() * w).sum(), [("h", h), ("a", a), ("b", b)]

        _compare_graph(build, [("a", a0), ("b", b0)], ["a", "b"])


def _unbroadcast_task(m):
    rng = _rng(5)
    g = rng.standard_normal((2, 3, 4))
    for shape in ((2, 3, 4), (4,), (3, 1), (1, 4), (2, 1, 1), ()):
        want = g
        while want.ndim > len(shape):
            want = want.sum(axis=0)
        want = want.sum(axis=tuple(i for i, n in enumerate(shape) if n == 1), keepdims=True)
        got = np.asarray(m.unbroadcast(g, shape))
        if got.shape != tuple(shape) or not np.allclose(got, want, rtol=RTOL, atol=ATOL):
            values = "" if got.shape != tuple(shape) else ", wrong values"
            raise TaskFailed("unbroadcast of a (2, 3, 4) gradient to shape %s: got shape %s%s"
                             % (tuple(shape), got.shape, values))


# ---- assignment 2: softmax, masked softmax, layer norm ----------------------------------------------

def _softmax(x, mask=None):
    if mask is not None:
        x = np.where(mask, x, -np.inf)
    top = x.max(axis=-1, keepdims=True)
    e = np.exp(x - np.where(np.isfinite(top), top, 0))
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def _array_function(name, forward, backward):
    """An xgrad.Function whose forward is the grader's and whose backward is the student's function."""

    class Op(xgrad.Function):
        @staticmethod
        def forward(ctx, *args):
            out = forward(*args)
            ctx.save_for_backward(*args, out)
            return out

        @staticmethod
        def backward(ctx, grad):
            return backward(ctx.saved_tensors, grad)

    Op.__name__ = Op.__qualname__ = name
    return Op


def _softmax_task(masked):
    def run(m):
        rng = _rng(6)
        x0 = rng.standard_normal((2, 3, 5))
        w = rng.standard_normal((2, 3, 5))
        mask = rng.uniform(size=(2, 3, 5)) < 0.7
        mask[0, 1, :] = False  # a row with nothing visible: zeros, and a zero gradient, never NaN
        if masked:
            op = _array_function("masked_softmax_backward", lambda s: _softmax(s, mask),
                                 lambda saved, g: m.masked_softmax_backward(saved[1], g, mask))
        else:
            op = _array_function("softmax_backward", _softmax,
                                 lambda saved, g: m.softmax_backward(saved[1], g))

        def build(t, vs, mine):
            (x,) = vs
            scores = (x * 1.5).named("scores")
            if mine:
                p = op.apply(scores)
            else:
                p = xgrad.ops.masked_softmax(scores, mask) if masked else scores.softmax()
            p = p.named("P")
            return (p * w).sum(), [("P", p), ("scores", scores), ("x", x)]

        _compare_graph(build, [("x", x0)], ["scores"])
    return run


def _layer_norm_task(m):
    rng = _rng(7)
    x0 = rng.standard_normal((2, 3, 6))
    weight0, bias0 = 1 + 0.3 * rng.standard_normal(6), 0.3 * rng.standard_normal(6)
    w = rng.standard_normal((2, 3, 6))

    def forward(h, weight, bias):
        mean = h.mean(axis=-1, keepdims=True)
        var = ((h - mean) ** 2).mean(axis=-1, keepdims=True)
        return (h - mean) / np.sqrt(var + 1e-5) * weight + bias

    def backward(saved, g):
        h, weight, bias, _ = saved
        return tuple(m.layer_norm_backward(h, weight, g, 1e-5))

    op = _array_function("layer_norm_backward", forward, backward)

    def build(t, vs, mine):
        x, weight, bias = vs
        h = (x * 2).named("h")
        y = (op.apply(h, weight, bias) if mine else xgrad.ops.layer_norm(h, weight, bias, 1e-5)).named("y")
        return (y * w).sum(), [("y", y), ("weight", weight), ("bias", bias), ("h", h), ("x", x)]

    _compare_graph(build, [("x", x0), ("weight", weight0), ("bias", bias0)], ["h", "weight", "bias"])


# ---- assignment 3: MHA's backward by hand ------------------------------------------------------------

MHA_ORDER = ["joined", "W_O", "O", "P", "V", "S", "Q", "K", "W_Q", "W_K", "W_V", "X"]
MHA_REQUIRED = ["X", "W_Q", "W_K", "W_V", "W_O"]


def _mha_reference(X0, weights, heads, grad_out):
    """The tape's gradients of sum(out * grad_out) for every name of MHA_ORDER."""
    t = xgrad.Tape()
    X = t.input(X0)
    W_Q, W_K, W_V, W_O = (t.input(w) for w in weights)
    Q, K, V = (xgrad.models.split_heads(X @ W, heads) for W in (W_Q, W_K, W_V))
    tt, dh = X0.shape[1], X0.shape[2] // heads
    S = (Q @ K.transpose()) * (1 / np.sqrt(dh))
    P = xgrad.ops.masked_softmax(S, np.tril(np.ones((tt, tt), dtype=bool)))
    O = P @ V
    joined = xgrad.models.combine_heads(O)
    out = joined @ W_O
    (out * grad_out).sum().backward(retain_graph=True)
    named = dict(X=X, W_Q=W_Q, W_K=W_K, W_V=W_V, W_O=W_O, Q=Q, K=K, V=V, S=S, P=P, O=O, joined=joined)
    return out.value, [(n, named[n].grad) for n in MHA_ORDER]


def _mha_task(m):
    rng = _rng(8)
    heads = 2
    X0 = rng.standard_normal((2, 4, 8))
    weights = [0.5 * rng.standard_normal((8, 8)) for _ in range(4)]
    grad_out = rng.standard_normal((2, 4, 8))
    ref_out, reference = _mha_reference(X0, weights, heads, grad_out)
    out, cache = m.mha_forward(X0, *weights, heads)
    if not np.allclose(out, ref_out, rtol=RTOL, atol=ATOL):
        raise TaskFailed("mha_forward's output differs from the library's (it is given: was it changed?)")
    mine = dict(m.mha_backward(grad_out, cache))
    missing = [n for n in MHA_REQUIRED if n not in mine]
    if missing:
        raise TaskFailed("mha_backward returned no %s" % ", ".join(missing))
    _first_wrong(mine, [(n, g) for n, g in reference if n in mine])


# ---- assignment 4: one GPT block -------------------------------------------------------------------

BLOCK_NAMES = ["embed"] + ["blocks.0." + n for n in (
    "mlp", "mlp_gelu", "mlp.W_proj", "mlp.b_proj", "mlp_hidden", "ln_2", "mlp.W_fc", "mlp.b_fc", "res_1",
    "ln_2.weight", "ln_2.bias", "attn", "ln_1", "attn.W_Q", "attn.W_K", "attn.W_V", "attn.W_O", "ln_1.weight",
    "ln_1.bias")]


def _perturbed_gpt():
    """A one-block GPT whose parameters are far from their initial values (every gradient non-trivial)."""
    model = xgrad.GPT(vocab_size=11, block_size=8, layers=1, d_model=8, heads=2, seed=3)
    rng = _rng(9)
    for p in model.parameters():
        name = p.name
        scale = 0.1 if name.endswith(("weight", "bias", "b_fc", "b_proj")) else 0.4
        base = 1.0 if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") else 0.0
        p.assign(base + scale * rng.standard_normal(p.shape))
    return model


def _block_task(m):
    model = _perturbed_gpt()
    tokens = np.array([[1, 4, 2, 9, 3, 7], [5, 5, 0, 10, 2, 8]])
    targets = np.array([[4, 2, 9, 3, 7, 1], [5, 0, 10, 2, 8, -1]])
    out = model.forward(tokens, targets)
    acts = {name: v.value for name, v in out.activations.items()}
    params = dict(model.named_parameters())
    d_res2 = model.tape_gradients(tokens, targets)["blocks.0.res_2"]
    mine = dict(m.block_backward(acts, params, d_res2, 2))
    missing = [n for n in BLOCK_NAMES if n not in mine]
    if missing:
        raise TaskFailed("block_backward returned no %s" % ", ".join("'%s'" % n for n in missing))
    report = model.first_divergence({n: mine[n] for n in BLOCK_NAMES}, tokens, targets, rtol=RTOL, atol=ATOL)
    if report.diverged:
        row = next(r for r in report.rows if r["name"] == report.first)
        raise TaskFailed("first wrong node '%s' (in backward order): max |mine - tape| = %.3g, relative %.3g"
                         % (report.first, row["max_abs"], row["max_rel"]))


# ---- assignment 5: training ------------------------------------------------------------------------

def _schedule_task(m):
    for peak, warmup, decay, floor in ((1e-2, 3, 12, 1e-3), (3e-3, 0, 8, 0.0), (1.0, 5, 5, 0.1)):
        reference = xgrad.optim.LRSchedule(peak, decay, warmup=warmup, decay_steps=decay, min_lr=floor)
        for s in range(1, decay + 6):
            got = m.lr_at(s, peak, warmup, decay, floor)
            if not np.isclose(got, reference(s), rtol=1e-12, atol=1e-15):
                raise TaskFailed("first wrong step %d of (peak_lr %g, warmup %d, decay_steps %d, min_lr %g): "
                                 "%.10g, expected %.10g" % (s, peak, warmup, decay, floor, got, reference(s)))


def _grads_on(values, grads):
    params = [xgrad.Parameter(v, name) for name, v in values.items()]
    for p in params:
        p.grad = grads[p.name]
    return params


def _clip_task(m):
    rng = _rng(10)
    for scale in (0.01, 10.0):
        grads = {"w": scale * rng.standard_normal((3, 4)), "b": scale * rng.standard_normal(4)}
        params = _grads_on({k: np.zeros_like(g) for k, g in grads.items()}, grads)
        norm = xgrad.optim.clip_grad_norm(params, 1.0)
        clipped, got_norm = m.clip_grad_norm({k: g.copy() for k, g in grads.items()}, 1.0)
        if not np.isclose(got_norm, norm, rtol=1e-12):
            raise TaskFailed("the norm of gradients of norm %.4g: got %.10g" % (norm, got_norm))
        reference = [(p.name, p.grad) for p in params]
        try:
            _first_wrong(dict(clipped), reference, "gradient")
        except TaskFailed as e:
            raise TaskFailed("gradients of norm %.4g: %s" % (norm, e)) from None


def _adamw_task(m):
    rng = _rng(11)
    start = {"w": rng.standard_normal((3, 4)), "b": rng.standard_normal(4)}
    params = [xgrad.Parameter(v, k) for k, v in start.items()]
    reference = xgrad.optim.AdamW([{"params": params}], lr=0.05, betas=(0.9, 0.95), eps=1e-8,
                                  weight_decay=0.1)
    mine = {k: v.copy() for k, v in start.items()}
    opt = m.AdamW(mine, lr=0.05, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    for step in range(1, 21):
        grads = {p.name: np.sin(3 * p.value) + p.value for p in params}
        for p in params:
            p.grad = grads[p.name]
        reference.step()
        opt.step({k: g.copy() for k, g in grads.items()})
        try:
            _first_wrong(mine, [(p.name, p.value) for p in params], "parameter")
        except TaskFailed as e:
            raise TaskFailed("after step %d: %s" % (step, e)) from None


def _least_squares():
    rng = _rng(12)
    A, y = rng.standard_normal((16, 4)), rng.standard_normal(16)

    def loss_and_grads(params):
        r = A @ params["w"] + params["b"] - y
        return float((r ** 2).mean()), {"w": 2 * A.T @ r / len(y), "b": np.array(2 * r.mean())}
    return {"w": np.zeros(4), "b": np.array(0.0)}, loss_and_grads


def _train_task(m):
    steps, settings = 30, dict(peak_lr=0.1, warmup=5, min_lr=0.01, max_norm=0.5)
    start, loss_and_grads = _least_squares()
    params = [xgrad.Parameter(v, k) for k, v in start.items()]
    opt = xgrad.optim.AdamW([{"params": params}], lr=0.1, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    schedule = xgrad.optim.LRSchedule(0.1, steps, warmup=5, decay_steps=steps, min_lr=0.01)
    expected = []
    for s in range(1, steps + 1):
        loss, grads = loss_and_grads({p.name: p.value for p in params})
        expected.append(loss)
        for p in params:
            p.grad = grads[p.name]
        xgrad.optim.clip_grad_norm(params, 0.5)
        opt.lr = schedule(s)
        opt.step()
    mine = {k: v.copy() for k, v in start.items()}
    losses = list(m.train(mine, loss_and_grads, steps, **settings))
    if len(losses) != steps:
        raise TaskFailed("train returned %d losses for %d steps" % (len(losses), steps))
    for s, (got, want) in enumerate(zip(losses, expected), 1):
        if not np.isclose(got, want, rtol=1e-9, atol=1e-12):
            raise TaskFailed("first wrong loss at step %d: %.10g, expected %.10g (the loop with xgrad.optim)"
                             % (s, got, want))
    _first_wrong(mine, [(p.name, p.value) for p in params], "parameter")


# ---- assignment 6: the experiment -------------------------------------------------------------------

CORPUS = ("the quick brown fox jumps over the lazy dog. " * 8
          + "a small model learns the bytes of a text. " * 8)


def _grid_task(m):
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.txt")
        with open(corpus, "w") as f:
            f.write(CORPUS * 4)
        heads_list, seeds, steps = [1, 2], [1, 2], 3
        results = m.run_grid(corpus, os.path.join(tmp, "mine"), heads_list, seeds, steps)
        if sorted(results) != heads_list:
            raise TaskFailed("run_grid's keys are %s, expected the head counts %s"
                             % (sorted(results), heads_list))
        for h in heads_list:
            for s, got in zip(seeds, results[h]):
                run = xgrad.train.run(corpus, os.path.join(tmp, "ref_h%d_s%d" % (h, s)), steps=steps,
                                      layers=1, d_model=16, heads=h, block_size=16, batch=4, seed=s,
                                      progress=False, sample_tokens=0, eval_every=steps)
                if not np.isclose(got, run["val_loss"], rtol=1e-9):
                    raise TaskFailed("first wrong run: heads %d, seed %d: val_loss %.10g, the runner's %.10g"
                                     % (h, s, got, run["val_loss"]))


def _summary_task(m):
    results = {1: [2.5, 2.7, 2.6], 4: [2.4, 2.45, 2.7], 8: [2.9, 2.8, 3.0]}
    stats, best = m.summarise(results)
    for h, losses in results.items():
        mean, std = np.mean(losses), np.std(losses, ddof=1)
        got = tuple(stats[h])
        if not np.allclose(got, (mean, std), rtol=1e-12):
            raise TaskFailed("heads %d: (mean, std) = %s, expected (%.10g, %.10g)" % (h, got, mean, std))
    if best != 4:
        raise TaskFailed("the head count with the lowest mean is 4, got %r" % (best,))


EXERCISES = {
    1: ("a1_functions", [
        ("1.1", "unbroadcast", _unbroadcast_task),
        ("1.2", "Add", _binary_task("Add", lambda a, b: a + b, [(2, 3, 4), (3, 1)])),
        ("1.3", "Mul", _binary_task("Mul", lambda a, b: a * b, [(2, 3, 4), (4,)])),
        ("1.4", "Exp", _unary_task("Exp", lambda x: x.exp())),
        ("1.5", "Log", _unary_task("Log", lambda x: x.log(), positive=True)),
        ("1.6", "Sum", _sum_task),
        ("1.7", "MatMul", _matmul_task),
    ]),
    2: ("a2_softmax_norm", [
        ("2.1", "softmax_backward", _softmax_task(masked=False)),
        ("2.2", "masked_softmax_backward", _softmax_task(masked=True)),
        ("2.3", "layer_norm_backward", _layer_norm_task),
    ]),
    3: ("a3_mha", [("3.1", "mha_backward", _mha_task)]),
    4: ("a4_block", [("4.1", "block_backward", _block_task)]),
    5: ("a5_training", [
        ("5.1", "lr_at", _schedule_task),
        ("5.2", "clip_grad_norm", _clip_task),
        ("5.3", "AdamW", _adamw_task),
        ("5.4", "train", _train_task),
    ]),
    6: ("a6_experiment", [
        ("6.1", "run_grid", _grid_task),
        ("6.2", "summarise", _summary_task),
    ]),
}
