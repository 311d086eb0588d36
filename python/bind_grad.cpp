// xgrad::grad for Python (python/xgrad/_grad.py wraps it): gradients as vars, recorded on the tape with
// create_graph. The seed is a var of the output's tape or None (the output then holds one element).
#include "autodiff/grad.hpp"
#include "python/convert.hpp"

namespace xgrad::python
{
namespace
{
template<class T>
void bind_grad_for(py::module_& m)
{
    m.def("grad",
          [](const var<T>& output,
             const std::vector<var<T>>& inputs,
             const std::optional<var<T>>& seed,
             bool create,
             bool retain)
          {
              const grad_options options = grad_options().create_graph(create).retain_graph(retain);
              return seed ? grad(output, inputs, *seed, options) : grad(output, inputs, options);
          });
}
} // namespace

void bind_grad(py::module_& m)
{
    bind_grad_for<double>(m);
    bind_grad_for<float>(m);
}
} // namespace xgrad::python
