"""The tape, its variables and parameters: what ``xgrad.Tape``, ``xgrad.Var`` and ``xgrad.Parameter`` are.

Every array that crosses into xgrad is copied (``Tape.input``, ``Tape.constant``, ``Parameter``), and every
array that comes out is a fresh copy (``Var.value``, ``Var.grad``, ``Parameter.value``): nothing you hold
ever points into memory xgrad may free or change.
"""

import numbers

import numpy as np

from . import _core

_DTYPES = {"float64": np.float64, "float32": np.float32}
_SUFFIX = {np.float64: "f64", np.float32: "f32"}


def _dtype_of(dtype):
    """np.float64 or np.float32 for "float64", "float32" (or the NumPy types); ValueError otherwise."""
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    if name not in _DTYPES:
        raise ValueError("dtype: expected 'float64' or 'float32', got %r" % (dtype,))
    return _DTYPES[name]


def _core_class(name, dtype):
    return getattr(_core, "%s_%s" % (name, _SUFFIX[dtype]))


def as_float_array(value, dtype, what="array"):
    """A C-ordered copy of ``value`` (an array, a number or nested lists) in ``dtype``.

    Integer and boolean arrays are converted; strings, objects and complex numbers are a ValueError.
    """
    a = np.asarray(value)
    if a.dtype.kind not in "fiub":
        raise ValueError("%s: expected real numbers, got an array of dtype %s" % (what, a.dtype))
    return np.array(a, dtype=dtype, order="C", copy=True)


def as_ids(value, what="ids"):
    """A C-ordered int64 copy of an integer array (token ids, targets); ValueError for any other dtype."""
    a = np.asarray(value)
    if a.dtype.kind not in "iu":
        raise ValueError("%s: expected an integer array, got dtype %s" % (what, a.dtype))
    if a.dtype.kind == "u" and a.size and a.max() > np.iinfo(np.int64).max:
        raise ValueError("%s: value %d does not fit in int64" % (what, a.max()))
    return np.asarray(a, dtype=np.int64, order="C")


