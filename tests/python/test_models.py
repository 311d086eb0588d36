# Models from Python: MHA against the PyTorch fixtures and the chapter's three-way check (tape, manual,
# finite differences); the GPT against its PyTorch fixtures, the first-divergence report, optimisers
# against torch.optim's fixtures, training, resuming and sampling; and bad input to each.
import json
import os
import struct

import numpy as np
import pytest

import xgrad
from xgrad import models


def data(source_dir, *parts):
    return os.path.join(source_dir, "tests", "data", *parts)


def mha_case(source_dir, name):
    root = data(source_dir, "fixtures", name)
    args = open(os.path.join(root, "args.txt")).read().split()
    heads, kv = int(args[args.index("--heads") + 1]), int(args[args.index("--kv-heads") + 1])
    load = lambda d: {f[:-4]: np.load(os.path.join(root, d, f)) for f in os.listdir(os.path.join(root, d))}
    return load("in"), load("expected"), heads, kv, "--causal" in args


MHA_CASES = ["self_causal", "self_noncausal", "single_head", "gqa_g2_h4", "mqa_g1_h4", "mask_and_causal",
             "padding_one_fully_padded", "cross_causal_tq_gt_tk", "cross_causal_tq_lt_tk"]


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("name", MHA_CASES)
def test_mha_matches_pytorch_fixtures(source_dir, name, fused):
    given, expected, heads, kv, causal = mha_case(source_dir, name)
    t = xgrad.Tape()
    w = [t.input(given[k]) for k in ("W_Q", "W_K", "W_V", "W_O")]
    if "X" in given:
        x = t.input(given["X"])
        xs = [x, x, x]
    else:
        xs = [t.input(given[k]) for k in ("Xq", "Xk", "Xv")]
    mask = given.get("mask")
    if mask is not None and mask.ndim == 3:  # the .npy tool reads (B, Tq, Tk) as (B, 1, Tq, Tk)
        mask = mask[:, None]
    out, attn = models.multi_head_attention(*xs, *w, heads=heads, kv_heads=kv, mask=mask, causal=causal,
                                            fused=fused)
    np.testing.assert_allclose(out.value, expected["output"], atol=1e-12)
    if not fused:
        np.testing.assert_allclose(attn.value, expected["attn"], atol=1e-12)
    out.backward(given.get("grad_output", np.ones(out.shape)))
    names = ["X"] if "X" in given else ["Xq", "Xk", "Xv"]
    leaves = dict(zip(names, xs), W_Q=w[0], W_K=w[1], W_V=w[2], W_O=w[3])
    for key, v in leaves.items():
        np.testing.assert_allclose(v.grad, expected["grad_" + key], atol=1e-11, err_msg=key)


def test_three_way_check_tape_manual_finite_differences():
    rng = np.random.default_rng(0)
    B, T, d, H = 2, 5, 8, 2
    X = rng.standard_normal((B, T, d))
    Ws = [rng.standard_normal((d, d)) / np.sqrt(d) for _ in range(4)]
    G = rng.standard_normal((B, T, d))

    t = xgrad.Tape()
    x, *w = [t.input(a) for a in [X] + Ws]
    out, _ = models.self_attention(x, *w, heads=H, causal=True)
    (out * G).sum().backward()

    manual_out, cache = models.manual.mha_forward(X, X, X, *Ws, heads=H, causal=True)
    g = models.manual.mha_backward(G, cache)
    np.testing.assert_allclose(manual_out, out.value, atol=1e-13)
    np.testing.assert_allclose(g["Xq"] + g["Xk"] + g["Xv"], x.grad, atol=1e-12)
    for k, name in enumerate(("W_Q", "W_K", "W_V", "W_O")):
        np.testing.assert_allclose(g[name], w[k].grad, atol=1e-12)

    def loss(x, *w):
        return (models.self_attention(x, *w, heads=H, causal=True)[0] * G).sum()

    assert xgrad.gradcheck(loss, [X] + Ws)
    assert cache.weights.shape == (B, H, T, T) and cache.mask.shape in ((T, T), (B, H, T, T))


