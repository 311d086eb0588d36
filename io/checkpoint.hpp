// Checkpoints on safetensors (docs/spec.md, "Checkpoint file: safetensors"). For the GPT: every parameter
// under its name in the dtype of T, the model's config as metadata (models/gpt_config.hpp: the sizes always,
// the variant's keys where it is not the default model), any
// other metadata ("vocab", "step", ...) and the optimiser's state as tensors named "optim.*". Loading
// checks the file against the tensors the metadata's model declares. For any module (models/module.hpp):
// save_module and load_module do the same with the tensors its visit walk declares.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "io/safetensors.hpp"
#include "models/gpt.hpp"

namespace xgrad::io
{
// What a checkpoint holds besides the parameters.
struct checkpoint_extras
{
    std::map<std::string, std::string> metadata;   // every key but the six sizes
    std::map<std::string, stored_tensor> tensors;  // optimiser state: every name begins with "optim."
};

template <class T>
struct checkpoint
{
    models::gpt_parameters<T> params;                // converted to T, gradients zero
    std::map<std::string, std::string> metadata;     // all of it, the six sizes included
    std::map<std::string, stored_tensor> optimiser;  // the "optim.*" tensors as stored
};

// Writes `params` (F32 for float, F64 for double) with its sizes and `extras`, atomically (see
// write_safetensors). Throws std::invalid_argument naming "save_checkpoint" when an extra tensor's name
// does not begin with "optim." or an extra metadata key names a size with another value, and
// std::runtime_error naming the path when it cannot write.
template <class T>
void save_checkpoint(const std::string& path, const models::gpt_parameters<T>& params,
                     const checkpoint_extras& extras = {});

// Whether load_checkpoint reads the optimiser's "optim.*" tensors (a resume) or leaves them on disk
// (sampling, evaluation: they are checked by name in the header all the same).
enum class optimiser_state
{
    load,
    skip,
};

// A checkpoint open for reading and checked strictly on its header, before any tensor is read: every size
// key present and a decimal integer, sizes that make a valid model (gpt_config::validate), every parameter
// present with exactly docs/spec.md's shape, no other tensor except "optim.*" ones. Throws format_error
// naming the file, the tensor and the shapes. A caller that keeps the parameters in buffers of its own
// (the decoder, xgrad-sample) reads each one straight into them; load_checkpoint reads them all.
class checkpoint_reader
{
public:
    explicit checkpoint_reader(const std::string& path);
    const models::gpt_config& config() const { return config_; }
    const std::map<std::string, std::string>& metadata() const { return file_.metadata(); }
    // Tensor `name` (a parameter by docs/spec.md's name) into `out`, as file().read does.
    template <class T>
    void read(const std::string& name, T* out) const;
    // read<T> as a function (name, out), for the decoder's constructor (a models::parameter_source<T>);
    // the reader must outlive it.
    template <class T>
    auto source() const
    {
        return [this](const std::string& name, T* out) { read(name, out); };
    }
    const safetensors_reader& file() const { return file_; }

private:
    safetensors_reader file_;
    models::gpt_config config_;
};

// The checkpoint_reader's file with every parameter read, each straight into its array, and the optimiser's
// "optim.*" tensors as stored unless skipped. Throws as checkpoint_reader does.
template <class T>
checkpoint<T> load_checkpoint(const std::string& path, optimiser_state optimiser = optimiser_state::load);

// The model a checkpoint's metadata declares (sizes and variant), checked as load_checkpoint checks them.
models::gpt_config config_from_metadata(const std::string& path,
                                        const std::map<std::string, std::string>& metadata);

// ---- any module ----------------------------------------------------------------------------------

// A parameter as stored (F32 for float, F64 for double), and a stored tensor as a parameter named `name`.
template <class T>
stored_tensor to_stored(const parameter<T>& p);
template <class T>
parameter<T> from_stored(const stored_tensor& t, const std::string& name);

// Writes `tensors` with `metadata` and `extras` atomically. Throws std::invalid_argument naming
// "save_module" when an extra tensor is not "optim.*" or an extra metadata key disagrees with `metadata`.
void write_module_file(const std::string& path, const std::vector<std::pair<std::string, stored_tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata, const checkpoint_extras& extras);

// Checks a file's header strictly against `declared`: every declared tensor present with its shape,
// nothing else but "optim.*", and each key of `metadata` present with that value. Throws format_error
// naming the file and the tensor or key (what the file has, what the model wants).
void check_module_file(const safetensors_reader& file,
                       const std::vector<std::pair<std::string, models::declaration>>& declared,
                       const std::map<std::string, std::string>& metadata);
// The file, checked as check_module_file checks it, with every tensor read.
safetensors_file read_module_file(const std::string& path,
                                  const std::vector<std::pair<std::string, models::declaration>>& declared,
                                  const std::map<std::string, std::string>& metadata);

// A module's parameters and `metadata` (what describes its architecture) plus `extras`, atomically.
template <class Model>
void save_module(const std::string& path, const Model& model, const std::map<std::string, std::string>& metadata,
                 const checkpoint_extras& extras = {})
{
    std::vector<std::pair<std::string, stored_tensor>> tensors;
    models::visit_parameters(model, [&tensors](const std::string& name, const auto& p, const models::declaration&) {
        tensors.emplace_back(name, to_stored(p));
    });
    write_module_file(path, tensors, metadata, extras);
}

// Fills `model`'s declared parameters from a file written by save_module for the same architecture
// (`metadata` must match the file's); returns the file's other metadata and its "optim.*" tensors.
template <class Model>
checkpoint_extras load_module(const std::string& path, Model& model, const std::map<std::string, std::string>& metadata)
{
    const safetensors_reader file(path);
    check_module_file(file, models::declared_parameters(model), metadata);
    model.visit([&file](const std::string& name, auto& p, const models::declaration&) {
        using T = typename std::decay_t<decltype(p.value())>::value_type;
        p = parameter<T>(file.read<T>(name), name);
    });
    checkpoint_extras extras;
    extras.metadata = file.metadata();
    for (const auto& [name, t] : file.tensors())
    {
        if (name.compare(0, 6, "optim.") == 0)
        {
            extras.tensors.emplace(name, stored_tensor{t.dtype, file.read<double>(name)});
        }
    }
    return extras;
}
}  // namespace xgrad::io
