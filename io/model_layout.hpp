// A GPT checkpoint seen at the tensor level (docs/spec.md, "Architecture variants" and "Converting
// checkpoints: xgrad-convert"): the sizes and variant keys of its metadata, and the tensor names and
// shapes they imply. The converters work on this alone, so they need none of the model code; also the
// folder outputs they write, built beside the final name and renamed into place.
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include "io/safetensors.hpp"
#include "models/gpt_config.hpp"

namespace xgrad::io
{
// The config of models/gpt_config.hpp, read from and written to a checkpoint's metadata.
struct model_layout : models::gpt_config
{
    // Reads the six sizes and the variant keys (a model key this build does not know, named in
    // "model_keys", is refused). Throws format_error starting with `source` and naming the key: missing or
    // non-integer sizes, d % H, H % G, an unknown value (with the values allowed).
    static model_layout from_metadata(const std::map<std::string, std::string>& metadata,
                                      const std::string& source);
    // Sets the sizes and every variant key that is not the default (and "model_keys"); a default-valued
    // key already present stays when it says the same, and is removed otherwise.
    void to_metadata(std::map<std::string, std::string>& metadata) const;

    std::size_t head_dim() const { return head_width(); }
    std::size_t hidden() const { return hidden_width(); }
    // Every parameter's name and shape, as the variant declares them (models::gpt_tensor_shapes).
    std::map<std::string, shape_t> tensor_shapes() const;
};

// `file`'s parameters must be exactly those of `layout` (tensors named "optim.*" are dropped first).
// Throws format_error starting with `source`, naming the first missing, unexpected or misshapen tensor.
void check_tensors(safetensors_file& file, const model_layout& layout, const std::string& source);

// Reads an xgrad checkpoint for conversion: strictly as a safetensors file, its layout checked, the
// optimiser's state dropped.
safetensors_file read_model_checkpoint(const std::string& path, model_layout& layout);

// A folder written atomically: the files go into a fresh folder beside `final_path`, each flushed to
// disk, and commit() renames it into place (which must be absent or an empty folder: an existing folder
// with files is refused, never replaced). Destroyed without commit(), the folder and its files vanish.
class staged_folder
{
public:
    explicit staged_folder(const std::string& final_path);
    ~staged_folder();
    staged_folder(const staged_folder&) = delete;
    staged_folder& operator=(const staged_folder&) = delete;
    std::string path(const std::string& name) const; // a file inside the staging folder
    void write_file(const std::string& name, const std::string& bytes) const;
    void commit();

private:
    std::string final_, staging_;
    bool committed_ = false;
};

std::string shape_text(const shape_t& shape); // "(3, 4)"
} // namespace xgrad::io