def test_mha_float32_and_errors():
    rng = np.random.default_rng(1)
    t = xgrad.Tape("float32")
    x = t.input(rng.standard_normal((1, 3, 4)))
    w = [t.input(rng.standard_normal((4, 4))) for _ in range(4)]
    out, attn = models.self_attention(x, *w, heads=2)
    assert out.value.dtype == np.float32 and attn.shape == (1, 2, 3, 3)
    with pytest.raises(ValueError, match="divisible"):
        models.self_attention(x, *w, heads=3)
    with pytest.raises(ValueError):
        models.self_attention(x, *w, heads=2, kv_heads=3)
    with pytest.raises(ValueError, match="mask"):
        models.self_attention(x, *w, heads=2, mask=np.ones((5, 5), bool))
    with pytest.raises(ValueError, match="bool"):
        models.self_attention(x, *w, heads=2, mask=np.ones((3, 3)))
    with pytest.raises(ValueError):
        models.manual.mha_forward(np.ones((1, 3, 4)), np.ones((1, 3, 4)), np.ones((1, 3, 4)), np.ones((4, 4)),
                                  np.ones((4, 4)), np.ones((4, 4)), np.ones((4, 5)), heads=2)
    with pytest.raises(ValueError, match="W_Q"):
        models.manual.mha_forward(*[np.ones(3)] * 7, heads=1)


def test_masks_and_counting():
    np.testing.assert_array_equal(models.causal_mask(2, 3), [[True, True, False], [True, True, True]])
    assert models.padding_mask([1, 3], 3).shape == (2, 1, 1, 3)
    assert models.parameter_count(64) == 4 * 64 ** 2
    assert models.parameter_count(64, heads=8, kv_heads=2) == 2 * 64 ** 2 + 2 * 64 * 16
    assert models.self_attention_multiply_adds(2, 10, 16) == 4 * 2 * 10 * 16 ** 2 + 2 * 2 * 100 * 16


