"""Optimisers with torch.optim's semantics (optim/optim.hpp): SGD, Adam, AdamW; clip_grad_norm; the
warm-up + cosine learning-rate schedule of xgrad-train.

    opt = xgrad.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    loss.backward(); xgrad.optim.clip_grad_norm(model.parameters(), 1.0); opt.step(); opt.zero_grad()

Which parameters are decayed:
- a plain list of parameters (or a model): weight decay touches only parameters of rank >= 2 (matrices,
  embeddings), never biases or norm gains, as nanoGPT's two groups do;
- parameter groups, torch.optim's list of dicts: each group's ``weight_decay`` (and ``lr``) applies to
  every parameter in it, whatever its rank, exactly as torch.optim does::

      xgrad.optim.AdamW([{"params": matrices}, {"params": vectors, "weight_decay": 0.0}],
                        lr=1e-3, weight_decay=0.1)

  A key a group does not give takes the optimiser's argument. ``opt.param_groups`` is that list of dicts
  with every key filled in; ``step()`` reads each group's ``"lr"`` (and only that) again, so a schedule
  may set ``group["lr"]``.
Parameters are handles (xgrad.Parameter, or a model, whose parameters() are taken): the update happens in
place, in the model. Every parameter needs a unique, non-empty name. Errors name the optimiser you called
(``AdamW: ...``).
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
    return params


def _groups(params, defaults, what):
    """torch.optim's param_groups: a list of dicts, each with "params" and every hyperparameter. A plain
    list of parameters is one group that keeps the rank >= 2 decay rule ("decay_every_parameter": False)."""
    if hasattr(params, "parameters"):
        params = params.parameters()
    params = list(params)
    if params and all(isinstance(g, dict) for g in params):
        groups = []
        for i, g in enumerate(params):
            if "params" not in g:
                raise ValueError("%s: parameter group %d has no 'params'" % (what, i))
            unknown = set(g) - set(defaults) - {"params"}
            if unknown:
                raise ValueError("%s: parameter group %d has unknown keys %s (known: params, %s)"
                                 % (what, i, sorted(unknown), ", ".join(sorted(defaults))))
            group = dict(defaults, **g)
            group["params"] = _handles(g["params"], "%s group %d" % (what, i))
            group["decay_every_parameter"] = True
            groups.append(group)
    elif any(isinstance(g, dict) for g in params):
        raise ValueError("%s: give either parameters or parameter groups (dicts), not both" % what)
    else:
        groups = [dict(defaults, params=_handles(params, what), decay_every_parameter=False)]
    everything = [p for g in groups for p in g["params"]]
    if len({p.dtype for p in everything}) != 1:
        raise ValueError("%s: the parameters mix float32 and float64" % what)
    names = [p.name for p in everything]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError("%s: parameter name %r appears twice (in one group or in two)" % (what, repeated[0]))
    return groups


class Optimizer:
    """What every optimiser shares: ``step()``, ``zero_grad()``, ``param_groups``, ``lr`` (the first group's;
    setting it sets every group's), ``step_count`` and the state as named arrays (``state_dict()`` copies
    out, ``load_state_dict(d)`` copies in). Each group runs as one C++ optimiser over its parameters."""

    def __init__(self, params, defaults):
        what = type(self).__name__
        self.param_groups = _groups(params, defaults, what)
        self._params = [p for g in self.param_groups for p in g["params"]]
        self.dtype = self._params[0].dtype
        self._core = [self._make(g, what) for g in self.param_groups]

    def _make(self, group, what):
        raise NotImplementedError

    def step(self):
        """One update of every parameter from its gradient. A gradient of the wrong shape: ValueError."""
        for group, core in zip(self.param_groups, self._core):
            core.set_lr(float(group["lr"]))
        for core in self._core:
            core.step()

    def zero_grad(self):
        for core in self._core:
            core.zero_grad()

    @property
    def lr(self):
        return self.param_groups[0]["lr"]

    @lr.setter
    def lr(self, value):
        if not 0 <= float(value) < float("inf"):
            raise ValueError("%s: learning rate must be a finite number >= 0, got %r" % (type(self).__name__, value))
        for group in self.param_groups:
            group["lr"] = float(value)

    @property
    def step_count(self):
        return self._core[0].step_count()

    @property
    def parameters(self):
        return list(self._params)

    def state_dict(self):
        """{"optim.step": ..., "optim.exp_avg.<name>": ..., ...}: copies of the state (a checkpoint's names)."""
        out = {}
        for core in self._core:
            out.update(core.export_state())
        return out

    def load_state_dict(self, state):
        """Restores a state_dict of an optimiser of the same kind over parameters of the same names."""
        state = dict(state)
        owner = {p.name: k for k, g in enumerate(self.param_groups) for p in g["params"]}
        parts = [{} for _ in self._core]
        for key, value in state.items():
            k = _owner_of(key, owner)
            if k is None:
                for part in parts:
                    part[key] = value
            else:
                parts[k][key] = value
        for core, part in zip(self._core, parts):
            core.import_state(part)


def _owner_of(key, owner):
    """The group of a state tensor "optim.<kind>.<param name>", or None (optim.step, unknown names: all)."""
    if not key.startswith("optim."):
        return None
    kind_and_name = key[len("optim."):].split(".", 1)
    return owner.get(kind_and_name[1]) if len(kind_and_name) == 2 else None


def _core_optimiser(kind, group, *args):
    params = group["params"]
    return getattr(_core, "%s_%s" % (kind, _SUFFIX[params[0].dtype]))([p._p for p in params], *args)


class SGD(Optimizer):
    """torch.optim.SGD (dampening 0): d = g + wd p; buf = momentum buf + d; d = nesterov ? d + momentum buf
    : buf; p -= lr d. Group keys: lr, momentum, nesterov, weight_decay."""

    def __init__(self, params, lr=1e-3, momentum=0.0, nesterov=False, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay))

    def _make(self, g, what):
        return _core_optimiser("SGD", g, float(g["lr"]), float(g["momentum"]), bool(g["nesterov"]),
                               float(g["weight_decay"]), g["decay_every_parameter"])


