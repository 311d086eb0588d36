// xgrad.Function's C++ half: a node whose backward rule calls a Python callable. The Python half
// (python/xgrad/function.py) runs the user's forward on NumPy arrays, checks what it returns, and hands
// this file the value and a callable `rule(grad) -> [array or None per input]` that runs the user's
// backward and checks each gradient's shape and dtype. Here the value is recorded under the Function's
// class name, and the rule turns the incoming gradient into NumPy and the answers back into gradients.
//
// The rule holds Python objects, so it runs, and is freed, only while the interpreter's lock is held:
// every backward walk and every tape's destruction that can reach such a node starts from Python.
#include <set>

#include "autodiff/record.hpp"
#include "python/convert.hpp"

namespace xgrad::python
{
namespace
{
// node::op is a `const char*` that must outlive every tape: each Function class name is kept here once.
const char* interned(const std::string& name)
{
    static std::set<std::string> names;
    return names.insert(name).first->c_str();
}

// The backward rule of a Function node: g -> rule(g), each answer that is not None added into its input.
// A Python exception in the rule propagates through the walk unchanged (pybind11's error_already_set).
template <class T>
struct python_rule
{
    py::object rule;

    void operator()(backward_context<T>& ctx) const
    {
        const py::list answers = rule(to_numpy(ctx.grad()));
        for (std::size_t k = 0; k < answers.size(); ++k)
        {
            if (!answers[k].is_none() && ctx.needs_grad(k))
            {
                ctx.accumulate(k, to_array(answers[k].cast<numpy_in<T>>()));
            }
        }
    }
};

// Records a Function's output: `value` (from the user's forward) over `inputs`, under the op `name`.
// `rule_bytes` counts what the Python context keeps for the backward (its saved arrays).
template <class T>
var<T> record_function(const std::string& name, const std::vector<var<T>>& inputs, const numpy_in<T>& value,
                       py::object rule, std::size_t rule_bytes)
{
    return detail::record(interned(name), inputs, to_array(value), saves_nothing,
                          python_rule<T>{std::move(rule)}, 0, rule_bytes);
}

// Whether a var's node still holds its gradient, and whether a backward that did not retain the graph
// has freed its rule (so that Var.grad can tell "no gradient arrived" from "the gradient was freed").
template <class T>
py::tuple grad_state(const var<T>& v)
{
    const auto& n = v.node();
    return py::make_tuple(n.has_grad, n.released, n.input_count == 0);
}

template <class T>
void bind_function_for(py::module_& m)
{
    m.def("record_function", &record_function<T>);
    m.def("grad_state", &grad_state<T>);
}
}  // namespace

void bind_function(py::module_& m)
{
    bind_function_for<double>(m);
    bind_function_for<float>(m);
}
}  // namespace xgrad::python
