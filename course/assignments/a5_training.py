"""Assignment 5: a training loop with your own AdamW, learning-rate schedule and gradient clipping,
checked against xgrad.optim (which follows torch.optim).

- ``lr_at(step, peak_lr, warmup, decay_steps, min_lr)``: linear warm-up peak_lr s / W for s <= W (W > 0),
  then cosine decay min_lr + (peak_lr - min_lr) (1 + cos(pi (s - W) / (D - W))) / 2 up to step D, then
  min_lr. Steps count from 1 (step s is the s-th update).
- ``clip_grad_norm(grads, max_norm)``: the 2-norm of all gradients together; when max_norm / (norm + 1e-6)
  < 1 every gradient is multiplied by it. Returns (the clipped gradients, the norm before clipping).
- ``AdamW``: torch.optim.AdamW, decaying every parameter: p = p (1 - lr wd); m = b1 m + (1 - b1) g;
  v = b2 v + (1 - b2) g^2; p = p - lr / (1 - b1^t) m / (sqrt(v) / sqrt(1 - b2^t) + eps).
- ``train``: the loop that uses the three, given a function that returns a loss and its gradients.

Grade it: ``python3 -m xgrad.course check DIR --exercise 5``.
"""

import math

import numpy as np


def lr_at(step, peak_lr, warmup, decay_steps, min_lr):
    raise NotImplementedError("lr_at")


def clip_grad_norm(grads, max_norm):
    """``grads``: {name: array}. Returns ({name: clipped array}, norm before clipping)."""
    raise NotImplementedError("clip_grad_norm")


class AdamW:
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        """``params``: {name: array}; ``step`` updates these arrays in place."""
        raise NotImplementedError("AdamW.__init__")

    def step(self, grads):
        """One update of every parameter from ``grads`` ({name: array})."""
        raise NotImplementedError("AdamW.step")


def train(params, loss_and_grads, steps, peak_lr, warmup, min_lr, max_norm, weight_decay=0.1,
          betas=(0.9, 0.95)):
    """``steps`` updates of ``params`` ({name: array}, updated in place): at step s = 1 .. steps, compute
    (loss, grads) = loss_and_grads(params), clip the gradients to ``max_norm``, set the learning rate to
    lr_at(s, peak_lr, warmup, steps, min_lr) and take one AdamW step (eps 1e-8). Returns the list of
    losses, one per step."""
    raise NotImplementedError("train")
