# Regenerates the NumPy-written reference files that tests/test_npy.cpp and tests/tool_cli_test.cpp read.
# The files are committed; the tests never run Python. Usage: /usr/bin/python3 make_reference.py
import os

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))


def save(name, a, **kw):
    path = os.path.join(here, name)
    if kw:
        with open(path, "wb") as f:
            np.lib.format.write_array(f, a, **kw)
    else:
        np.save(path, a)


# ---- single files: dtypes, shapes, format versions ----
save("f8_2x3.npy", np.arange(6, dtype="<f8").reshape(2, 3) * 0.5 - 1.0)
save("f4_3.npy", np.array([1.5, -2.25, 0.125], dtype="<f4"))
save("f8_scalar.npy", np.array(3.25, dtype="<f8"))
save("f4_0x4.npy", np.zeros((0, 4), dtype="<f4"))
save("b1_2x3.npy", np.array([[True, False, True], [False, False, True]]))
save("f8_2x1x3x2.npy", np.arange(12, dtype="<f8").reshape(2, 1, 3, 2) / 8.0)
save("f8_v2.npy", np.arange(6, dtype="<f8").reshape(2, 3) * 0.5 - 1.0, version=(2, 0))
save("f8_v3.npy", np.arange(6, dtype="<f8").reshape(2, 3) * 0.5 - 1.0, version=(3, 0))
save("f8_fortran.npy", np.asfortranarray(np.arange(6, dtype="<f8").reshape(2, 3)))
save("f8_big_endian.npy", np.arange(6, dtype=">f8").reshape(2, 3))
save("i8_2x3.npy", np.arange(6, dtype="<i8").reshape(2, 3))


# ---- an MHA case computed independently: cross-attention, H = 4, G = 2, causal AND a (B, Tq, Tk) mask ----
def mha(xq, xk, xv, wq, wk, wv, wo, heads, kv_heads, keep):
    b, tq, d = xq.shape
    tk = xk.shape[1]
    dh = d // heads
    q = (xq @ wq).reshape(b, tq, heads, dh).transpose(0, 2, 1, 3)
    k = (xk @ wk).reshape(b, tk, kv_heads, dh).transpose(0, 2, 1, 3)
    v = (xv @ wv).reshape(b, tk, kv_heads, dh).transpose(0, 2, 1, 3)
    k = np.repeat(k, heads // kv_heads, axis=1)
    v = np.repeat(v, heads // kv_heads, axis=1)
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(dh)
    s = np.where(keep, s, -np.inf)
    m = np.max(s, axis=-1, keepdims=True)
    e = np.where(keep, np.exp(s - np.where(np.isfinite(m), m, 0.0)), 0.0)
    z = np.sum(e, axis=-1, keepdims=True)
    p = np.where(z > 0, e / np.where(z > 0, z, 1.0), 0.0)
    out = (p @ v).transpose(0, 2, 1, 3).reshape(b, tq, d) @ wo
    return out, p


rng = np.random.default_rng(20)
B, Tq, Tk, d, H, G = 2, 3, 5, 8, 4, 2
case = os.path.join(here, "mha_cross")
os.makedirs(os.path.join(case, "in"), exist_ok=True)
os.makedirs(os.path.join(case, "expected"), exist_ok=True)
x = {
    "Xq": rng.standard_normal((B, Tq, d)),
    "Xk": rng.standard_normal((B, Tk, d)),
    "Xv": rng.standard_normal((B, Tk, d)),
    "W_Q": rng.standard_normal((d, d)) / np.sqrt(d),
    "W_K": rng.standard_normal((d, G * d // H)) / np.sqrt(d),
    "W_V": rng.standard_normal((d, G * d // H)) / np.sqrt(d),
    "W_O": rng.standard_normal((d, d)) / np.sqrt(d),
}
mask = rng.random((B, Tq, Tk)) < 0.7
mask[1, 0, :] = False  # a query that sees no key
grad_output = rng.standard_normal((B, Tq, d))
causal = np.arange(Tk)[None, :] <= np.arange(Tq)[:, None] + (Tk - Tq)
keep = mask[:, None, :, :] & causal


def forward(v):
    return mha(v["Xq"], v["Xk"], v["Xv"], v["W_Q"], v["W_K"], v["W_V"], v["W_O"], H, G, keep)


out, attn = forward(x)
for name, a in x.items():
    np.save(os.path.join(case, "in", name + ".npy"), a)
np.save(os.path.join(case, "in", "mask.npy"), mask)
np.save(os.path.join(case, "in", "grad_output.npy"), grad_output)
np.save(os.path.join(case, "expected", "output.npy"), out)
np.save(os.path.join(case, "expected", "attn.npy"), attn)
# Gradients of sum(grad_output * output) by central differences in float64 (error ~1e-10).
eps = 1e-6
for name, a in x.items():
    g = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        saved = a[i]
        a[i] = saved + eps
        up = np.sum(grad_output * forward(x)[0])
        a[i] = saved - eps
        down = np.sum(grad_output * forward(x)[0])
        a[i] = saved
        g[i] = (up - down) / (2 * eps)
    np.save(os.path.join(case, "expected", "grad_" + name + ".npy"), g)