def read_safetensors(path):
    """A small independent reader: {name: array} of a safetensors file (F64/F32), and its metadata."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = raw[8 + n:]
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = {"F64": "<f8", "F32": "<f4"}[info["dtype"]]
        out[name] = np.frombuffer(body[begin:end], dtype=dtype).reshape(info["shape"])
    return out, meta


GPT_CASES = ["one_layer", "three_layers", "gqa", "mqa", "t1", "ignored_some", "ignored_all", "batch1",
             "full_block"]


@pytest.mark.parametrize("name", GPT_CASES)
def test_gpt_matches_pytorch_fixtures(source_dir, name):
    root = data(source_dir, "gpt_fixtures", name)
    m = xgrad.GPT.load(os.path.join(root, "model.safetensors"))
    tokens = np.load(os.path.join(root, "in", "tokens.npy"))
    targets = np.load(os.path.join(root, "in", "targets.npy"))
    logits, loss = m(tokens, targets)
    np.testing.assert_allclose(logits.value, np.load(os.path.join(root, "expected", "logits.npy")), atol=1e-11)
    expected_loss = float(np.load(os.path.join(root, "expected", "loss.npy")))
    assert float(loss.value) == pytest.approx(expected_loss, abs=1e-12)
    loss.backward()
    expected, _ = read_safetensors(os.path.join(root, "expected", "grads.safetensors"))
    grads = m.grads()
    assert sorted(grads) == sorted(expected)
    for key, g in expected.items():
        np.testing.assert_allclose(grads[key], g, atol=1e-11, err_msg=key)
    _, manual_loss, manual = m.manual_gradients(tokens, targets)
    assert manual_loss == pytest.approx(float(loss.value), abs=1e-12)
    for key, g in expected.items():
        np.testing.assert_allclose(manual[key], g, atol=1e-11, err_msg=key)


def small_gpt(dtype="float64"):
    m = xgrad.GPT(vocab_size=11, block_size=8, layers=2, d_model=16, heads=4, kv_heads=2, seed=3, dtype=dtype)
    rng = np.random.default_rng(2)
    tokens = rng.integers(0, 11, (2, 6))
    targets = rng.integers(0, 11, (2, 6))
    targets[0, 2] = -1
    return m, tokens, targets


def test_gpt_surface():
    m, tokens, targets = small_gpt()
    sizes = {"vocab_size": 11, "block_size": 8, "layers": 2, "d_model": 16, "heads": 4, "kv_heads": 2}
    assert {key: m.config[key] for key in sizes} == sizes
    named = m.named_parameters()
    assert [n for n, _ in named][:3] == ["wte", "wpe", "blocks.0.ln_1.weight"]
    assert sum(a.size for _, a in named) == m.parameter_count()
    logits, loss = m(tokens)
    assert logits.shape == (2, 6, 11) and loss is None
    out = m.forward(tokens, targets)
    assert list(out.activations)[0] == "embed" and "blocks.1.mlp_gelu" in out.activations
    out.loss.backward()
    g1 = m.grads()
    m(tokens, targets)[1].backward()
    np.testing.assert_allclose(m.grads()["wte"], 2 * g1["wte"], rtol=1e-12)  # accumulates
    m.zero_grad()
    assert not any(g.any() for g in m.grads().values())


def test_gpt_all_targets_ignored_gives_zero_loss_and_gradients():
    m, tokens, _ = small_gpt()
    logits, loss = m(tokens, np.full(tokens.shape, -1))
    loss.backward()
    assert loss.value == 0 and not any(g.any() for g in m.grads().values())


def test_first_divergence_of_your_own_gradients():
    m, tokens, targets = small_gpt()
    _, _, right = m.manual_gradients(tokens, targets)
    assert not m.first_divergence(right, tokens, targets).diverged
    mine = {"blocks.1.attn.W_Q": right["blocks.1.attn.W_Q"], "wte": right["wte"] * 1.001}
    report = m.first_divergence(mine, tokens, targets)
    assert report.first == "wte" and "wte" in str(report)
    _, _, wrong = m.manual_gradients(tokens, targets, broken="layer_norm")
    assert m.first_divergence(wrong, tokens, targets).first == "blocks.1.res_1"
    with pytest.raises(ValueError, match="unknown gradient names"):
        m.first_divergence({"nope": np.ones(1)}, tokens, targets)
    with pytest.raises(ValueError, match="broken"):
        m.manual_gradients(tokens, targets, broken="nope")


def test_first_divergence_generic():
    ref = {"b": np.ones(3), "a": np.zeros((2, 2))}
    assert not xgrad.first_divergence(dict(ref), ref).diverged
    report = xgrad.first_divergence({"b": np.ones(3), "a": np.eye(2)}, ref)
    assert report.first == "a" and report.rows[0]["name"] == "b" and report.rows[1]["diverges"]
    assert xgrad.first_divergence({"b": np.ones(3)}, ref).first == "a"  # missing diverges
    assert xgrad.first_divergence({"b": np.ones(2), "a": np.zeros((2, 2))}, ref).first == "b"  # shape
    f32 = {k: v.astype(np.float32) for k, v in ref.items()}
    assert not xgrad.first_divergence({"b": np.ones(3) + 1e-6, "a": np.zeros((2, 2))}, f32).diverged


@pytest.mark.parametrize("tokens,match", [
    (np.array([[0, 11]]), "gpt_forward"),
    (np.zeros((1, 9), int), "gpt_forward"),
    (np.zeros((1, 0), int), "gpt_forward"),
    (np.zeros(4, int), "gpt_forward"),
    (np.zeros((1, 3)), "integer"),
    (np.zeros((1, 3), bool), "integer"),
])
def test_gpt_bad_tokens(tokens, match):
    m, _, _ = small_gpt()
    with pytest.raises(ValueError, match=match):
        m(tokens)


def test_gpt_bad_targets_and_sizes():
    m, tokens, _ = small_gpt()
    with pytest.raises(ValueError):
        m(tokens, np.zeros((2, 5), int))
    with pytest.raises(ValueError):
        m(tokens, np.full((2, 6), 11))
    with pytest.raises(ValueError):
        xgrad.GPT(11, 8, 1, 10, 4)  # d % H != 0
    with pytest.raises(ValueError):
        xgrad.GPT(11, 8, 1, 16, 4, kv_heads=3)


def test_gpt_save_load_round_trip_and_corrupt_files(tmp_path):
    m, tokens, targets = small_gpt()
    path = tmp_path / "m.safetensors"
    m.save(path, {"note": "hello"})
    back = xgrad.GPT.load(path)
    assert back.metadata["note"] == "hello" and back.config == m.config
    np.testing.assert_array_equal(back(tokens)[0].value, m(tokens)[0].value)
    f32 = xgrad.GPT.load(path, dtype="float32")
    np.testing.assert_allclose(f32(tokens)[0].value, m(tokens)[0].value, atol=1e-4)
    raw = path.read_bytes()
    for broken in (raw[:100], b"\xff" * 8 + raw[8:], raw[:8] + b"[" + raw[9:]):
        bad = tmp_path / "bad.safetensors"
        bad.write_bytes(broken)
        with pytest.raises(RuntimeError):
            xgrad.GPT.load(bad)
    with pytest.raises(RuntimeError):
        xgrad.GPT.load(tmp_path / "missing.safetensors")


def test_sampling_and_decoding():
    m, _, _ = small_gpt()
    ids = m.sample([1, 2, 3], tokens=12, temperature=0.8, top_k=5, seed=4)
    assert len(ids) == 12 and all(0 <= i < 11 for i in ids)
    assert m.sample([1, 2, 3], tokens=12, temperature=0.8, top_k=5, seed=4) == ids
    with pytest.raises(ValueError):
        m.sample([], tokens=3)
    with pytest.raises(ValueError):
        m.sample([11], tokens=3)
    with pytest.raises(ValueError, match="vocab"):
        m.sample("text", tokens=3)


def set_grads(params, grads):
    """Puts `grads` into the parameters' gradients through a tape: d sum(p * g) / dp = g."""
    for p in params:
        p.zero_grad()
        t = xgrad.Tape()
        (t.param(p) * grads[p.name]).sum().backward()


