"""Where does a hand-derived backward first go wrong? (models/divergence.hpp)

``first_divergence(mine, reference)`` walks ``reference`` in its order (the order a backward pass completes
the gradients), compares each gradient with the one of the same name in ``mine``, and reports the first that
differs beyond the tolerance, with the whole table. Everything before the first divergence agrees, so the
mistake is in the backward step that produced that gradient.
"""

import numpy as np

from . import _core


class DivergenceReport:
    """The comparison: ``diverged``, ``first`` (the first divergent name or None), ``rows`` (one dict per
    gradient: name, shapes, max_abs, max_rel, diverges), ``summary``, ``table``; ``str(report)`` is both."""

    def __init__(self, d):
        self.rows = d["rows"]
        self.first = d["first"]
        self.summary = d["summary"]
        self.table = d["table"]
        self._text = d["text"]

    @property
    def diverged(self):
        return self.first is not None

    def __str__(self):
        return self._text

    def __repr__(self):
        return "DivergenceReport(first=%r)" % (self.first,)


def _pairs(named, what):
    if isinstance(named, dict):
        named = list(named.items())
    out = []
    for name, a in named:
        a = np.asarray(a)
        if a.dtype.kind not in "fiu":
            raise ValueError("first_divergence: %s[%r] is not a real array (dtype %s)" % (what, name, a.dtype))
        out.append((str(name), a))
    return out


def first_divergence(mine, reference, rtol=None, atol=None, labels=("reference", "mine")):
    """Compares ``mine`` ({name: array}, yours) with ``reference`` ({name: array} or (name, array) pairs in
    backward order, e.g. the tape's) and returns a DivergenceReport. A name missing from either side
    diverges. A gradient agrees when max |reference - mine| <= atol + rtol * (largest |entry| of either);
    the defaults are rtol 1e-9, atol 1e-12 in float64 and rtol 1e-4, atol 1e-7 when every reference array
    is float32 (then both sides are compared in float32). The arrays are copied."""
    reference, mine = _pairs(reference, "reference"), _pairs(mine, "mine")
    single = bool(reference) and all(a.dtype == np.float32 for _, a in reference)
    default = (1e-4, 1e-7) if single else (1e-9, 1e-12)
    rtol = default[0] if rtol is None else float(rtol)
    atol = default[1] if atol is None else float(atol)
    compare = _core.first_divergence_f32 if single else _core.first_divergence_f64
    return DivergenceReport(compare(reference, mine, rtol, atol, labels[0], labels[1]))
