"""Assignment 4, solved with assignments 2 and 3 (models/gpt_manual.hpp does the same in C++)."""

import numpy as np

from a2_softmax_norm import layer_norm_backward
from a3_mha import mha_backward, mha_forward

C = np.sqrt(2 / np.pi)


def gelu(x):
    return 0.5 * x * (1 + np.tanh(C * (x + 0.044715 * x ** 3)))


def gelu_slope(x):
    t = np.tanh(C * (x + 0.044715 * x ** 3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t ** 2) * C * (1 + 3 * 0.044715 * x ** 2)


def block_backward(acts, params, d_res2, heads):
    a = lambda n: acts["blocks.0." + n]  # noqa: E731
    p = lambda n: params["blocks.0." + n]  # noqa: E731
    flat = lambda x: x.reshape(-1, x.shape[-1])  # noqa: E731
    g = {}
    d_mlp = d_res2
    g["mlp"] = d_mlp
    g["mlp_gelu"] = d_mlp @ p("mlp.W_proj").T
    g["mlp.W_proj"] = flat(a("mlp_gelu")).T @ flat(d_mlp)
    g["mlp.b_proj"] = flat(d_mlp).sum(axis=0)
    g["mlp_hidden"] = g["mlp_gelu"] * gelu_slope(a("mlp_hidden"))
    g["ln_2"] = g["mlp_hidden"] @ p("mlp.W_fc").T
    g["mlp.W_fc"] = flat(a("ln_2")).T @ flat(g["mlp_hidden"])
    g["mlp.b_fc"] = flat(g["mlp_hidden"]).sum(axis=0)
    d_from_ln2, g["ln_2.weight"], g["ln_2.bias"] = layer_norm_backward(a("res_1"), p("ln_2.weight"),
                                                                        g["ln_2"])
    g["res_1"] = d_res2 + d_from_ln2
    g["attn"] = g["res_1"]
    weights = [p("attn.W_" + n) for n in "QKVO"]
    _, cache = mha_forward(a("ln_1"), *weights, heads)
    d_attn = mha_backward(g["attn"], cache)
    g["ln_1"] = d_attn["X"]
    for n in "QKVO":
        g["attn.W_" + n] = d_attn["W_" + n]
    d_from_ln1, g["ln_1.weight"], g["ln_1.bias"] = layer_norm_backward(acts["embed"], p("ln_1.weight"),
                                                                        g["ln_1"])
    out = {"blocks.0." + k: v for k, v in g.items()}
    out["embed"] = g["res_1"] + d_from_ln1
    return out