OPTIM_CASES = {
    "sgd_momentum": lambda ps: xgrad.optim.SGD(ps, lr=0.1, momentum=0.9),
    "sgd_nesterov": lambda ps: xgrad.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
    "sgd_momentum_decay": lambda ps: xgrad.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.1),
    "adam": lambda ps: xgrad.optim.Adam(ps, lr=0.01),
    "adam_l2_decay": lambda ps: xgrad.optim.Adam(ps, lr=0.01, weight_decay=0.1),
    "adamw": lambda ps: xgrad.optim.AdamW(ps, lr=0.01, betas=(0.9, 0.95), weight_decay=0.1),
}


@pytest.mark.parametrize("name", sorted(OPTIM_CASES))
def test_optimisers_match_torch_optim(source_dir, name):
    root = data(source_dir, "optim_fixtures")
    names = ["linear.weight", "linear.bias", "conv.weight"]
    params = [xgrad.Parameter(np.load(os.path.join(root, "initial", n + ".npy")), n) for n in names]
    grads = {n: np.load(os.path.join(root, "grads", n + ".npy")) for n in names}
    opt = OPTIM_CASES[name](params)
    for step in range(5):
        set_grads(params, {n: grads[n][step] for n in names})
        opt.step()
        for p in params:
            after = np.load(os.path.join(root, name, "after", p.name + ".npy"))[step]
            np.testing.assert_allclose(p.value, after, rtol=1e-12, atol=1e-14,
                                       err_msg="%s step %d" % (p.name, step))
    state = opt.state_dict()
    assert state["optim.step"] == 5
    for key, value in state.items():
        np.testing.assert_allclose(value, np.load(os.path.join(root, name, key + ".npy")), rtol=1e-12, atol=1e-14)


def test_clip_and_schedule_match_torch(source_dir):
    root = data(source_dir, "optim_fixtures")
    names = ["linear.weight", "linear.bias", "conv.weight"]
    params = [xgrad.Parameter(np.load(os.path.join(root, "initial", n + ".npy")), n) for n in names]
    grads = {n: np.load(os.path.join(root, "grads", n + ".npy")) for n in names}
    opt = xgrad.optim.AdamW(params, lr=0.01, betas=(0.9, 0.95), weight_decay=0.1)
    schedule = xgrad.optim.LRSchedule(0.01, 5, warmup=2, decay_steps=4)
    norms = np.load(os.path.join(root, "adamw_clip_schedule", "grad_norm.npy"))
    for step in range(5):
        set_grads(params, {n: grads[n][step] for n in names})
        assert xgrad.optim.clip_grad_norm(params, 1.0) == pytest.approx(norms[step], rel=1e-12)
        opt.lr = schedule(step + 1)
        opt.step()
    for p in params:
        after = np.load(os.path.join(root, "adamw_clip_schedule", "after", p.name + ".npy"))[4]
        np.testing.assert_allclose(p.value, after, rtol=1e-12, atol=1e-14)
    for x, w, d, s, lr in np.load(os.path.join(root, "lr_schedule.npy")):
        assert xgrad.optim.LRSchedule(x, int(d), int(w), int(d)).at(int(s)) == pytest.approx(lr, rel=1e-12)


