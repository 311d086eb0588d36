// Multi-head attention (composed on the tape, and hand-derived on arrays), masks and counting, the GPT
// (load, save, forward on a tape, its hand-derived twin, decoding and sampling) and the first-divergence
// report. The GPT's whole binding is the class below: a model layer that changes shape adapts here only.
#include "io/checkpoint.hpp"
#include "io/size_limits.hpp"
#include "models/divergence.hpp"
#include "models/gpt_decode.hpp"
#include "models/gpt_manual.hpp"
#include "models/manual_faults.hpp"
#include "models/mha_manual.hpp"
#include "python/convert.hpp"

namespace xgrad::python
{
namespace
{
using optional_mask = std::optional<numpy_in<bool>>;

std::optional<mask_t> mask_of(const optional_mask& mask)
{
    return mask ? std::optional<mask_t>(to_mask(*mask)) : std::nullopt;
}

template <class T>
void bind_mha(py::module_& m)
{
    using v = const var<T>&;
    m.def("multi_head_attention", [](v xq, v xk, v xv, v w_q, v w_k, v w_v, v w_o, std::size_t heads,
                                     std::size_t kv_heads, const optional_mask& mask, bool causal, bool fused) {
        const std::optional<mask_t> m = mask_of(mask);
        const models::mha_config config{w_q.shape()[0], heads, kv_heads};
        const auto r = models::multi_head_attention(xq, xk, xv, {w_q, w_k, w_v, w_o}, config,
                                                    {m ? &*m : nullptr, causal, fused});
        return py::make_tuple(r.output, r.attention.valid() ? py::cast(r.attention) : py::none());
    });
    m.def("split_heads", [](v x, std::size_t heads) { return models::split_heads(x, heads); });
    m.def("combine_heads", [](v x) { return models::combine_heads(x); });

    using a = const numpy_in<T>&;
    using cache = models::manual::mha_cache<T>;
    py::class_<cache>(m, ("MHACache_" + dtype_suffix<T>()).c_str())
        .def("q", [](const cache& c) { return to_numpy(c.q); })
        .def("k", [](const cache& c) { return to_numpy(c.k); })
        .def("v", [](const cache& c) { return to_numpy(c.v); })
        .def("weights", [](const cache& c) { return to_numpy(c.weights); })
        .def("joined", [](const cache& c) { return to_numpy(c.joined); })
        .def("mask", [](const cache& c) {
            return c.mask ? py::object(to_numpy(*c.mask)) : py::object(py::none());
        });
    const std::string forward_name = "manual_mha_forward_" + dtype_suffix<T>();
    m.def(forward_name.c_str(), [](a xq, a xk, a xv, a w_q, a w_k, a w_v, a w_o, std::size_t heads,
                                   std::size_t kv_heads, const optional_mask& mask, bool causal) {
        const std::optional<mask_t> m = mask_of(mask);
        const array<T> wq = to_array(w_q);
        const models::mha_config config{wq.shape().empty() ? 0 : wq.shape()[0], heads, kv_heads};
        auto r = models::manual::mha_forward(to_array(xq), to_array(xk), to_array(xv), wq, to_array(w_k),
                                             to_array(w_v), to_array(w_o), config, {m ? &*m : nullptr, causal});
        return py::make_tuple(to_numpy(r.output), std::move(r.cache));
    });
    m.def("manual_mha_backward", [](a grad_output, const cache& c) {
        const auto g = models::manual::mha_backward(to_array(grad_output), c);
        py::dict d;
        d["Xq"] = to_numpy(g.xq);
        d["Xk"] = to_numpy(g.xk);
        d["Xv"] = to_numpy(g.xv);
        d["W_Q"] = to_numpy(g.w_q);
        d["W_K"] = to_numpy(g.w_k);
        d["W_V"] = to_numpy(g.w_v);
        d["W_O"] = to_numpy(g.w_o);
        return d;
    });
}

py::dict report_dict(const models::divergence_report& r)
{
    py::list rows;
    for (const auto& c : r.rows)
    {
        py::dict d;
        d["name"] = c.name;
        d["reference_shape"] = std::vector<std::size_t>(c.reference_shape.begin(), c.reference_shape.end());
        d["candidate_shape"] = std::vector<std::size_t>(c.candidate_shape.begin(), c.candidate_shape.end());
        d["in_reference"] = c.in_reference;
        d["in_candidate"] = c.in_candidate;
        d["max_abs"] = c.max_abs;
        d["max_rel"] = c.max_rel;
        d["diverges"] = c.diverges;
        rows.append(d);
    }
    py::dict d;
    d["rows"] = rows;
    d["first"] = r.first ? py::cast(r.rows[*r.first].name) : py::none();
    d["summary"] = r.summary();
    d["table"] = r.table();
    d["text"] = r.to_string();
    return d;
}

template <class T>
models::named_gradients<T> named_arrays(const std::vector<std::pair<std::string, numpy_in<T>>>& list)
{
    models::named_gradients<T> out;
    for (const auto& [name, a] : list)
    {
        out.emplace_back(name, to_array(a));
    }
    return out;
}

template <class T>
void bind_divergence(py::module_& m)
{
    using list = const std::vector<std::pair<std::string, numpy_in<T>>>&;
    const std::string name = "first_divergence_" + dtype_suffix<T>();
    m.def(name.c_str(), [](list reference, list candidate, double rtol, double atol,
                           const std::string& reference_label, const std::string& candidate_label) {
        auto r = models::first_divergence(named_arrays(reference), named_arrays(candidate), {rtol, atol});
        r.reference_label = reference_label;
        r.candidate_label = candidate_label;
        return report_dict(r);
    });
}

// The GPT as Python sees it: its parameters and the checkpoint's metadata.
template <class T>
struct gpt_model
{
    models::gpt_parameters<T> params;
    std::map<std::string, std::string> metadata;
};

// A field's value as Python has it: int, float, bool or the enum's name.
py::object python_value(std::size_t v) { return py::int_(v); }
py::object python_value(double v) { return py::float_(v); }
py::object python_value(bool v) { return py::bool_(v); }
template <class E>
py::object python_value(E v)
{
    return py::str(models::field_text(v));
}

// Every field of the config by its key, the widths explicit (kv_heads = H, mlp_hidden = 4 d by default).
py::dict config_dict(const models::gpt_config& config)
{
    models::gpt_config c = models::explicit_widths(config);
    py::dict d;
    models::visit_config(c, [&d](const models::config_field& f, const auto& member) {
        d[py::str(f.key)] = python_value(member);
    });
    return d;
}

template <class T>
py::list named_list(const std::vector<std::pair<std::string, array<T>>>& list)
{
    py::list out;
    for (const auto& [name, a] : list)
    {
        out.append(py::make_tuple(name, to_numpy(a)));
    }
    return out;
}

template <class T>
void bind_gpt(py::module_& m)
{
    using model = gpt_model<T>;
    using ids = const numpy_in<std::int64_t>&;
    using optional_ids = const std::optional<numpy_in<std::int64_t>>&;
    using strings = std::map<std::string, std::string>;
    py::class_<model>(m, ("GPT_" + dtype_suffix<T>()).c_str())
        // The config's fields as text, by key (models/gpt_config.hpp): an unknown key or value is a ValueError.
        .def(py::init([](const strings& fields, std::uint64_t seed) {
            const models::gpt_config config = models::config_with_values({}, fields);
            config.validate("GPT");
            io::check_gpt_size(config, sizeof(T), "GPT");
            return model{models::gpt_parameters<T>::init(config, seed), {}};
        }))
        .def_static("load", [](const std::string& path) {
            io::checkpoint<T> ck = io::load_checkpoint<T>(path, io::optimiser_state::skip);
            return model{std::move(ck.params), std::move(ck.metadata)};
        })
        .def("save", [](const model& mo, const std::string& path, const strings& extra) {
            io::checkpoint_extras extras;
            for (const auto& source : {mo.metadata, extra})
            {
                for (const auto& [key, value] : source)
                {
                    if (!models::is_config_key(key))  // the model's own are written from it
                    {
                        extras.metadata[key] = value;
                    }
                }
            }
            io::save_checkpoint(path, mo.params, extras);
        })
        .def("config", [](const model& mo) { return config_dict(mo.params.config); })
        .def("metadata", [](const model& mo) { return mo.metadata; })
        .def("parameters", [](const model& mo) { return mo.params.named_parameters(); })
        .def("parameter_count", [](const model& mo) { return models::gpt_parameter_count(mo.params.config); })
        .def("zero_grad", [](model& mo) { mo.params.zero_grad(); })
        .def("forward", [](const model& mo, tape_box<T>& t, ids tokens, optional_ids targets, bool fused) {
            const ids_t tk = to_ids(tokens);
            const std::optional<ids_t> tg = targets ? std::optional<ids_t>(to_ids(*targets)) : std::nullopt;
            auto r = models::gpt_forward(t.get(), mo.params, tk, tg ? &*tg : nullptr, {fused});
            return py::make_tuple(r.logits, r.loss.valid() ? py::cast(r.loss) : py::none(), r.activations);
        })
        .def("manual", [](const model& mo, ids tokens, ids targets, const std::string& broken) {
            const auto rule = models::manual::broken_rule_from_string(broken);
            if (!rule)
            {
                throw std::invalid_argument("GPT.manual_gradients: unknown broken rule '" + broken + "'");
            }
            const ids_t tg = to_ids(targets);
            const auto f = models::manual::gpt_forward(mo.params, to_ids(tokens), &tg);
            const auto g = models::manual::gpt_backward(f.cache, *rule);
            return py::make_tuple(to_numpy(f.logits), double(f.loss), named_list(g.in_backward_order));
        })
        .def("backward_order",
             [](const model& mo) { return models::manual::gpt_backward_order(mo.params.config); })
        .def("sample", [](const model& mo, const std::vector<std::int32_t>& prompt, std::size_t tokens,
                          double temperature, std::size_t top_k, std::uint64_t seed) {
            if (prompt.empty())
            {
                throw std::invalid_argument("GPT.sample: the prompt holds no token");
            }
            return models::sample(mo.params, prompt, {tokens, temperature, top_k, seed});
        })
        .def("decode", [](const model& mo, ids tokens, models::kv_cache<T>& cache) {
            return to_numpy(models::gpt_decode(mo.params, to_ids(tokens), cache));
        });
    py::class_<models::kv_cache<T>>(m, ("KVCache_" + dtype_suffix<T>()).c_str())
        .def(py::init<>())
        .def("length", &models::kv_cache<T>::length)
        .def("clear", &models::kv_cache<T>::clear);
}

void bind_masks_and_counting(py::module_& m)
{
    m.def("causal_mask", [](std::size_t tq, std::size_t tk) {
        io::check_array_size("causal_mask", "the mask", {tq, tk}, sizeof(bool));
        return to_numpy(models::causal_mask(tq, tk));
    });
    m.def("padding_mask", [](const std::vector<std::size_t>& lengths, std::size_t tk) {
        io::check_array_size("padding_mask", "the mask", {lengths.size(), tk}, sizeof(bool));
        return to_numpy(models::padding_mask(lengths, tk));
    });
    m.def("mha_parameter_count", [](std::size_t d, std::size_t heads, std::size_t kv_heads) {
        const models::mha_config config{d, heads, kv_heads};
        config.validate("mha_parameter_count");
        io::check_array_size("mha_parameter_count", "W_Q", {d, d}, sizeof(float));
        return models::parameter_count(config);
    });
    m.def("self_attention_multiply_adds", &models::self_attention_multiply_adds);
    m.def("cross_attention_multiply_adds", [](std::size_t b, std::size_t tq, std::size_t tk, std::size_t d,
                                              std::size_t heads, std::size_t kv_heads) {
        const models::mha_config config{d, heads, kv_heads};
        config.validate("cross_attention_multiply_adds");
        return models::cross_attention_multiply_adds(b, tq, tk, config);
    });
    m.def("gpt_parameter_count", [](std::size_t vocab, std::size_t block, std::size_t layers, std::size_t d,
                                    std::size_t heads, std::size_t kv_heads) {
        const models::gpt_config config{vocab, block, layers, d, heads, kv_heads};
        config.validate("gpt_parameter_count");
        io::check_gpt_size(config, sizeof(float), "gpt_parameter_count");
        return models::gpt_parameter_count(config);
    });
}
}  // namespace

template <class T>
void bind_models(py::module_& m)
{
    bind_mha<T>(m);
    bind_divergence<T>(m);
    bind_gpt<T>(m);
    if constexpr (sizeof(T) == 8)
    {
        bind_masks_and_counting(m);
    }
}

template void bind_models<float>(py::module_&);
template void bind_models<double>(py::module_&);
}  // namespace xgrad::python