def whole_number(what, value, low=0, high=2**63):
    """``value`` as an int in [low, high): ValueError naming ``what`` otherwise (a float, a bool, a number
    the C++ side's integer cannot hold, which pybind11 would report as a TypeError about the signature)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value < high:
        raise ValueError("%s must be an integer in [%d, %d), got %r" % (what, low, high, value))
    return int(value)


def as_token_list(value, what="ids"):
    """Token ids as a list of ints for the C++ side, which holds them in 32 bits: ValueError for a
    non-integer array (1.7 is no id) or an id outside [0, 2^31); an empty sequence is an empty list."""
    a = np.asarray(value)
    if a.size == 0:
        return []
    ids = as_ids(a, what).ravel()
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= 2**31:
        raise ValueError("%s: token id %d is outside [0, 2^31)" % (what, low if low < 0 else high))
    return ids.tolist()


def as_mask(value, what="mask"):
    """A C-ordered bool copy of a mask (True = this query may attend to this key); ValueError otherwise."""
    a = np.asarray(value)
    if a.dtype != np.bool_:
        raise ValueError("%s: expected a bool array (True = attend), got dtype %s" % (what, a.dtype))
    return np.asarray(a, order="C")


class Tape:
    """A reverse-mode tape: every op on its variables appends a node; ``backward`` walks them in reverse.

    ``Tape(dtype="float64")`` or ``Tape(dtype="float32")``. The default is float64, unlike NumPy's
    float32-minded deep-learning tools: it is what checking gradients against finite differences needs;
    pass dtype="float32" for speed. Each variable belongs to one tape and holds it alive; variables of
    different tapes never mix (a ValueError, naming the dtypes when they differ). No hidden global tape.

    >>> t = Tape()
    >>> x = t.input(np.array([1.0, 2.0]))
    >>> (x * x).sum().backward()
    >>> x.grad
    array([2., 4.])
    """

    def __init__(self, dtype="float64"):
        self.dtype = _dtype_of(dtype)
        self._t = _core_class("Tape", self.dtype)()

    @classmethod
    def _lent(cls, core_tape, dtype):
        t = cls.__new__(cls)
        t.dtype = dtype
        t._t = core_tape
        return t

    def __repr__(self):
        try:
            size = self._t.size()
        except RuntimeError:
            return "Tape(expired)"
        return "Tape(dtype=%r, nodes=%d)" % (np.dtype(self.dtype).name, size)

    # ---- leaves ----
    def input(self, value, label=""):
        """A leaf that wants a gradient. ``value``: an array or number of any shape, copied in."""
        return Var(self._t.input(as_float_array(value, self.dtype, "Tape.input"), label), self)

    def constant(self, value, label=""):
        """A leaf that does not want a gradient (its ``grad`` stays zeros). ``value`` is copied in."""
        return Var(self._t.constant(as_float_array(value, self.dtype, "Tape.constant"), label), self)

    def param(self, parameter):
        """Records a Parameter on this tape: the tape reads its value in place (no copy), and backward adds
        the gradient into ``parameter.grad`` (which accumulates until ``parameter.zero_grad()``)."""
        if not isinstance(parameter, Parameter):
            raise ValueError("Tape.param: expected an xgrad.Parameter, got %s" % type(parameter).__name__)
        if parameter.dtype is not self.dtype:
            raise ValueError("Tape.param: parameter %r is %s, the tape is %s"
                             % (parameter.name, np.dtype(parameter.dtype).name, np.dtype(self.dtype).name))
        return Var(self._t.param(parameter._p), self)

    # ---- backward ----
    def backward(self, root, seed=None, retain_graph=False):
        """Reverse walk from ``root``. Without ``seed`` the root must hold one element (dL/droot = 1);
        with it, ``seed`` is dL/droot, of root's shape. Unless ``retain_graph``, the tape frees the rules
        it used, and a second backward through them raises RuntimeError."""
        root = self._own(root, "Tape.backward")
        if seed is None:
            self._t.backward(root._v, retain_graph)
        else:
            self._t.backward_seed(root._v, as_float_array(seed, self.dtype, "Tape.backward seed"), retain_graph)

    def clear(self):
        """Forgets every node; variables of the old graph raise RuntimeError from now on."""
        self._t.clear()

    def no_grad(self):
        """A context manager under which ops compute values but record no backward rules::

            with t.no_grad():
                y = x * 2          # y.requires_grad is False
        """
        return _NoGrad(self)

    def detect_anomaly(self, on=True):
        """Anomaly mode: the first op whose value or gradient turns NaN or inf although its inputs were
        finite raises xgrad.AnomalyError naming the node and the chain of nodes that led to it."""
        self._t.detect_anomaly(bool(on))

    # ---- what was recorded ----
    def __len__(self):
        return self._t.size()

    def nodes(self):
        """One dict per node: index, op, label, inputs, shape, value_bytes, saved_for_backward, multiply_adds."""
        return self._t.nodes()

    def trace(self):
        """The graph as text, one line per node: index, op, label, inputs and shape."""
        return self._t.trace()

    def to_dot(self):
        """The graph in Graphviz DOT (``dot -Tsvg``)."""
        return self._t.to_dot()

    def bytes_saved_for_backward(self, include_leaves=True):
        """Bytes of the values a backward rule will read (without leaves: what an autograd engine keeps)."""
        return self._t.bytes_saved_for_backward(bool(include_leaves))

    def bytes_held(self):
        """Bytes of every value and gradient the tape owns."""
        return self._t.bytes_held()

    def multiply_adds(self):
        """Multiply-adds of the recorded ops (one multiply plus one add = 1; FLOPs are twice this)."""
        return self._t.multiply_adds()

    def _own(self, v, what):
        if not isinstance(v, Var):
            raise ValueError("%s: expected an xgrad.Var, got %s" % (what, type(v).__name__))
        if v.tape is not self:
            raise ValueError("%s: the var was recorded on another tape" % what)
        return v


class _NoGrad:
    def __init__(self, tape):
        self._tape = tape

    def __enter__(self):
        self._tape._t.enter_no_grad()
        return self._tape

    def __exit__(self, *exc):
        self._tape._t.exit_no_grad()
        return False


def different_tapes(what, a, b):
    """The ValueError for vars of two tapes, naming their dtypes when those differ."""
    if a.dtype is not b.dtype:
        return ValueError("%s: a %s var and a %s var, recorded on different tapes (each tape has one dtype: "
                          "record both on one Tape, or bring a value over with t.input(v.value))"
                          % (what, np.dtype(a.dtype).name, np.dtype(b.dtype).name))
    return ValueError("%s: the operands were recorded on different tapes" % what)


def _operand(v, other, what):
    """``other`` as a var on v's tape: a var (of the same tape) or an array or number (a constant)."""
    if isinstance(other, Var):
        if other.tape is not v.tape:
            raise different_tapes(what, v, other)
        return other
    return Var(v._v.constant_like(as_float_array(other, v.dtype, what)), v.tape)