def test_optimiser_errors():
    p = xgrad.Parameter(np.ones(2), "p")
    with pytest.raises(ValueError):
        xgrad.optim.SGD([p, p])  # repeated name
    with pytest.raises(ValueError):
        xgrad.optim.SGD([xgrad.Parameter(np.ones(2))])  # no name
    with pytest.raises(ValueError):
        xgrad.optim.Adam([p], lr=-1)
    with pytest.raises(ValueError):
        xgrad.optim.SGD([np.ones(2)])
    with pytest.raises(ValueError):
        xgrad.optim.SGD([p, xgrad.Parameter(np.ones(2), "q", dtype="float32")])
    opt = xgrad.optim.SGD([p])
    with pytest.raises(ValueError):
        opt.load_state_dict({"optim.momentum.zzz": np.ones(2)})


def test_a_model_declared_in_python_trains():
    """A two-layer perceptron from Parameters, a fresh tape per step, AdamW: the loss falls."""
    rng = np.random.default_rng(5)
    X = rng.standard_normal((64, 3))
    y = np.sin(X.sum(axis=1, keepdims=True))
    params = [xgrad.Parameter(rng.standard_normal((3, 16)) * 0.5, "W1"), xgrad.Parameter(np.zeros(16), "b1"),
              xgrad.Parameter(rng.standard_normal((16, 1)) * 0.5, "W2")]
    opt = xgrad.optim.AdamW(params, lr=0.03, weight_decay=0.0)
    losses = []
    for _ in range(150):
        t = xgrad.Tape()
        W1, b1, W2 = [t.param(p) for p in params]
        loss = (((t.constant(X) @ W1 + b1).tanh() @ W2 - y) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.value))
    assert losses[-1] < 0.1 * losses[0]


def test_training_resume_and_sampling(tmp_path):
    text = "".join("%d little pigs went to market. " % (i % 7) for i in range(150))
    corpus = tmp_path / "text.txt"
    corpus.write_text(text)
    options = dict(layers=1, d_model=16, heads=2, block_size=16, batch=4, sample_tokens=0, eval_every=10,
                   eval_windows=8, decay_steps=20, progress=False)
    whole = xgrad.train.run(corpus, tmp_path / "whole", steps=20, **options)
    xgrad.train.run(corpus, tmp_path / "split", steps=10, **options)
    resumed = xgrad.train.run(corpus, tmp_path / "split", steps=20, resume=True, **options)
    assert resumed["first_step"] == 10 and resumed["last_step"] == 20
    assert resumed["train_loss"] == whole["train_loss"] and resumed["val_loss"] == whole["val_loss"]
    log = (tmp_path / "whole" / "log.csv").read_text().splitlines()
    assert log[0].startswith("step,train_loss,val_loss,lr") and len(log) == 21
    m = xgrad.GPT.load(whole["checkpoint"])
    assert m.vocabulary.size() == m.config["vocab_size"]
    assert m.decode(m.encode("little pigs")) == "little pigs"
    continuation = m.sample("little ", tokens=20, temperature=0.5, seed=2)
    assert isinstance(continuation, str) and len(continuation.encode()) == 20
    with pytest.raises(ValueError):
        m.encode("Z")  # not in the vocabulary


def test_training_errors(tmp_path):
    with pytest.raises(RuntimeError):
        xgrad.train.run(tmp_path / "missing.txt", tmp_path / "out", steps=2, progress=False)
    (tmp_path / "short.txt").write_text("ab")
    with pytest.raises(RuntimeError):
        xgrad.train.run(tmp_path / "short.txt", tmp_path / "out", steps=2, progress=False)
    (tmp_path / "ok.txt").write_text("abcdefgh" * 100)
    with pytest.raises(ValueError):
        xgrad.train.run(tmp_path / "ok.txt", tmp_path / "out", steps=2, d_model=10, heads=4, progress=False)
    with pytest.raises(ValueError, match=r"^steps must be at least 1, got -2$"):
        xgrad.train.run(tmp_path / "ok.txt", tmp_path / "out", steps=-2, progress=False)
    with pytest.raises(ValueError, match=r"^dropout must be in \[0, 1\)"):
        xgrad.train.run(tmp_path / "ok.txt", tmp_path / "out", steps=2, dropout=1.5, progress=False)


