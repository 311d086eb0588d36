# Reference values for tests/python/test_torch_fixtures.py: expressions of the Python API's operators and
# ops (broadcasting, reflected numbers, batched matmul, the fused nn ops, masking), computed in float64 by
# PyTorch autograd from the project's documented semantics alone (docs/spec.md), not from xgrad's code.
#
# For each case: seeded inputs, the output, and the gradient of sum(output * w) for a seeded weighting w,
# written to tests/python/fixtures/expressions.npz under "<case>/in<k>", "<case>/w", "<case>/out",
# "<case>/grad<k>" (integer arguments such as targets under "<case>/ids").
#
# Usage, from the repository root: /usr/bin/python3 tests/python/make_fixtures.py
# The file is committed; the tests only need NumPy.
import math
import os

import numpy as np
import torch

here = os.path.dirname(os.path.abspath(__file__))
out_path = os.path.join(here, "fixtures", "expressions.npz")


def causal_keep(tq, tk):
    # Bottom-right aligned: query i may attend to key j iff j <= i + (Tk - Tq).
    i = torch.arange(tq)[:, None]
    j = torch.arange(tk)[None, :]
    return j <= i + (tk - tq)


def masked_softmax(x, keep):
    # Softmax among the kept entries; a row with none kept is 0 (and passes no gradient).
    filled = x.masked_fill(~keep, -1e300)
    any_kept = keep.any(dim=-1, keepdim=True)
    return torch.softmax(filled, dim=-1) * any_kept


def gelu_tanh(x):
    return torch.nn.functional.gelu(x, approximate="tanh")


ids_of = {
    "cross_entropy_ignore": np.array([[1, -1, 5, 0], [-1, -1, 2, 3]]),
    "embedding_repeat": np.array([[0, 1, 1], [4, 0, 0]]),
}

masks = {
    "masked_softmax_fully_masked": np.array([[True, False, True, False],
                                             [False, False, False, False],
                                             [True, True, True, True]]),
}

# name: (input shapes, torch function of (inputs, ids, mask))
CASES = {
    "broadcast_arith": ([(2, 3, 4), (3, 1), (4,)],
                        lambda x, ids, m: ((x[0] * x[1] - x[2] / (x[1] * x[1] + 1) + 2) ** 2 / 3
                                           - (1 - x[0]) + 3 / (x[2] * x[2] + 1) - x[1] * 2 + (-x[0]))),
    "array_operands": ([(2, 3), (3,)],
                       lambda x, ids, m: (torch.arange(6.0, dtype=torch.float64).reshape(2, 3) - x[0])
                       * (x[1] + torch.full((3,), 0.5, dtype=torch.float64)) / torch.tensor([1.0, 2.0, 4.0],
                                                                                          dtype=torch.float64)),
    "matmul_batched_broadcast": ([(2, 1, 3, 4), (5, 4, 2)], lambda x, ids, m: x[0] @ x[1]),
    "matmul_vectors": ([(3, 4), (4,), (3,)], lambda x, ids, m: (x[0] @ x[1]) * (x[2] @ x[0]).sum()),
    "unary_chain": ([(3, 4)],
                    lambda x, ids, m: (torch.relu(x[0]) + torch.tanh(x[0]) + torch.exp(x[0] / 3)
                                       + torch.log(x[0] * x[0] + 1) + torch.sigmoid(x[0])
                                       + torch.sqrt(x[0] * x[0] + 1) + torch.rsqrt(x[0] * x[0] + 2)
                                       + x[0] ** 3)),
    "softmax_family": ([(2, 3, 5)],
                       lambda x, ids, m: torch.softmax(0.5 * x[0], dim=-1) + torch.log_softmax(x[0], dim=-1)),
    "cross_entropy_ignore": ([(2, 4, 6)],
                             lambda x, ids, m: torch.nn.functional.cross_entropy(
                                 x[0].reshape(-1, 6), torch.as_tensor(ids).reshape(-1), ignore_index=-1)),
    "layer_norm": ([(2, 3, 8), (8,), (8,)],
                   lambda x, ids, m: torch.nn.functional.layer_norm(x[0], (8,), x[1], x[2], eps=1e-5)),
    "gelu_tanh": ([(4, 5)], lambda x, ids, m: gelu_tanh(3 * x[0])),
    "reductions": ([(2, 3, 4)],
                   lambda x, ids, m: (x[0].sum(dim=(0, 2)) + x[0].mean(dim=1, keepdim=True).sum()
                                      + x[0].var(dim=-1, unbiased=False).sum(dim=0)
                                      + x[0].max(dim=1).values.sum() + x[0].mean())),
    "embedding_repeat": ([(5, 3)], lambda x, ids, m: x[0][torch.as_tensor(ids)] * 2),
    "shape_ops": ([(2, 3, 4), (2, 2, 4)],
                  lambda x, ids, m: torch.cat([x[0].permute(0, 2, 1).reshape(2, 3, 4)[:, 1:3, :], x[1]], dim=1)
                  .transpose(0, 2)),
    "masked_softmax_fully_masked": ([(2, 3, 4)],
                                    lambda x, ids, m: masked_softmax(2 * x[0], torch.as_tensor(m))),
    "attention_gqa_causal": ([(1, 4, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4)],
                             lambda x, ids, m: torch.softmax(
                                 (x[0] @ x[1].repeat_interleave(2, dim=1).transpose(-2, -1) / math.sqrt(4))
                                 .masked_fill(~causal_keep(3, 5), -math.inf), dim=-1)
                             @ x[2].repeat_interleave(2, dim=1)),
}


def main():
    rng = np.random.default_rng(20)
    arrays = {}
    for name, (shapes, f) in CASES.items():
        inputs = [rng.standard_normal(s) for s in shapes]
        xs = [torch.tensor(a, requires_grad=True) for a in inputs]
        out = f(xs, ids_of.get(name), masks.get(name))
        w = rng.standard_normal(tuple(out.shape))
        (out * torch.tensor(w)).sum().backward()
        for k, a in enumerate(inputs):
            arrays["%s/in%d" % (name, k)] = a
            arrays["%s/grad%d" % (name, k)] = xs[k].grad.numpy()
        arrays[name + "/w"] = w
        arrays[name + "/out"] = out.detach().numpy()
        if name in ids_of:
            arrays[name + "/ids"] = ids_of[name]
        if name in masks:
            arrays[name + "/mask"] = masks[name]
        print("%-28s out %s" % (name, tuple(out.shape)))
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    np.savez_compressed(out_path, **arrays)


if __name__ == "__main__":
    main()
