"""Assignment 5, solved on the library's code paths: xgrad.optim's schedule, clipping and AdamW."""

import numpy as np

import xgrad


def lr_at(step, peak_lr, warmup, decay_steps, min_lr):
    schedule = xgrad.optim.LRSchedule(peak_lr, decay_steps, warmup=warmup, decay_steps=decay_steps,
                                      min_lr=min_lr)
    return schedule(step)


def _parameters(values, grads):
    params = [xgrad.Parameter(v, k) for k, v in values.items()]
    for p in params:
        p.grad = grads[p.name]
    return params


def clip_grad_norm(grads, max_norm):
    params = _parameters({k: np.zeros_like(g) for k, g in grads.items()}, grads)
    norm = xgrad.optim.clip_grad_norm(params, max_norm)
    return {p.name: p.grad for p in params}, norm


class AdamW:
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        self.arrays = params
        self.params = [xgrad.Parameter(v, k) for k, v in params.items()]
        self.opt = xgrad.optim.AdamW([{"params": self.params}], lr=lr, betas=betas, eps=eps,
                                     weight_decay=weight_decay)

    @property
    def lr(self):
        return self.opt.lr

    @lr.setter
    def lr(self, value):
        self.opt.lr = value

    def step(self, grads):
        for p in self.params:
            p.grad = grads[p.name]
        self.opt.step()
        for p in self.params:
            self.arrays[p.name][...] = p.value


def train(params, loss_and_grads, steps, peak_lr, warmup, min_lr, max_norm, weight_decay=0.1,
          betas=(0.9, 0.95)):
    opt = AdamW(params, lr=peak_lr, betas=betas, eps=1e-8, weight_decay=weight_decay)
    losses = []
    for s in range(1, steps + 1):
        loss, grads = loss_and_grads(params)
        losses.append(loss)
        grads, _ = clip_grad_norm(grads, max_norm)
        opt.lr = lr_at(s, peak_lr, warmup, steps, min_lr)
        opt.step(grads)
    return losses
