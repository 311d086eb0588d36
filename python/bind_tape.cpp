// The tape, its vars and parameters, every primitive op under its C++ name, and gradcheck. Each is bound
// once per dtype (classes "Tape_f64", "Var_f32", ...); the ops are overloads of one name per op, picked
// by the vars' dtype. Every array crossing the boundary is copied (python/convert.hpp).
#include <random>

#include "autodiff/gradcheck.hpp"
#include "python/convert.hpp"
#include "ops/ops.hpp"

namespace xgrad::python
{
namespace
{
py::dict node_dict(const node_info& n)
{
    py::dict d;
    d["index"] = n.index;
    d["op"] = n.op;
    d["label"] = n.label;
    d["inputs"] = n.inputs;
    d["shape"] = std::vector<std::size_t>(n.shape.begin(), n.shape.end());
    d["value_bytes"] = n.value_bytes;
    d["saved_for_backward"] = n.saved_for_backward;
    d["multiply_adds"] = n.multiply_adds;
    return d;
}

template <class T>
void bind_tape(py::module_& m)
{
    using box = tape_box<T>;
    py::class_<box, std::shared_ptr<box>>(m, ("Tape_" + dtype_suffix<T>()).c_str())
        .def(py::init<>())
        .def("input", [](box& b, const numpy_in<T>& a, const std::string& label) {
            return b.get().input(to_array(a), label);
        })
        .def("constant", [](box& b, const numpy_in<T>& a, const std::string& label) {
            return b.get().constant(to_array(a), label);
        })
        .def("param", [](box& b, const parameter<T>& p) { return b.get().param(p); })
        .def("backward", [](box& b, const var<T>& root, bool retain) { b.get().backward(root, retain); })
        .def("backward_seed", [](box& b, const var<T>& root, const numpy_in<T>& seed, bool retain) {
            b.get().backward(root, to_array(seed), retain);
        })
        .def("clear", [](box& b) { b.get().clear(); })
        .def("enter_no_grad", &box::enter_no_grad)
        .def("exit_no_grad", &box::exit_no_grad)
        .def("detect_anomaly", [](box& b, bool on) { b.get().detect_anomaly(on); })
        .def("detecting_anomaly", [](box& b) { return b.get().detecting_anomaly(); })
        .def("size", [](box& b) { return b.get().size(); })
        .def("nodes", [](box& b) {
            py::list out;
            for (const node_info& n : b.get().nodes())
            {
                out.append(node_dict(n));
            }
            return out;
        })
        .def("bytes_saved_for_backward",
             [](box& b, bool leaves) { return b.get().bytes_saved_for_backward(leaves); })
        .def("bytes_held", [](box& b) { return b.get().bytes_held(); })
        .def("multiply_adds", [](box& b) { return b.get().multiply_adds(); })
        .def("trace", [](box& b) { return b.get().trace(); })
        .def("to_dot", [](box& b) { return b.get().to_dot(); });
}

template <class T>
void bind_var(py::module_& m)
{
    py::class_<var<T>>(m, ("Var_" + dtype_suffix<T>()).c_str())
        .def("value", [](const var<T>& v) { return to_numpy(v.value()); })
        .def("grad", [](const var<T>& v) { return to_numpy(v.grad()); })
        .def("shape", [](const var<T>& v) {
            const shape_t s = v.shape();
            return std::vector<std::size_t>(s.begin(), s.end());
        })
        .def("requires_grad", &var<T>::requires_grad)
        .def("op", [](const var<T>& v) { return std::string(v.op()); })
        .def("label", [](const var<T>& v) { return v.node().label; })
        .def("index", &var<T>::index)
        .def("named", [](const var<T>& v, const std::string& label) { return v.named(label); })
        .def("same_tape", [](const var<T>& a, const var<T>& b) { return a.state() == b.state(); })
        .def("constant_like",
             [](const var<T>& v, const numpy_in<T>& a) { return constant_like(v, to_array(a)); });

    py::class_<parameter<T>>(m, ("Parameter_" + dtype_suffix<T>()).c_str())
        .def(py::init(
            [](const numpy_in<T>& a, const std::string& name) { return parameter<T>(to_array(a), name); }))
        .def("value", [](const parameter<T>& p) { return to_numpy(p.value()); })
        .def("grad", [](const parameter<T>& p) { return to_numpy(p.grad()); })
        .def("name", [](const parameter<T>& p) { return p.name(); })
        .def("zero_grad", &parameter<T>::zero_grad)
        // In place and of the same shape: a tape that reads this parameter keeps pointing at valid memory.
        .def("assign", [](parameter<T>& p, const numpy_in<T>& a) {
            if (shape_of(a) != to_shape(p.value().shape()))
            {
                fail("Parameter.assign", "value of shape " + shape_str(shape_of(a)) + " for parameter '" +
                                             p.name() + "' of shape " + shape_str(to_shape(p.value().shape())));
            }
            std::copy(a.data(), a.data() + a.size(), p.value().data());
        });
}

template <class T>
void bind_elementwise(py::module_& m)
{
    using v = const var<T>&;
    m.def("add", [](v a, v b) { return ops::add(a, b); });
    m.def("sub", [](v a, v b) { return ops::sub(a, b); });
    m.def("mul", [](v a, v b) { return ops::mul(a, b); });
    m.def("div", [](v a, v b) { return ops::div(a, b); });
    m.def("scale", [](v x, double f) { return ops::scale(x, T(f)); });
    m.def("add_scalar", [](v x, double c) { return ops::add_scalar(x, T(c)); });
    m.def("pow", [](v x, double e) { return ops::pow(x, T(e)); });
    m.def("neg", [](v x) { return ops::neg(x); });
    m.def("exp", [](v x) { return ops::exp(x); });
    m.def("log", [](v x) { return ops::log(x); });
    m.def("sqrt", [](v x) { return ops::sqrt(x); });
    m.def("rsqrt", [](v x) { return ops::rsqrt(x); });
    m.def("tanh", [](v x) { return ops::tanh(x); });
    m.def("relu", [](v x) { return ops::relu(x); });
    m.def("sigmoid", [](v x) { return ops::sigmoid(x); });
    m.def("gelu", [](v x) { return ops::gelu(x); });
    m.def("erf", [](v x) { return ops::erf(x); });
    m.def("silu", [](v x) { return ops::silu(x); });
    m.def("gelu_exact", [](v x) { return ops::gelu_exact(x); });
    m.def("swiglu", [](v gate, v up) { return ops::swiglu(gate, up); });
}

template <class T>
void bind_reductions_and_shapes(py::module_& m)
{
    using v = const var<T>&;
    using axes = const std::vector<std::size_t>&;
    m.def("sum_all", [](v x) { return ops::sum(x); });
    m.def("sum", [](v x, axes a, bool keep) { return ops::sum(x, a, keep); });
    m.def("mean_all", [](v x) { return ops::mean(x); });
    m.def("mean", [](v x, axes a, bool keep) { return ops::mean(x, a, keep); });
    m.def("max", [](v x, std::size_t axis, bool keep) { return ops::max(x, axis, keep); });
    m.def("variance", [](v x, axes a, bool keep) { return ops::variance(x, a, keep); });
    m.def("reshape", [](v x, const std::vector<long>& s) { return ops::reshape(x, s); });
    m.def("permute", [](v x, axes a) { return ops::permute(x, a); });
    m.def("transpose", [](v x, std::size_t a, std::size_t b) { return ops::transpose(x, a, b); });
    m.def("slice", [](v x, std::size_t axis, std::size_t begin, std::size_t end) {
        return ops::slice(x, axis, begin, end);
    });
    m.def("concat", [](const std::vector<var<T>>& parts, std::size_t axis) {
        return ops::concat(parts, axis);
    });
    m.def("embedding", [](v weight, const numpy_in<std::int64_t>& ids) {
        return ops::embedding(weight, to_ids(ids));
    });
    m.def("matmul", [](v a, v b, bool ta, bool tb) { return ops::matmul(a, b, ta, tb); });
}

template <class T>
void bind_nn_ops(py::module_& m)
{
    using v = const var<T>&;
    m.def("masked_softmax", [](v x, const numpy_in<bool>& mask, double scale) {
        return ops::masked_softmax(x, to_mask(mask), T(scale));
    });
    m.def("softmax", [](v x, double scale) { return ops::softmax(x, T(scale)); });
    m.def("attention", [](v q, v k, v val, const std::optional<numpy_in<bool>>& mask, bool causal,
                          std::size_t window) {
        const std::optional<mask_t> m = mask ? std::optional<mask_t>(to_mask(*mask)) : std::nullopt;
        return ops::attention(q, k, val, m ? &*m : nullptr, causal, window);
    });
    m.def("attention_token_major", [](v q, v k, v val, std::size_t heads, std::size_t kv_heads,
                                      const std::optional<numpy_in<bool>>& mask, bool causal,
                                      std::size_t window) {
        const std::optional<mask_t> m = mask ? std::optional<mask_t>(to_mask(*mask)) : std::nullopt;
        return ops::attention_token_major(q, k, val, heads, kv_heads, m ? &*m : nullptr, causal, window);
    });
    m.def("linear", [](v x, v w, v b) { return ops::linear(x, w, b); });
    m.def("linear_gelu", [](v x, v w, v b) { return ops::linear_gelu(x, w, b); });
    m.def("linear_gelu_exact", [](v x, v w, v b) { return ops::linear_gelu_exact(x, w, b); });
    m.def("log_softmax", [](v x) { return ops::log_softmax(x); });
    m.def("cross_entropy", [](v logits, const numpy_in<std::int64_t>& targets) {
        return ops::cross_entropy(logits, to_ids(targets));
    });
    m.def("layer_norm", [](v x, v w, v b, double eps) { return ops::layer_norm(x, w, b, T(eps)); });
    m.def("rms_norm", [](v x, v w, double eps) { return ops::rms_norm(x, w, eps); });
    m.def("rope", [](v x, double base, std::size_t offset) { return ops::rope(x, base, offset); });
    m.def("dropout", [](v x, double p, std::uint64_t seed, bool training) {
        std::mt19937_64 generator(seed);
        return ops::dropout(x, T(p), generator, training);
    });
}

py::dict report_dict(const gradcheck_report& report)
{
    py::list inputs;
    for (const auto& r : report.inputs)
    {
        py::dict d;
        d["input"] = r.input;
        d["shape"] = std::vector<std::size_t>(r.shape.begin(), r.shape.end());
        d["method"] = r.method;
        d["entries_checked"] = r.entries_checked;
        d["max_abs_error"] = r.max_abs_error;
        d["max_rel_error"] = r.max_rel_error;
        d["ok"] = r.ok;
        inputs.append(d);
    }
    py::dict d;
    d["ok"] = report.ok;
    d["inputs"] = inputs;
    d["summary"] = report.summary();
    return d;
}

// gradcheck with a Python function: each evaluation lends its tape to f (as a Tape_f64 that expires when
// f returns) and f returns the output var.
void bind_gradcheck(py::module_& m)
{
    using arrays = std::vector<numpy_in<double>>;
    m.def("gradcheck", [](const py::function& f, const arrays& inputs, double eps, double atol, double rtol,
                          std::size_t full_jacobian_limit, std::size_t directions, unsigned seed) {
        std::vector<array<double>> xs;
        for (const auto& a : inputs)
        {
            xs.push_back(to_array(a));
        }
        const checked_function<double> checked = [&f](tape<double>& t, const std::vector<var<double>>& vars) {
            auto lent = std::make_shared<tape_box<double>>(t);
            struct expire_on_exit
            {
                std::shared_ptr<tape_box<double>> box;
                ~expire_on_exit() { box->expire(); }
            } guard{lent};
            return f(lent, vars).cast<var<double>>();
        };
        return report_dict(gradcheck(checked, xs, {eps, atol, rtol, full_jacobian_limit, directions, seed}));
    });
}
}  // namespace

template <class T>
void bind_tape_and_ops(py::module_& m)
{
    bind_tape<T>(m);
    bind_var<T>(m);
    bind_elementwise<T>(m);
    bind_reductions_and_shapes<T>(m);
    bind_nn_ops<T>(m);
    if constexpr (sizeof(T) == 8)
    {
        bind_gradcheck(m);
    }
}

template void bind_tape_and_ops<float>(py::module_&);
template void bind_tape_and_ops<double>(py::module_&);
}  // namespace xgrad::python
