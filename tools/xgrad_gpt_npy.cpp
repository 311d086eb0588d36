// xgrad-gpt-npy: the small GPT of a checkpoint on token ids stored as NumPy .npy files: logits, and with
// targets the loss and the gradient of every parameter, by the tape or by the hand-derived backward
// (docs/spec.md, "xgrad-gpt-npy"). Everything is computed in memory first; the outputs are then
// written to a temporary directory and renamed into place, so a run leaves either every output or none.
#include <signal.h>

#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "io/checkpoint.hpp"
#include "io/npy.hpp"
#include "tools/output_folder.hpp"
#include "tools/tool_errors.hpp"
#include "io/safetensors.hpp"
#include "models/gpt.hpp"
#include "models/gpt_manual.hpp"
#include "tools/gpt_npy_args.hpp"
#include "train/memory_estimate.hpp"  // inputs the machine cannot compute are refused first

namespace fs = std::filesystem;
using namespace xgrad;
using namespace xgrad::tools::gpt_npy;
using xgrad::tools::entry_exists;

namespace
{
const tools::error_rules errors = tools::npy_tool_rules(program);

// ---- inputs -----------------------------------------------------------------------------------------

template <class T>
struct problem
{
    io::checkpoint<T> model;
    ids_t tokens;
    std::optional<ids_t> targets;
};

// tokens.npy: (B, T) with B >= 1 and 1 <= T <= block_size, ids in [0, V).
ids_t load_tokens(const std::string& file, const models::gpt_config& c)
{
    ids_t tokens = npy::load_ids(file);
    const shape_t s = to_shape(tokens.shape());
    if (s.size() != 2)
    {
        throw input_error(file + ": shape " + shape_str(s) + " must be 2-D (B, T)");
    }
    if (s[0] == 0 || s[1] == 0)
    {
        throw input_error(file + ": shape " + shape_str(s) + " is empty (B and T must be at least 1)");
    }
    if (s[1] > c.block_size)
    {
        throw input_error(file + ": T = " + std::to_string(s[1]) + " (shape " + shape_str(s) +
                          ") is longer than the checkpoint's block_size = " + std::to_string(c.block_size));
    }
    for (std::size_t k = 0; k < tokens.size(); ++k)
    {
        const std::int64_t id = tokens.data()[k];
        if (id < 0 || static_cast<std::uint64_t>(id) >= c.vocab_size)
        {
            throw input_error(file + ": token " + std::to_string(id) + " at (" + std::to_string(k / s[1]) +
                              ", " + std::to_string(k % s[1]) + ") is outside [0, V) with V = " +
                              std::to_string(c.vocab_size) + " (the checkpoint's vocab_size)");
        }
    }
    return tokens;
}

// targets.npy: the shape of tokens, ids in [0, V) or -1.
ids_t load_targets(const std::string& file, const std::string& tokens_file, const shape_t& tokens_shape,
                   const models::gpt_config& c)
{
    ids_t targets = npy::load_ids(file);
    const shape_t s = to_shape(targets.shape());
    if (s != tokens_shape)
    {
        throw input_error(file + ": shape " + shape_str(s) + " must be the shape of " + tokens_file + " " +
                          shape_str(tokens_shape));
    }
    for (std::size_t k = 0; k < targets.size(); ++k)
    {
        const std::int64_t id = targets.data()[k];
        if (id < -1 || (id >= 0 && static_cast<std::uint64_t>(id) >= c.vocab_size))
        {
            throw input_error(file + ": target " + std::to_string(id) + " at (" + std::to_string(k / s[1]) +
                              ", " + std::to_string(k % s[1]) + ") is outside [0, V) with V = " +
                              std::to_string(c.vocab_size) + " and is not -1 (ignored)");
        }
    }
    return targets;
}

template <class T>
problem<T> load_problem(const options& o)
{
    const fs::path in(o.in);
    std::error_code ec;
    if (!fs::is_directory(in, ec))
    {
        throw input_error("--in " + o.in + ": " +
                          (entry_exists(in) ? "not a directory" : "no such directory"));
    }
    problem<T> p{io::load_checkpoint<T>(o.checkpoint, io::optimiser_state::skip), {}, {}};
    try
    {
        p.model.params.config = models::run_as(p.model.params.config, o.run_as);  // the same tensors
    }
    catch (const std::invalid_argument& e)
    {
        throw input_error(e.what());  // a variant flag this checkpoint cannot run: bad usage, exit 2
    }
    const std::string tokens_file = (in / "tokens.npy").string();
    p.tokens = load_tokens(tokens_file, p.model.params.config);
    if (entry_exists(in / "targets.npy"))
    {
        p.targets = load_targets((in / "targets.npy").string(), tokens_file, to_shape(p.tokens.shape()),
                                 p.model.params.config);
    }
    p.model.optimiser.clear();  // optimiser state plays no part here
    if (const std::string m = train::memory_shortfall(
          train::estimate_gpt_run(train::sizes_of(p.model.params.config), p.tokens.shape()[0],
                                  p.tokens.shape()[1], sizeof(T), p.targets.has_value()),
          train::available_memory(), "this input", "use fewer or shorter rows of tokens");
        !m.empty())
    {
        throw input_error(m);
    }
    return p;
}

// ---- the computation --------------------------------------------------------------------------------

template <class T>
struct results
{
    array<T> logits;                                      // (B, T, V)
    std::optional<array<T>> loss;                         // () with targets
    std::vector<std::pair<std::string, array<T>>> grads;  // with targets, by parameter name
};

template <class T>
results<T> run_tape(const problem<T>& p, bool detect_anomaly)
{
    tape<T> t;
    t.detect_anomaly(detect_anomaly);
    const ids_t* targets = p.targets ? &*p.targets : nullptr;
    const models::gpt_result<T> r = models::gpt_forward(t, p.model.params, p.tokens, targets);
    results<T> out{r.logits.value(), {}, {}};
    if (targets)
    {
        out.loss = r.loss.value();
        t.backward(r.loss);
        for (const parameter<T>& w : p.model.params.named_parameters())
        {
            out.grads.emplace_back(w.name(), w.grad());
        }
    }
    return out;
}

// The hand-derived forward and backward of models/gpt_manual.hpp: no tape.
template <class T>
results<T> run_manual(const problem<T>& p)
{
    const ids_t* targets = p.targets ? &*p.targets : nullptr;
    models::manual::gpt_forward_result<T> f = models::manual::gpt_forward(p.model.params, p.tokens, targets);
    results<T> out{std::move(f.logits), {}, {}};
    if (targets)
    {
        out.loss = array<T>::from_shape({});
        (*out.loss)() = f.loss;
        out.grads = models::manual::gpt_backward(f.cache).parameters();
    }
    return out;
}

// ---- outputs ----------------------------------------------------------------------------------------

// One output file: its name in --out and how to write it to a given path.
template <class T>
std::vector<tools::output_file> output_files(const results<T>& r, const std::map<std::string, std::string>& metadata)
{
    std::vector<tools::output_file> files{{"logits.npy", [&](const std::string& f) { npy::save(f, r.logits); }}};
    if (r.loss)
    {
        files.emplace_back("loss.npy", [&](const std::string& f) { npy::save(f, *r.loss); });
        files.emplace_back(
          "grads.safetensors",
          [&](const std::string& f)
          {
              io::safetensors_file grads{metadata, {}};
              for (const auto& [name, g] : r.grads)
              {
                  array<double> wide = array<double>::from_shape(to_shape(g.shape()));
                  std::copy(g.begin(), g.end(), wide.begin());
                  grads.tensors.emplace(
                    name, io::stored_tensor{std::is_same<T, float>::value ? "F32" : "F64", std::move(wide)});
              }
              io::write_safetensors(f, grads);
          });
    }
    return files;
}

template <class T>
std::string run(const options& o)
{
    const problem<T> p = load_problem<T>(o);
    const bool manual = o.grad == "manual";
    results<T> r;
    try
    {
        r = manual ? run_manual(p) : run_tape(p, o.detect_anomaly);
    }
    catch (const std::invalid_argument& e)
    {
        throw input_error(e.what());  // a check of the library's that the ones above did not anticipate
    }
    const std::vector<tools::output_file> files = output_files(r, p.model.metadata);
    try
    {
        tools::write_output_folder(o.out, files, program);
    }
    catch (const npy::error& e)
    {
        throw tools::output_error(e.what());
    }
    catch (const fs::filesystem_error& e)
    {
        throw tools::output_error(e.what());
    }
    catch (const tools::output_error&)
    {
        throw;
    }
    catch (const std::runtime_error& e)  // write_safetensors
    {
        throw tools::output_error(e.what());
    }
    const models::gpt_config& c = p.model.params.config;
    const shape_t s = to_shape(p.tokens.shape());
    std::string summary = "B=" + std::to_string(s[0]) + " T=" + std::to_string(s[1]) +
                          " V=" + std::to_string(c.vocab_size) + " L=" + std::to_string(c.layers) +
                          " d=" + std::to_string(c.d_model) + " H=" + std::to_string(c.heads) +
                          " G=" + std::to_string(c.kv_head_count()) + ", " + o.dtype;
    if (r.loss)
    {
        summary +=
          ", " + o.grad + " backward, loss " + std::to_string(static_cast<double>(r.loss->data()[0]));
    }
    return summary + ": wrote " + std::to_string(files.size()) + " files to " + o.out;
}
}  // namespace

int main(int argc, char** argv)
{
    signal(SIGPIPE, SIG_IGN);  // a closed stdout or stderr must not kill the process
    try
    {
        const command_line c = parse_arguments(std::vector<std::string>(argv + 1, argv + argc));
        if (c.help)
        {
            std::cout << c.help_text << std::flush;
            return std::cout ? 0 : 1;
        }
        const options& o = c.run;
        if (const std::string why = tools::output_folder_problem(o.out); !why.empty())
        {
            throw input_error(why);
        }
        const std::string summary = o.dtype == "float32" ? run<float>(o) : run<double>(o);
        std::cout << program << ": " << tools::escaped_line(summary) << std::endl;
        return 0;
    }
    catch (...)
    {
        return tools::fail_with_current_exception(errors);
    }
}