def test_negative_sizes_are_value_errors():
    with pytest.raises(ValueError):
        xgrad.GPT(11, 8, -1, 16, 4)
    m, _, _ = small_gpt()
    with pytest.raises(ValueError):
        m.sample([1], tokens=-3)
    with pytest.raises(ValueError):
        m.sample([1], temperature=float("nan"))
    # Whole numbers, not whatever int() makes of a value: 2.5 tokens, a bool, a string are refused by name.
    for kwargs, what in (({"tokens": 2.5}, "tokens"), ({"top_k": True}, "top_k"), ({"seed": "4"}, "seed"),
                         ({"seed": 2 ** 64}, "seed"), ({"temperature": "hot"}, "temperature")):
        with pytest.raises(ValueError, match="GPT.sample: " + what):
            m.sample([1], **kwargs)


VARIANT_CASES = ["gpt2_bias_all", "llama", "llama_gqa", "llama_t1", "mqa_rope_bias_all", "nanogpt_bias_none",
                 "position_none", "swiglu_biases", "untied_head", "qk_norm", "relu2", "softcap",
                 "llama_qk_norm_softcap", "gpt2_relu2_softcap", "window", "llama_qk_norm_window",
                 "relu2_softcap_window_long"]


@pytest.mark.parametrize("name", VARIANT_CASES)
def test_gpt_variants_match_pytorch_fixtures(source_dir, name):
    root = data(source_dir, "gpt_variant_fixtures", name)
    m = xgrad.GPT.load(os.path.join(root, "model.safetensors"))
    tokens = np.load(os.path.join(root, "in", "tokens.npy"))
    targets = np.load(os.path.join(root, "in", "targets.npy"))
    logits, loss = m(tokens, targets)
    np.testing.assert_allclose(logits.value, np.load(os.path.join(root, "expected", "logits.npy")), atol=1e-10)
    loss.backward()
    expected, _ = read_safetensors(os.path.join(root, "expected", "grads.safetensors"))
    grads = m.grads()
    assert sorted(grads) == sorted(expected)
    for key, g in expected.items():
        np.testing.assert_allclose(grads[key], g, atol=1e-10, err_msg=key)


def test_gpt_variant_from_python(tmp_path):
    m = xgrad.GPT(vocab_size=11, block_size=8, layers=1, d_model=16, heads=4, kv_heads=2, norm="rmsnorm",
                  position="rope", mlp="swiglu", mlp_hidden=24, bias="none", tied_head=False)
    c = m.config
    assert (c["norm"], c["position"], c["mlp"], c["mlp_hidden"], c["bias"], c["tied_head"]) == \
        ("rmsnorm", "rope", "swiglu", 24, "none", False)
    names = [n for n, _ in m.named_parameters()]
    assert "wpe" not in names and "blocks.0.mlp.W_gate" in names and "lm_head" in names
    assert "blocks.0.ln_1.bias" not in names
    tokens = np.array([[1, 2, 3, 4, 5]])
    logits, loss = m(tokens, tokens)
    loss.backward()
    assert all(np.isfinite(g).all() for g in m.grads().values())
    path = tmp_path / "llama.safetensors"
    m.save(path)
    back = xgrad.GPT.load(path)
    assert back.config == c
    np.testing.assert_array_equal(back(tokens)[0].value, logits.value)
    with pytest.raises(ValueError, match="norm"):
        xgrad.GPT(11, 8, 1, 16, 4, norm="batchnorm")
    with pytest.raises(ValueError):
        xgrad.GPT(11, 8, 1, 12, 4, position="rope")  # dh = 3 is odd


@pytest.mark.parametrize("keywords", [dict(qk_norm="rms"), dict(mlp="relu2"), dict(logit_softcap=2.5),
                                      dict(attention_window=2),
                                      dict(qk_norm="rms", mlp="relu2", logit_softcap=30, attention_window=3,
                                           position="rope")])