def _is_number(x):
    return isinstance(x, numbers.Real)


class Var:
    """A handle to one node of a tape: its value, its gradient after backward, and the operators.

    Operators ``+ - * / @ **`` take vars, numbers or arrays on either side and broadcast like NumPy;
    ``-x`` negates, ``abs(x)``; ``x[...]`` indexes as NumPy does (a gather whose backward scatter-adds).
    Arrays and numbers become constants on the var's tape.
    ``value`` and ``grad`` are NumPy copies. A var holds its tape alive.
    """

    __slots__ = ("_v", "tape")
    __array_ufunc__ = None  # numpy_array + var calls Var.__radd__ instead of broadcasting over objects

    def __init__(self, core_var, tape):
        self._v = core_var
        self.tape = tape

    # ---- what it holds ----
    @property
    def value(self):
        """The forward value, as a new NumPy array (a copy)."""
        return self._v.value()

    @property
    def grad(self):
        """dL/d(this var) after backward, as a new NumPy array (a copy). Kept for leaves (``input``), and
        for every node when backward retained the graph; zeros of the value's shape if no gradient arrived.
        The gradient of an intermediate result is freed as the backward walks past it, so reading it after
        ``backward()`` without ``retain_graph=True`` raises RuntimeError saying so (never zeros). A
        parameter's gradient goes to ``Parameter.grad`` instead."""
        has_grad, released, leaf = _core.grad_state(self._v)
        if not has_grad and released and not leaf:
            label = ", label %r" % self.label if self.label else ""
            raise RuntimeError(
                "Var.grad: this var is an intermediate result (op %r%s); backward freed its gradient as it "
                "walked past it. Call backward(retain_graph=True) to keep every node's gradient, or read the "
                "gradient of a leaf (t.input) instead" % (self.op, label))
        return self._v.grad()

    @property
    def shape(self):
        return tuple(self._v.shape())

    @property
    def ndim(self):
        return len(self._v.shape())

    @property
    def dtype(self):
        return self.tape.dtype

    @property
    def requires_grad(self):
        return self._v.requires_grad()

    @property
    def op(self):
        """The op that made this node ("add", "matmul", "input", ...)."""
        return self._v.op()

    @property
    def label(self):
        return self._v.label()

    @property
    def index(self):
        """The node's position on its tape."""
        return self._v.index()

    def named(self, label):
        """Names the node (shown by Tape.trace and Tape.to_dot, and in anomaly reports); returns self."""
        self._v.named(str(label))
        return self

    def numpy(self):
        """The value as a new NumPy array (a copy)."""
        return self.value

    def backward(self, seed=None, retain_graph=False):
        """``self.tape.backward(self, seed, retain_graph)``: self must hold one element unless a seed is given."""
        self.tape.backward(self, seed, retain_graph)

    def __repr__(self):
        try:
            return "Var(shape=%s, dtype=%s, op=%r%s)" % (
                self.shape, np.dtype(self.dtype).name, self.op, ", label=%r" % self.label if self.label else "")
        except RuntimeError:
            return "Var(stale: its tape was cleared)"

    def __len__(self):
        s = self.shape
        if not s:
            raise TypeError("len() of a 0-d var")
        return s[0]

    def __bool__(self):
        raise TypeError("the truth value of an xgrad.Var is ambiguous; compare .value instead")

    # ---- operators ----
    def __add__(self, other):
        if _is_number(other):
            return _wrap(_core.add_scalar(self._v, float(other)), self)
        return _wrap(_core.add(self._v, _operand(self, other, "add")._v), self)

    def __radd__(self, other):
        if _is_number(other):
            return self.__add__(other)
        return _wrap(_core.add(_operand(self, other, "add")._v, self._v), self)

    def __sub__(self, other):
        if _is_number(other):
            return _wrap(_core.add_scalar(self._v, -float(other)), self)
        return _wrap(_core.sub(self._v, _operand(self, other, "sub")._v), self)

    def __rsub__(self, other):
        if _is_number(other):
            return _wrap(_core.add_scalar(_core.neg(self._v), float(other)), self)
        return _wrap(_core.sub(_operand(self, other, "sub")._v, self._v), self)

    def __mul__(self, other):
        if _is_number(other):
            return _wrap(_core.scale(self._v, float(other)), self)
        return _wrap(_core.mul(self._v, _operand(self, other, "mul")._v), self)

    def __rmul__(self, other):
        if _is_number(other):
            return self.__mul__(other)
        return _wrap(_core.mul(_operand(self, other, "mul")._v, self._v), self)

    def __truediv__(self, other):
        return _wrap(_core.div(self._v, _operand(self, other, "div")._v), self)

    def __rtruediv__(self, other):
        return _wrap(_core.div(_operand(self, other, "div")._v, self._v), self)

    def __matmul__(self, other):
        return _matmul(self, _operand(self, other, "matmul"))

    def __rmatmul__(self, other):
        return _matmul(_operand(self, other, "matmul"), self)

    def __pow__(self, exponent):
        """x ** number (one op, pow), or x ** var / array (pow with a var exponent, broadcasting)."""
        if _is_number(exponent):
            return _wrap(_core.pow(self._v, float(exponent)), self)
        return _wrap(_core.pow_var(self._v, _operand(self, exponent, "pow")._v), self)

    def __rpow__(self, base):
        """number ** x or array ** x: the base becomes a constant on x's tape."""
        return _wrap(_core.pow_var(_operand(self, base, "pow")._v, self._v), self)

    def __abs__(self):
        return self.abs()

    def __getitem__(self, key):
        """NumPy indexing: integers, slices (negative bounds and steps), None, ..., integer and boolean
        arrays, and their mixtures, with NumPy's result shape. One node, take (the positions NumPy's own
        indexing picks from x's flat layout); the backward scatter-adds, so a position read twice gets
        both gradients. A var as an index is refused: index with its .value (an array)."""
        if isinstance(key, Var) or (isinstance(key, tuple) and any(isinstance(k, Var) for k in key)):
            raise TypeError("Var[...]: index with arrays, not vars (use .value of the var)")
        positions = np.arange(int(np.prod(self.shape)), dtype=np.int64).reshape(self.shape)
        try:
            picked = positions[key]
        except (IndexError, TypeError, ValueError) as e:
            raise IndexError("Var[...]: %s (var of shape %s)" % (e, self.shape)) from None
        return _wrap(_core.take(self._v, np.asarray(picked, order="C")), self)

    def __setitem__(self, key, value):
        raise TypeError("Var does not support item assignment (a var is a node of the graph); build the new "
                        "values with xgrad.ops.where(mask, new, x) or ops.concat")

    def __neg__(self):
        return _wrap(_core.neg(self._v), self)

    def __pos__(self):
        return self

    # ---- methods (each is also xgrad.ops.<name>) ----
    def relu(self):
        return _wrap(_core.relu(self._v), self)

    def tanh(self):
        return _wrap(_core.tanh(self._v), self)

    def exp(self):
        return _wrap(_core.exp(self._v), self)

    def log(self):
        return _wrap(_core.log(self._v), self)

    def sigmoid(self):
        return _wrap(_core.sigmoid(self._v), self)

    def sqrt(self):
        return _wrap(_core.sqrt(self._v), self)

    def rsqrt(self):
        return _wrap(_core.rsqrt(self._v), self)

    def abs(self):
        """|x|; the gradient is sign(x), 0 at x = 0 (as torch.abs)."""
        return _wrap(_core.abs(self._v), self)

    def sin(self):
        return _wrap(_core.sin(self._v), self)

    def cos(self):
        return _wrap(_core.cos(self._v), self)

    def gelu(self):
        """GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
        return _wrap(_core.gelu(self._v), self)

    def sum(self, axis=None, keepdims=False):
        """Sum over every axis (axis=None), one axis or a tuple of axes; negative axes count from the end."""
        if axis is None and not keepdims:
            return _wrap(_core.sum_all(self._v), self)
        return _wrap(_core.sum(self._v, _axes(axis, self.ndim, "sum"), bool(keepdims)), self)

    def mean(self, axis=None, keepdims=False):
        """Mean over every axis (axis=None), one axis or a tuple of axes."""
        if axis is None and not keepdims:
            return _wrap(_core.mean_all(self._v), self)
        return _wrap(_core.mean(self._v, _axes(axis, self.ndim, "mean"), bool(keepdims)), self)

    def max(self, axis=None, keepdims=False):
        """Largest entry over every axis (axis=None, NumPy's default) or along one axis; the gradient goes
        to the first largest entry (as torch.max(dim)). Several axes at once are a ValueError."""
        if axis is None:
            flat = _wrap(_core.max(self.reshape(-1)._v, 0, False), self)
            return flat.reshape((1,) * self.ndim) if keepdims else flat
        axes = _axes(axis, self.ndim, "max")
        if len(axes) != 1:
            raise ValueError("max: one axis or None (all), got %r" % (axis,))
        return _wrap(_core.max(self._v, axes[0], bool(keepdims)), self)

    def variance(self, axis=None, keepdims=False):
        """Biased (population) variance over the given axes (all when None)."""
        return _wrap(_core.variance(self._v, _axes(axis, self.ndim, "variance"), bool(keepdims)), self)

    def reshape(self, *shape):
        """A new shape of the same size; one entry may be -1. ``x.reshape(2, 3)`` or ``x.reshape((2, 3))``."""
        if len(shape) == 1 and not isinstance(shape[0], numbers.Integral):
            shape = tuple(shape[0])
        return _wrap(_core.reshape(self._v, [int(s) for s in shape]), self)

    def permute(self, *axes):
        """Axes reordered: ``x.permute(0, 2, 1)``."""
        if len(axes) == 1 and not isinstance(axes[0], numbers.Integral):
            axes = tuple(axes[0])
        return _wrap(_core.permute(self._v, _axes(axes, self.ndim, "permute")), self)

    def transpose(self, axis1=-2, axis2=-1):
        """Two axes swapped (by default the last two)."""
        a, b = _axes((axis1, axis2), self.ndim, "transpose")
        return _wrap(_core.transpose(self._v, a, b), self)

    @property
    def T(self):
        """The last two axes swapped."""
        return self.transpose()

    def softmax(self, axis=-1, scale=1.0):
        """softmax(scale * x) along ``axis`` (any axis; the last by default)."""
        return _along(self, axis, "softmax", lambda v: _wrap(_core.softmax(v._v, float(scale)), v))

    def log_softmax(self, axis=-1):
        """log softmax along ``axis`` (any axis; the last by default)."""
        return _along(self, axis, "log_softmax", lambda v: _wrap(_core.log_softmax(v._v), v))


def _along(x, axis, what, op_on_last_axis):
    """op_on_last_axis applied along ``axis``: the axis is moved last (a permute), and back after."""
    (axis,) = _axes(axis, x.ndim, what)
    if axis == x.ndim - 1:
        return op_on_last_axis(x)
    order = [a for a in range(x.ndim) if a != axis] + [axis]
    inverse = list(np.argsort(order))
    return op_on_last_axis(x.permute(order)).permute(inverse)


def _matmul(a, b):
    """a @ b with NumPy's rule for vectors: a 1-D operand is a row (left) or a column (right), and that
    axis is dropped from the result."""
    vector_a, vector_b = a.ndim == 1, b.ndim == 1
    if vector_a:
        a = a.reshape(1, -1)
    if vector_b:
        b = b.reshape(-1, 1)
    out = Var(_core.matmul(a._v, b._v, False, False), a.tape)
    if vector_a or vector_b:
        shape = out.shape[:-2] + out.shape[-2:-1] * (not vector_a) + out.shape[-1:] * (not vector_b)
        out = out.reshape(shape)
    return out


def _wrap(core_var, like):
    return Var(core_var, like.tape)


def _axes(axis, ndim, what):
    """A list of non-negative axes from None (all), an int or a sequence; ValueError when out of range."""
    if axis is None:
        return list(range(ndim))
    if isinstance(axis, numbers.Integral):
        axis = (axis,)
    out = []
    for a in axis:
        if not isinstance(a, numbers.Integral):
            raise ValueError("%s: axis must be an integer, got %r" % (what, a))
        if not -ndim <= a < ndim:
            raise ValueError("%s: axis %d is out of range for a var of %d axes" % (what, a, ndim))
        out.append(int(a) % ndim)
    return out


class Parameter:
    """A learnable array that outlives tapes (a training loop records a fresh tape each step).

    ``Parameter(value, name="", dtype="float64")``: ``value`` is copied in. ``t.param(p)`` records it on a
    tape, which reads the value in place; backward adds into ``p.grad``, which accumulates until
    ``p.zero_grad()``. Optimisers take lists of parameters, each with a unique name. ``value`` and ``grad``
    are copies; ``assign(array)`` writes a new value of the same shape in place.
    """

    __slots__ = ("_p", "dtype")

    def __init__(self, value, name="", dtype="float64"):
        self.dtype = _dtype_of(dtype)
        self._p = _core_class("Parameter", self.dtype)(as_float_array(value, self.dtype, "Parameter"), str(name))

    @classmethod
    def _of(cls, core_parameter, dtype):
        p = cls.__new__(cls)
        p._p = core_parameter
        p.dtype = dtype
        return p

    @property
    def name(self):
        return self._p.name()

    @property
    def value(self):
        """The value, as a new NumPy array (a copy)."""
        return self._p.value()

    @property
    def grad(self):
        """The accumulated gradient, as a new NumPy array (a copy). Assignable: ``p.grad = array`` (of the
        parameter's shape, copied in) replaces it, for a hand-written clipping or optimiser."""
        return self._p.grad()

    @grad.setter
    def grad(self, value):
        _core.set_parameter_grad(self._p, as_float_array(value, self.dtype, "Parameter.grad"))

    @property
    def shape(self):
        return self._p.value().shape

    def zero_grad(self):
        self._p.zero_grad()

    def assign(self, value):
        """Writes ``value`` (copied, converted to the parameter's dtype) over the value, in place. The shape
        must stay the same (a ValueError otherwise): tapes that read this parameter see the new value."""
        self._p.assign(as_float_array(value, self.dtype, "Parameter.assign"))

    def __repr__(self):
        return "Parameter(%r, shape=%s, dtype=%s)" % (self.name, self.shape, np.dtype(self.dtype).name)
