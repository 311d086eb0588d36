// The NumPy-shaped ops (ops/elementwise_numpy.cpp, ops/select.cpp, ops/gather.cpp) for `import xgrad`:
// overloads of one name per op, picked by the vars' dtype. Indexing and take_along_axis compute their
// flat positions in Python (python/xgrad/_tape.py) and call take.
#include "ops/ops.hpp"
#include "python/convert.hpp"

namespace xgrad::python
{
namespace
{
template <class T>
void bind_numpy_ops_for(py::module_& m)
{
    using v = const var<T>&;
    m.def("abs", [](v x) { return ops::abs(x); });
    m.def("sin", [](v x) { return ops::sin(x); });
    m.def("cos", [](v x) { return ops::cos(x); });
    m.def("pow_var", [](v a, v b) { return ops::pow(a, b); });
    m.def("where", [](const numpy_in<bool>& mask, v a, v b) { return ops::where(to_mask(mask), a, b); });
    m.def("maximum", [](v a, v b) { return ops::maximum(a, b); });
    m.def("minimum", [](v a, v b) { return ops::minimum(a, b); });
    m.def("clip", [](v x, double lo, double hi) { return ops::clip(x, T(lo), T(hi)); });
    using positions = const numpy_in<std::int64_t>&;
    m.def("take", [](v x, positions p) { return ops::take(x, to_ids(p)); });
    m.def("scatter_add", [](v values, positions p, const std::vector<std::size_t>& shape) {
        return ops::scatter_add(values, to_ids(p), shape_t(shape.begin(), shape.end()));
    });
}
}  // namespace

void bind_numpy_ops(py::module_& m)
{
    bind_numpy_ops_for<double>(m);
    bind_numpy_ops_for<float>(m);
}
}  // namespace xgrad::python