def test_later_variants_from_python(tmp_path, keywords):
    """docs/spec.md, "More architecture variants": each keyword builds its model, which trains (a finite
    gradient for every parameter, equal to the hand-derived twin's) and round-trips through a checkpoint
    that names its later keys in model_keys."""
    m = xgrad.GPT(vocab_size=11, block_size=8, layers=2, d_model=16, heads=4, kv_heads=2, seed=4, **keywords)
    for key, value in keywords.items():
        assert m.config[key] == value
    tokens, targets = np.array([[1, 2, 3, 4, 5], [5, 4, 3, 2, 1]]), np.array([[2, 3, 4, 5, 6], [0, 1, -1, 3, 2]])
    logits, loss = m(tokens, targets)
    if "logit_softcap" in keywords:
        assert np.abs(logits.value).max() < keywords["logit_softcap"]
    loss.backward()
    grads = m.grads()
    assert all(np.isfinite(g).all() and np.abs(g).max() > 0 for g in grads.values())
    _, manual_loss, manual = m.manual_gradients(tokens, targets)
    assert manual_loss == pytest.approx(float(loss.value), rel=1e-12)
    for name, g in grads.items():
        np.testing.assert_allclose(manual[name], g, rtol=1e-9, atol=1e-12, err_msg=name)
    path = tmp_path / "later.safetensors"
    m.save(path)
    back = xgrad.GPT.load(path)
    assert back.config == m.config
    assert sorted(back.metadata["model_keys"].split(",")) == sorted(keywords.keys() - {"position"})
    np.testing.assert_array_equal(back(tokens)[0].value, logits.value)


@pytest.mark.parametrize("keywords, named", [(dict(qk_norm="layer"), "qk_norm"), (dict(mlp="relu3"), "mlp"),
                                             (dict(logit_softcap=-1.0), "logit_softcap"),
                                             (dict(logit_softcap="big"), "logit_softcap"),
                                             (dict(attention_window=-1), "attention_window"),
                                             (dict(attention_window=2.5), "attention_window")])
def test_later_variants_bad_values_are_value_errors(keywords, named):
    with pytest.raises(ValueError, match=named):
        xgrad.GPT(11, 8, 1, 16, 4, **keywords)


def test_training_a_variant(tmp_path):
    corpus = tmp_path / "text.txt"
    corpus.write_text("".join("%d little pigs went to market. " % (i % 7) for i in range(150)))
    summary = xgrad.train.run(corpus, tmp_path / "llama", steps=10, layers=1, d_model=16, heads=2, block_size=16,
                              batch=4, sample_tokens=0, eval_windows=8, progress=False, norm="rmsnorm",
                              position="rope", mlp="swiglu", bias="none", dropout=0.1)
    m = xgrad.GPT.load(summary["checkpoint"])
    assert (m.config["norm"], m.config["position"], m.config["mlp"]) == ("rmsnorm", "rope", "swiglu")
    with pytest.raises(ValueError, match="mlp"):
        xgrad.train.run(corpus, tmp_path / "bad", steps=2, mlp="relu", progress=False)


def test_ctrl_c_stops_training_after_a_step_with_a_checkpoint(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    corpus = tmp_path / "text.txt"
    corpus.write_text("".join("%d little pigs went to market. " % (i % 7) for i in range(150)))
    script = ("import sys, xgrad\n"
              "s = xgrad.train.run(sys.argv[1], sys.argv[2], steps=100000, layers=1, d_model=16, heads=2,\n"
              "                    block_size=16, batch=4, sample_tokens=0, eval_every=100000, progress=False)\n"
              "print('interrupted' if s['interrupted'] else 'finished', s['last_step'])\n"
              "import signal; signal.raise_signal(signal.SIGINT)\n")  # Python's own handler is back
    child = subprocess.Popen([sys.executable, "-c", script, str(corpus), str(tmp_path / "run")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not (tmp_path / "run" / "log.csv").exists() and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    assert out.startswith("interrupted"), (out, err)
    assert "KeyboardInterrupt" in err and child.returncode in (1, -signal.SIGINT)  # Python 3.11 re-raises it
    last_step = int(out.split()[1])
    m = xgrad.GPT.load(tmp_path / "run" / "model.safetensors")
    assert int(m.metadata["step"]) == last_step
