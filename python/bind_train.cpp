// Training: the optimisers (SGD, Adam, AdamW) over parameter handles, gradient clipping, the learning-rate
// schedule, the byte vocabulary of text checkpoints, and xgrad-train's loop (run_training), which runs
// without the GIL and stops cleanly, with a checkpoint, on Ctrl-C.
#include <csignal>
#include <unistd.h>

#include "io/checkpoint.hpp"
#include "optim/optim.hpp"
#include "python/convert.hpp"
#include "train/text_data.hpp"
#include "train/trainer.hpp"

namespace xgrad::python
{
namespace
{
template <class T>
py::dict state_dict(const optim::named_tensors<T>& tensors)
{
    py::dict d;
    for (const auto& [name, a] : tensors)
    {
        d[py::str(name)] = to_numpy(a);
    }
    return d;
}

template <class T>
void bind_optimisers(py::module_& m)
{
    using base = optim::optimiser<T>;
    using params = std::vector<parameter<T>>;
    py::class_<base>(m, ("Optimiser_" + dtype_suffix<T>()).c_str())
        .def("step", &base::step)
        .def("zero_grad", &base::zero_grad)
        .def("lr", &base::lr)
        .def("set_lr", &base::set_lr)
        .def("step_count", &base::step_count)
        .def("parameters", &base::parameters)
        .def("export_state", [](const base& o) { return state_dict(o.export_state()); })
        .def("import_state", [](base& o, const std::map<std::string, numpy_in<T>>& tensors) {
            optim::named_tensors<T> in;
            for (const auto& [name, a] : tensors)
            {
                in[name] = to_array(a);
            }
            o.import_state(in);
        });
    py::class_<optim::sgd<T>, base>(m, ("SGD_" + dtype_suffix<T>()).c_str())
        .def(py::init([](const params& p, double lr, double momentum, bool nesterov, double weight_decay,
                         bool decay_every_parameter) {
            const optim::sgd_options options{lr, momentum, nesterov, weight_decay, decay_every_parameter};
            return std::make_unique<optim::sgd<T>>(p, options);
        }));
    py::class_<optim::adam<T>, base>(m, ("Adam_" + dtype_suffix<T>()).c_str())
        .def(py::init([](const params& p, double lr, double beta1, double beta2, double eps,
                         double weight_decay, bool decoupled, bool decay_every_parameter) {
            const optim::adam_options options{lr, beta1, beta2, eps, weight_decay, decoupled,
                                              decay_every_parameter};
            return std::make_unique<optim::adam<T>>(p, options);
        }));
    m.def("clip_grad_norm", [](const params& p, double max_norm) {
        return optim::clip_grad_norm(p, max_norm);
    });
    // Parameter.grad = array (a hand-written clipping or optimiser), of the parameter's shape.
    m.def("set_parameter_grad", [](parameter<T>& p, const numpy_in<T>& g) {
        if (shape_of(g) != to_shape(p.value().shape()))
        {
            fail("Parameter.grad", "gradient of shape " + shape_str(shape_of(g)) + " for parameter '" +
                                       p.name() + "' of shape " + shape_str(to_shape(p.value().shape())));
        }
        p.grad() = to_array(g);
    });
    // A module written in Python: its declared parameters, in its dtype, with the metadata that describes it.
    using named_parameters = std::vector<std::pair<std::string, parameter<T>>>;
    m.def("save_module_file", [](const std::string& path, const named_parameters& named,
                                 const std::map<std::string, std::string>& metadata) {
        std::vector<std::pair<std::string, io::stored_tensor>> tensors;
        for (const auto& [name, p] : named)
        {
            tensors.emplace_back(name, io::to_stored(p));
        }
        io::write_module_file(path, tensors, metadata, {});
    });
}

// Reads a module's file strictly against its declared (name, shape) list and metadata: {name: float64 array}.
void bind_module_files(py::module_& m)
{
    m.def("load_module_file", [](const std::string& path,
                                 const std::vector<std::pair<std::string, std::vector<std::size_t>>>& declared,
                                 const std::map<std::string, std::string>& metadata) {
        std::vector<std::pair<std::string, models::declaration>> declarations;
        for (const auto& [name, shape] : declared)
        {
            declarations.emplace_back(name, models::declare::zeros(shape_t(shape.begin(), shape.end())));
        }
        const io::safetensors_file file = io::read_module_file(path, declarations, metadata);
        py::dict values;
        for (const auto& [name, shape] : declared)
        {
            values[py::str(name)] = to_numpy(file.tensors.at(name).values);
        }
        return py::make_tuple(values, file.metadata);
    });
}

volatile std::sig_atomic_t interrupted = 0;

extern "C" void on_interrupt(int)
{
    interrupted = 1;
}

// Ctrl-C during run_training: Python's own handler cannot run while C++ holds the thread, so a handler of
// ours asks the loop to stop after the current step (with a checkpoint); the old handler comes back after.
struct interrupt_scope
{
    using handler = void (*)(int);
    handler previous;
    interrupt_scope() : previous(std::signal(SIGINT, on_interrupt)) { interrupted = 0; }
    ~interrupt_scope() { std::signal(SIGINT, previous == SIG_ERR ? SIG_DFL : previous); }
};

py::dict summary_dict(const train::train_summary& s)
{
    py::dict d;
    d["first_step"] = s.first_step;
    d["last_step"] = s.last_step;
    d["interrupted"] = s.interrupted;
    d["train_loss"] = s.train_loss;
    d["val_loss"] = s.val_loss;
    d["tokens_per_s"] = s.tokens_per_s;
    d["parameters"] = s.parameters;
    d["sample"] = py::bytes(s.sample);
    return d;
}

void bind_trainer(py::module_& m)
{
    using o = train::train_options;
    py::class_<o>(m, "TrainOptions")
        .def(py::init<>())
        .def_readwrite("data", &o::data)
        .def_readwrite("out", &o::out)
        .def_readwrite("steps", &o::steps)
        .def_readwrite("batch", &o::batch)
        .def_readwrite("lr", &o::lr)
        .def_readwrite("warmup", &o::warmup)
        .def_readwrite("decay_steps", &o::decay_steps)
        .def_readwrite("seed", &o::seed)
        .def_readwrite("threads", &o::threads)
        .def_readwrite("resume", &o::resume)
        .def_readwrite("weight_decay", &o::weight_decay)
        .def_readwrite("beta2", &o::beta2)
        .def_readwrite("clip", &o::clip)
        .def_readwrite("eval_every", &o::eval_every)
        .def_readwrite("eval_windows", &o::eval_windows)
        .def_readwrite("save_every", &o::save_every)
        .def_readwrite("sample_tokens", &o::sample_tokens)
        .def_readwrite("plots", &o::plots)
        .def_readwrite("detect_anomaly", &o::detect_anomaly)
        .def_readwrite("dropout", &o::dropout)
        .def_readwrite("sharpness_every", &o::sharpness_every)
        .def_readwrite("sharpness_iters", &o::sharpness_iters)
        // The model's config fields as text, by key (vocab_size comes from the data).
        .def("set_model", [](o& x, const std::map<std::string, std::string>& fields) {
            x.model = models::config_with_values({}, fields);
        });
    m.def("run_training", [](o options, bool progress) {
        train::train_summary s;
        {
            py::gil_scoped_release unlocked;
            interrupt_scope scope;
            options.interrupt = &interrupted;
            s = train::run_training(options, progress ? stderr : nullptr, progress && isatty(STDERR_FILENO));
        }
        return summary_dict(s);
    });
}

void bind_vocabulary(py::module_& m)
{
    using vocab = train::byte_vocabulary;
    py::class_<vocab>(m, "ByteVocabulary")
        .def_static("of_text", [](const py::bytes& text) { return vocab::of_text(text); })
        .def_static("from_json", &vocab::from_json)
        .def("to_json", &vocab::to_json)
        .def("size", &vocab::size)
        .def("encode", [](const vocab& v, const py::bytes& text) { return v.encode(text); })
        .def("decode", [](const vocab& v, const std::vector<std::int32_t>& ids) {
            for (std::int32_t id : ids)
            {
                if (id < 0 || std::size_t(id) >= v.size())
                {
                    throw std::invalid_argument("ByteVocabulary.decode: id " + std::to_string(id) +
                                                " outside [0, " + std::to_string(v.size()) + ")");
                }
            }
            return py::bytes(v.decode(ids));
        });
}

void bind_schedule(py::module_& m)
{
    py::class_<optim::lr_schedule>(m, "LRSchedule")
        .def(py::init([](double peak, std::int64_t total, std::optional<std::int64_t> warmup,
                         std::optional<std::int64_t> decay, std::optional<double> min_lr) {
            return optim::make_lr_schedule(peak, total, warmup, decay, min_lr);
        }))
        .def_readonly("peak_lr", &optim::lr_schedule::peak_lr)
        .def_readonly("warmup", &optim::lr_schedule::warmup)
        .def_readonly("decay_steps", &optim::lr_schedule::decay_steps)
        .def_property_readonly("min_lr", [](const optim::lr_schedule& s) {
            return s.min_lr.value_or(s.peak_lr / 10);
        })
        .def("at", &optim::lr_schedule::at);
}
}  // namespace

template <class T>
void bind_training(py::module_& m)
{
    bind_optimisers<T>(m);
}

void bind_dtype_free(py::module_& m)
{
    bind_trainer(m);
    bind_module_files(m);
    bind_vocabulary(m);
    bind_schedule(m);
}

template void bind_training<float>(py::module_&);
template void bind_training<double>(py::module_&);
}  // namespace xgrad::python