class Adam(Optimizer):
    """torch.optim.Adam: L2 weight decay added to the gradient (which parameters: see the module's text).
    Group keys: lr, betas, eps, weight_decay."""

    _decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    def _make(self, g, what):
        betas = tuple(g["betas"])
        if len(betas) != 2:
            raise ValueError("%s: betas must be two numbers, got %r" % (what, g["betas"]))
        return _core_optimiser("Adam", g, float(g["lr"]), float(betas[0]), float(betas[1]), float(g["eps"]),
                               float(g["weight_decay"]), self._decoupled, g["decay_every_parameter"])


class AdamW(Adam):
    """torch.optim.AdamW: decoupled weight decay p *= 1 - lr wd before the Adam update (which parameters:
    see the module's text; one group that decays everything is torch.optim.AdamW exactly).
    Group keys: lr, betas, eps, weight_decay."""

    _decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, lr, betas, eps, weight_decay)


def clip_grad_norm(params, max_norm):
    """torch.nn.utils.clip_grad_norm_: scales every gradient by max_norm / (norm + 1e-6) when that is below
    1, where norm is the 2-norm of all gradients together; returns the norm before clipping."""
    params = _handles(params, "clip_grad_norm")
    if len({p.dtype for p in params}) != 1:
        raise ValueError("clip_grad_norm: the parameters mix float32 and float64")
    return _core.clip_grad_norm([p._p for p in params], float(max_norm))


class LRSchedule:
    """The learning rate at step s of xgrad-train: peak_lr s / W during the warm-up, then cosine decay to
    ``min_lr`` (peak_lr / 10 unless given) at step D, and min_lr after. D defaults to total_steps, W to
    min(100, D // 10).

    Steps count from 1: step s is the s-th update (Adam's t), so a loop sets ``opt.lr = schedule(s)``
    before its s-th ``opt.step()``. Step 0 is allowed and is the same formula at s = 0 (0 during a
    warm-up, peak_lr without one); a negative step is a ValueError.
    """

    def __init__(self, peak_lr, total_steps, warmup=None, decay_steps=None, min_lr=None):
        self._s = _core.LRSchedule(float(peak_lr), int(total_steps), warmup, decay_steps,
                                   None if min_lr is None else float(min_lr))

    peak_lr = property(lambda self: self._s.peak_lr)
    warmup = property(lambda self: self._s.warmup)
    decay_steps = property(lambda self: self._s.decay_steps)
    min_lr = property(lambda self: self._s.min_lr)

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
        super().__init__(params, dict(lr=lr, momentum=momentum))

    def _make(self, g, what):
        return _core_optimiser("Muon", g, float(g["lr"]), float(g["momentum"]))
