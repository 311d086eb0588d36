"""A module layer for models written in Python: each parameter is declared once, in ``visit``, and everything
that needs the parameters (initialisation, named_parameters, zero_grad, binding to a tape, optimisers)
walks that one declaration, as the C++ module layer and torch.nn.Module do.

    class MLP(xgrad.Module):
        def __init__(self, d, h):
            self.d, self.h = d, h
            super().__init__(seed=1)

        def visit(self, f):
            f("W1", xgrad.declare.normal((self.d, self.h), 0.5))
            f("b1", xgrad.declare.zeros((self.h,)))
            f("W2", xgrad.declare.normal((self.h, 1), 0.5))

        def forward(self, t, x):                 # w: the parameters recorded on tape t, by name
            w = self.bind(t)
            return (x @ w["W1"] + w["b1"]).tanh() @ w["W2"]

    model = MLP(3, 16)
    opt = xgrad.optim.AdamW(model.parameters(), lr=0.03)   # one walk gives the optimiser its list
"""

import numpy as np

from . import _core
from ._tape import Parameter, _dtype_of


class declare:
    """How a parameter starts: ``normal(shape, std)`` (N(0, std), drawn in visit order from one seeded
    generator), ``zeros(shape)``, ``ones(shape)`` or ``constant(shape, value)``."""

    def __init__(self, shape, std=None, value=0.0):
        self.shape, self.std, self.value = tuple(int(s) for s in shape), std, float(value)

    @classmethod
    def normal(cls, shape, std):
        return cls(shape, std=float(std))

    @classmethod
    def zeros(cls, shape):
        return cls(shape, value=0.0)

    @classmethod
    def ones(cls, shape):
        return cls(shape, value=1.0)

    @classmethod
    def constant(cls, shape, value):
        return cls(shape, value=value)


class Module:
    """A model whose parameters are declared once, in ``visit(f)``: one call ``f(name, declaration)`` per
    parameter, in a fixed order (a variant that lacks a parameter simply does not declare it). Sub-modules
    are visited with ``self.visit_child(prefix, child, f)``, which prefixes their names ("blocks.0.").

    ``Module.__init__(seed, dtype)`` creates every declared parameter (normal draws in visit order from
    ``numpy.random.default_rng(seed)``). Then ``named_parameters()``, ``parameters()`` (the handles, for
    optimisers), ``zero_grad()``, ``bind(tape)`` ({name: var}), ``state()`` / ``load_state(d)`` and
    ``save(path)`` / ``load(path)`` (safetensors, read strictly against the declaration) all walk the same
    declaration.
    """

    def __init__(self, seed=0, dtype="float64"):
        self.dtype = _dtype_of(dtype)
        rng = np.random.default_rng(seed)
        self._params = {}

        def create(name, d):
            if name in self._params:
                raise ValueError("Module: parameter %r is declared twice" % name)
            value = rng.standard_normal(d.shape) * d.std if d.std is not None else np.full(d.shape, d.value)
            self._params[name] = Parameter(value, name, self.dtype)

        self.visit(create)

    def visit(self, f):
        """Calls ``f(name, declaration)`` once per parameter. Every module defines it."""
        raise NotImplementedError("a Module declares its parameters in visit(self, f)")

    @staticmethod
    def visit_child(prefix, child, f):
        """Visits a sub-module's declarations under ``prefix`` (its parameters are the parent's)."""
        child.visit(lambda name, d: f(prefix + name, d))

    def named_parameters(self):
        """(name, value) pairs in declaration order; the values are copies."""
        return [(name, p.value) for name, p in self._params.items()]

    def parameters(self):
        """The Parameter handles in declaration order: an optimiser updates them in place."""
        return list(self._params.values())

    def parameter(self, name):
        return self._params[name]

    def zero_grad(self):
        for p in self._params.values():
            p.zero_grad()

    def grads(self):
        """{name: gradient} (copies)."""
        return {name: p.grad for name, p in self._params.items()}

    def bind(self, tape):
        """{name: var}: every parameter recorded on ``tape`` (read in place; backward adds into its grad)."""
        return {name: tape.param(p) for name, p in self._params.items()}

    def state(self):
        """{name: value} (copies), e.g. for numpy.savez."""
        return dict(self.named_parameters())

    def load_state(self, values):
        """Writes {name: value} over the parameters; every declared name is needed, shapes must agree."""
        missing = [name for name in self._params if name not in values]
        if missing:
            raise ValueError("Module.load_state: missing %s" % missing)
        for name, p in self._params.items():
            p.assign(values[name])

    def save(self, path, metadata=None):
        """Writes the declared parameters (in the module's dtype) and ``metadata`` ({str: str}: whatever
        describes the architecture) as a safetensors file, atomically."""
        _core.save_module_file(str(path), [(name, p._p) for name, p in self._params.items()],
                               {str(k): str(v) for k, v in (metadata or {}).items()})

    def load(self, path, metadata=None):
        """Reads a file written by ``save`` strictly: every declared parameter with its shape, no other
        tensor (but optimiser state), each ``metadata`` key with that value; RuntimeError naming the tensor
        or key otherwise. Returns the file's metadata."""
        declared = [(name, list(p.shape)) for name, p in self._params.items()]
        values, file_metadata = _core.load_module_file(str(path), declared,
                                                       {str(k): str(v) for k, v in (metadata or {}).items()})
        self.load_state(values)
        return file_metadata

    def parameter_count(self):
        return sum(int(np.prod(p.shape)) for p in self._params.values())
