// GPT checkpoints on safetensors. The expected tensors are docs/spec.md's table, computed from the sizes in the
// metadata; the file is checked against it (missing, misshapen and unknown tensors) before any model
// memory is allocated, so a file's claims cannot make the loader allocate more than the file holds.
#include "io/checkpoint.hpp"
#include "io/checkpoint_limits.hpp"  // the metadata's claims against the file, before any allocation

#include <set>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

namespace xgrad::io
{
namespace
{
const std::string optimiser_prefix = "optim.";

bool is_optimiser_state(const std::string& name)
{
    return name.compare(0, optimiser_prefix.size(), optimiser_prefix) == 0;
}

template <class T>
const char* dtype_name()
{
    return std::is_same<T, float>::value ? "F32" : "F64";
}

// One row of docs/spec.md's table: a parameter's name, its shape, and the shape as docs/spec.md writes it.
struct expected_tensor
{
    std::string name;
    shape_t shape;
    std::string formula;
};

// The model's declared parameters in their order (gpt_parameters::visit), with no memory allocated.
std::vector<expected_tensor> spec_tensors(const models::gpt_config& c)
{
    std::vector<expected_tensor> t;
    for (auto& [name, d] : models::declared_parameters(models::gpt_parameters<float>::declare(c)))
    {
        t.push_back({name, d.shape, d.formula});
    }
    return t;
}

std::string sizes_str(const models::gpt_config& c) { return models::describe(c); }

// The values converted to another float type: a parameter widened to the double a file stores, or a
// stored tensor narrowed to the model's T.
template <class To, class From>
array<To> converted(const array<From>& values)
{
    array<To> out = array<To>::from_shape(to_shape(values.shape()));
    for (std::size_t k = 0; k < values.size(); ++k)
    {
        out.data()[k] = static_cast<To>(values.data()[k]);
    }
    return out;
}

// A parameter's values to write as they are, by reference (the caller keeps the parameter until written).
stored_tensor borrowed(const array<float>& values) { return {dtype_name<float>(), {}, &values, nullptr}; }
stored_tensor borrowed(const array<double>& values) { return {dtype_name<double>(), {}, nullptr, &values}; }

// Every expected tensor present with its shape, and nothing else but optimiser state.
void check_tensors(const std::string& path, const std::map<std::string, tensor_info>& tensors,
                   const models::gpt_config& c, const std::vector<expected_tensor>& expected)
{
    std::set<std::string> names;
    for (const expected_tensor& e : expected)
    {
        names.insert(e.name);
        const auto found = tensors.find(e.name);
        if (found == tensors.end())
        {
            fail(path, "tensor '" + e.name + "' is missing (the metadata's sizes: " + sizes_str(c) + ")");
        }
        const shape_t& got = found->second.shape;
        if (got != e.shape)
        {
            fail(path, "tensor '" + e.name + "' has shape " + shape_str(got) + ", expected " + e.formula +
                         " = " + shape_str(e.shape) + " (the metadata's sizes: " + sizes_str(c) + ")");
        }
    }
    for (const auto& [name, t] : tensors)
    {
        if (!names.count(name) && !is_optimiser_state(name))
        {
            fail(path, "unknown tensor " + printable(name) + " with shape " + shape_str(t.shape) +
                         " (not a parameter of a model with " +
                         sizes_str(c) + "; optimiser state must be named 'optim.*')");
        }
    }
}
}  // namespace

models::gpt_config config_from_metadata(const std::string& path,
                                        const std::map<std::string, std::string>& metadata)
{
    models::gpt_config c;
    try
    {
        c = models::config_from_metadata(metadata);
    }
    catch (const models::variant_error& e)
    {
        const bool several = e.allowed.find(',') != std::string::npos;
        fail(path, "metadata '" + e.key + "' = " + printable(e.value) + " is not " + (several ? "one of " : "") +
                       e.allowed);
    }
    catch (const models::missing_size_error& e)
    {
        fail(path, e.what());
    }
    try
    {
        c.validate("checkpoint");
    }
    catch (const std::invalid_argument& e)
    {
        fail(path, "the metadata's sizes (" + sizes_str(c) + ") do not make a model: " + e.what());
    }
    return c;
}

namespace
{
// The checkpoint's metadata: the caller's extras, then the config's keys (docs/spec.md). An extra key of
// the config must say what the model is (an explicit default stays, as written).
std::map<std::string, std::string> checkpoint_metadata(const models::gpt_config& c,
                                                       std::map<std::string, std::string> metadata)
{
    const std::map<std::string, std::string> own = models::config_metadata(c);
    for (auto it = metadata.begin(); it != metadata.end();)
    {
        const std::string& key = it->first;
        bool same = false;
        try
        {
            same = key == "model_keys" || !models::is_config_key(key) ||
                   models::config_metadata(models::config_with_values(c, {*it})) == own;
        }
        catch (const models::variant_error&)
        {
        }
        if (!same)
        {
            const auto found = own.find(key);
            throw std::invalid_argument("save_checkpoint: extra metadata '" + key + "' = '" + it->second +
                                        "' disagrees with the model's " +
                                        (found == own.end() ? "default" : found->second));
        }
        it = key == "model_keys" ? metadata.erase(it) : std::next(it);
    }
    for (const auto& [key, value] : own)
    {
        metadata[key] = value;
    }
    return metadata;
}
}  // namespace

template <class T>
void save_checkpoint(const std::string& path, const models::gpt_parameters<T>& params,
                     const checkpoint_extras& extras)
{
    const models::gpt_config& c = params.config;
    safetensors_file file;
    file.metadata = checkpoint_metadata(c, extras.metadata);

    const std::vector<expected_tensor> expected = spec_tensors(c);
    const std::vector<parameter<T>> named = params.named_parameters();
    if (named.size() != expected.size())
    {
        throw std::invalid_argument("save_checkpoint: the model has " + std::to_string(named.size()) +
                                    " parameters, its sizes (" + sizes_str(c) + ") call for " +
                                    std::to_string(expected.size()));
    }
    for (std::size_t k = 0; k < named.size(); ++k)
    {
        const shape_t shape = to_shape(named[k].value().shape());
        if (named[k].name() != expected[k].name || shape != expected[k].shape)
        {
            throw std::invalid_argument("save_checkpoint: parameter " + std::to_string(k) + " is '" +
                                        named[k].name() + "' " + shape_str(shape) + ", expected '" +
                                        expected[k].name + "' " + shape_str(expected[k].shape));
        }
        file.tensors.emplace(named[k].name(), borrowed(named[k].value()));
    }
    for (const auto& [name, t] : extras.tensors)
    {
        if (!is_optimiser_state(name))
        {
            throw std::invalid_argument("save_checkpoint: extra tensor '" + name +
                                        "' must be optimiser state, named 'optim.*'");
        }
        file.tensors.emplace(name, t);
    }
    write_safetensors(path, file);
}

namespace
{
// The model a checked file's header declares.
models::gpt_config checked_config(const safetensors_reader& file)
{
    check_checkpoint_limits(file);
    const models::gpt_config c = config_from_metadata(file.path(), file.metadata());
    check_tensors(file.path(), file.tensors(), c, spec_tensors(c));
    return c;
}
}  // namespace

checkpoint_reader::checkpoint_reader(const std::string& path) : file_(path), config_(checked_config(file_))
{
}

template <class T>
void checkpoint_reader::read(const std::string& name, T* out) const
{
    file_.read(name, out);
}

template <class T>
checkpoint<T> load_checkpoint(const std::string& path, optimiser_state optimiser)
{
    const checkpoint_reader reader(path);
    const safetensors_reader& file = reader.file();
    checkpoint<T> out{models::gpt_parameters<T>::declare(reader.config()), reader.metadata(), {}};
    out.params.visit([&file](const std::string& name, parameter<T>& p, const models::declaration&) {
        p = parameter<T>(file.read<T>(name), name);  // checked_config found it
    });
    for (const auto& [name, t] : file.tensors())
    {
        if (optimiser == optimiser_state::load && is_optimiser_state(name))
        {
            out.optimiser.emplace(name, stored_tensor{t.dtype, file.read<double>(name)});
        }
    }
    return out;
}

// ---- any module ----------------------------------------------------------------------------------

template <class T>
stored_tensor to_stored(const parameter<T>& p)
{
    return {dtype_name<T>(), converted<double>(p.value())};
}

template <class T>
parameter<T> from_stored(const stored_tensor& t, const std::string& name)
{
    return parameter<T>(converted<T>(t.values), name);
}

void write_module_file(const std::string& path, const std::vector<std::pair<std::string, stored_tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata, const checkpoint_extras& extras)
{
    safetensors_file file;
    file.metadata = extras.metadata;
    for (const auto& [key, value] : metadata)
    {
        const auto [at, inserted] = file.metadata.emplace(key, value);
        if (!inserted && at->second != value)
        {
            throw std::invalid_argument("save_module: extra metadata '" + key + "' = '" + at->second +
                                        "' disagrees with the model's " + value);
        }
    }
    for (const auto& [name, t] : tensors)
    {
        if (!file.tensors.emplace(name, t).second)
        {
            throw std::invalid_argument("save_module: the model declares '" + name + "' twice");
        }
    }
    for (const auto& [name, t] : extras.tensors)
    {
        if (!is_optimiser_state(name))
        {
            throw std::invalid_argument("save_module: extra tensor '" + name +
                                        "' must be optimiser state, named 'optim.*'");
        }
        file.tensors.emplace(name, t);
    }
    write_safetensors(path, file);
}

void check_module_file(const safetensors_reader& file,
                       const std::vector<std::pair<std::string, models::declaration>>& declared,
                       const std::map<std::string, std::string>& metadata)
{
    const std::string& path = file.path();
    for (const auto& [key, value] : metadata)
    {
        const auto found = file.metadata().find(key);
        if (found == file.metadata().end() || found->second != value)
        {
            const std::string held = found == file.metadata().end() ? "missing" : printable(found->second);
            fail(path, "metadata '" + key + "' is " + held + " but the model has " + printable(value));
        }
    }
    std::set<std::string> names;
    for (const auto& [name, d] : declared)
    {
        names.insert(name);
        const auto found = file.tensors().find(name);
        if (found == file.tensors().end())
        {
            fail(path, "tensor '" + name + "' is missing");
        }
        const shape_t& got = found->second.shape;
        if (got != d.shape)
        {
            fail(path, "tensor '" + name + "' has shape " + shape_str(got) + ", the model declares " +
                           (d.formula.empty() ? "" : d.formula + " = ") + shape_str(d.shape));
        }
    }
    for (const auto& [name, t] : file.tensors())
    {
        if (!names.count(name) && !is_optimiser_state(name))
        {
            fail(path, "unknown tensor " + printable(name) + " with shape " + shape_str(t.shape) +
                           " (not a parameter of the model; optimiser state must be named 'optim.*')");
        }
    }
}

safetensors_file read_module_file(const std::string& path,
                                  const std::vector<std::pair<std::string, models::declaration>>& declared,
                                  const std::map<std::string, std::string>& metadata)
{
    const safetensors_reader file(path);
    check_module_file(file, declared, metadata);
    safetensors_file out;
    out.metadata = file.metadata();
    for (const auto& [name, t] : file.tensors())
    {
        out.tensors.emplace(name, stored_tensor{t.dtype, file.read<double>(name)});
    }
    return out;
}

template stored_tensor to_stored(const parameter<float>&);
template stored_tensor to_stored(const parameter<double>&);
template parameter<float> from_stored(const stored_tensor&, const std::string&);
template parameter<double> from_stored(const stored_tensor&, const std::string&);

template void save_checkpoint<float>(const std::string&, const models::gpt_parameters<float>&,
                                     const checkpoint_extras&);
template void save_checkpoint<double>(const std::string&, const models::gpt_parameters<double>&,
                                      const checkpoint_extras&);
template void checkpoint_reader::read(const std::string&, float*) const;
template void checkpoint_reader::read(const std::string&, double*) const;
template checkpoint<float> load_checkpoint<float>(const std::string&, optimiser_state);
template checkpoint<double> load_checkpoint<double>(const std::string&, optimiser_state);
}  // namespace xgrad::io
