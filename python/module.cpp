// The compiled core of `import xgrad` (xgrad._core). The Python package python/xgrad/ wraps it and holds
// every docstring users read; this module only binds. C++ exceptions become Python ones:
// std::invalid_argument -> ValueError (pybind11's rule), anomaly_error -> xgrad.AnomalyError (a
// RuntimeError), anything else -> RuntimeError.
#include "python/convert.hpp"

PYBIND11_MODULE(_core, m)
{
    namespace py = pybind11;
    m.doc() = "xgrad's compiled core; use the xgrad package, not this module.";
    py::register_exception<xgrad::anomaly_error>(m, "AnomalyError", PyExc_RuntimeError);
    xgrad::python::bind_tape_and_ops<double>(m);
    xgrad::python::bind_tape_and_ops<float>(m);
    xgrad::python::bind_models<double>(m);
    xgrad::python::bind_models<float>(m);
    xgrad::python::bind_training<double>(m);
    xgrad::python::bind_training<float>(m);
    xgrad::python::bind_muon<double>(m);
    xgrad::python::bind_muon<float>(m);
    xgrad::python::bind_dtype_free(m);
    xgrad::python::bind_tokenizer(m);
    xgrad::python::bind_grad(m);
    xgrad::python::bind_function(m);
    xgrad::python::bind_numpy_ops(m);
}
