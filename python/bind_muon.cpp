// Muon (optim/muon.hpp) over parameter handles: Muon_f32 and Muon_f64, optimisers like the others of
// bind_train.cpp (step, zero_grad, lr, the state as named arrays), which must be bound first.
#include "optim/muon.hpp"
#include "python/convert.hpp"

namespace xgrad::python
{
template <class T>
void bind_muon(py::module_& m)
{
    py::class_<optim::muon<T>, optim::optimiser<T>>(m, ("Muon_" + dtype_suffix<T>()).c_str())
        .def(py::init([](const std::vector<parameter<T>>& p, double lr, double momentum) {
            return std::make_unique<optim::muon<T>>(p, optim::muon_options{lr, momentum});
        }));
}

template void bind_muon<float>(py::module_& m);
template void bind_muon<double>(py::module_& m);
}  // namespace xgrad::python
