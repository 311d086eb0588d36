"""Optimisers with torch.optim's semantics (optim/optim.hpp): SGD, Adam, AdamW; clip_grad_norm; the
warm-up + cosine learning-rate schedule of xgrad-train.

    opt = xgrad.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    loss.backward(); xgrad.optim.clip_grad_norm(model.parameters(), 1.0); opt.step(); opt.zero_grad()

Weight decay touches only parameters of rank >= 2 (matrices, embeddings), never biases or norm gains.
Parameters are handles (xgrad.Parameter, or a model, whose parameters() are taken): the update happens in
place, in the model. Every parameter needs a unique, non-empty name.
"""

from . import _core
from ._tape import Parameter, _SUFFIX


def _handles(params, what):
    if hasattr(params, "parameters"):
        params = params.parameters()
    params = list(params)
    if not params:
        raise ValueError("%s: no parameters" % what)
    for p in params:
        if not isinstance(p, Parameter):
            raise ValueError("%s: expected xgrad.Parameter handles, got %s" % (what, type(p).__name__))
    if len({p.dtype for p in params}) != 1:
        raise ValueError("%s: the parameters mix float32 and float64" % what)
    return params


class Optimizer:
    """What every optimiser shares: ``step()``, ``zero_grad()``, ``lr`` (settable), ``step_count`` and the
    state as named arrays (``state_dict()`` copies out, ``load_state_dict(d)`` copies in)."""

    def __init__(self, kind, params, *args):
        self._params = _handles(params, kind)
        self.dtype = self._params[0].dtype
        self._o = getattr(_core, "%s_%s" % (kind, _SUFFIX[self.dtype]))([p._p for p in self._params], *args)

    def step(self):
        """One update of every parameter from its gradient. A gradient of the wrong shape: ValueError."""
        self._o.step()

    def zero_grad(self):
        self._o.zero_grad()

    @property
    def lr(self):
        return self._o.lr()

    @lr.setter
    def lr(self, value):
        self._o.set_lr(float(value))

    @property
    def step_count(self):
        return self._o.step_count()

    @property
    def parameters(self):
        return list(self._params)

    def state_dict(self):
        """{"optim.step": ..., "optim.exp_avg.<name>": ..., ...}: copies of the state (a checkpoint's names)."""
        return self._o.export_state()

    def load_state_dict(self, state):
        """Restores a state_dict of an optimiser of the same kind over parameters of the same names."""
        self._o.import_state(dict(state))


class SGD(Optimizer):
    """torch.optim.SGD (dampening 0): d = g + wd p; buf = momentum buf + d; d = nesterov ? d + momentum buf
    : buf; p -= lr d."""

    def __init__(self, params, lr=1e-3, momentum=0.0, nesterov=False, weight_decay=0.0):
        super().__init__("SGD", params, float(lr), float(momentum), bool(nesterov), float(weight_decay))


class Adam(Optimizer):
    """torch.optim.Adam: L2 weight decay added to the gradient (rank >= 2 parameters only)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__("Adam", params, float(lr), float(betas[0]), float(betas[1]), float(eps),
                         float(weight_decay), False)


class AdamW(Optimizer):
    """torch.optim.AdamW: decoupled weight decay p *= 1 - lr wd before the Adam update (rank >= 2 only)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__("Adam", params, float(lr), float(betas[0]), float(betas[1]), float(eps),
                         float(weight_decay), True)


def clip_grad_norm(params, max_norm):
    """torch.nn.utils.clip_grad_norm_: scales every gradient by max_norm / (norm + 1e-6) when that is below
    1, where norm is the 2-norm of all gradients together; returns the norm before clipping."""
    params = _handles(params, "clip_grad_norm")
    return _core.clip_grad_norm([p._p for p in params], float(max_norm))


class LRSchedule:
    """The learning rate at step s (from 1) of xgrad-train: peak_lr s / W during the warm-up, then cosine
    decay to peak_lr / 10 at step D, and peak_lr / 10 after. D defaults to total_steps, W to min(100, D // 10).
    """

    def __init__(self, peak_lr, total_steps, warmup=None, decay_steps=None):
        self._s = _core.LRSchedule(float(peak_lr), int(total_steps), warmup, decay_steps)

    peak_lr = property(lambda self: self._s.peak_lr)
    warmup = property(lambda self: self._s.warmup)
    decay_steps = property(lambda self: self._s.decay_steps)

    def at(self, step):
        return self._s.at(int(step))

    __call__ = at


class Muon(Optimizer):
    """Muon: momentum orthogonalised by Newton–Schulz, for matrices (docs/training.md, "Muon"). For each
    2-D parameter W of shape (fan_in, fan_out) with gradient g:

        m = momentum m + g;  u = g + momentum m                     (Nesterov)
        X = u / (||u||_F + 1e-7), transposed when it has more rows than columns
        5 times:  A = X X^T;  X = 3.4445 X + (-4.7750 A + 2.0315 A A) X   (then transposed back)
        W -= lr sqrt(max(1, fan_out / fan_in)) X

    Give it the matrices only (a model's block matrices, say) and another optimiser the rest: a parameter
    that is not 2-D is a ValueError naming it. The state is "optim.step" and "optim.momentum.<name>"."""

    def __init__(self, params, lr=0.02, momentum=0.95):
        super().__init__("Muon", params, float(lr), float(momentum))
