"""Assignment 4: one GPT block's backward by hand, located by the first-divergence report when wrong.

The block (docs/spec.md, "The small GPT"; pre-norm, biases in the MLP only, GELU's tanh approximation):
    ln_1     = layer_norm(embed; ln_1.weight, ln_1.bias)
    attn     = causal multi-head self-attention of ln_1 (W_Q, W_K, W_V, W_O: assignment 3)
    res_1    = embed + attn
    ln_2     = layer_norm(res_1; ln_2.weight, ln_2.bias)
    mlp_hidden = ln_2 W_fc + b_fc;   mlp_gelu = gelu(mlp_hidden);   mlp = mlp_gelu W_proj + b_proj
    res_2    = res_1 + mlp
with layer_norm's eps = 1e-5 and gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).

Write ``block_backward``: from the forward's activations, the parameters and dL/d res_2, return the
gradient of every activation and parameter of the block under the model's names: "embed" (the block's
input) and, each with the prefix "blocks.0.", "mlp", "mlp_gelu", "mlp.W_proj", "mlp.b_proj",
"mlp_hidden", "ln_2", "mlp.W_fc", "mlp.b_fc", "res_1", "ln_2.weight", "ln_2.bias", "attn", "ln_1",
"attn.W_Q", "attn.W_K", "attn.W_V", "attn.W_O", "ln_1.weight", "ln_1.bias". The grader compares them with the tape's in backward order
(xgrad.GPT.first_divergence) and names the first that differs. Your assignments 2 and 3 may be imported.

Grade it: ``python3 -m xgrad.course check DIR --exercise 4``.
"""

import numpy as np


def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def block_backward(acts, params, d_res2, heads):
    """``acts``: {"embed": array, "blocks.0.<name>": array} of the forward; ``params``: {"blocks.0.<name>":
    array}; d_res2: dL/d blocks.0.res_2 (B, T, d). Returns {name: gradient} for the names above."""
    raise NotImplementedError("block_backward")
