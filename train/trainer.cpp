// The trainer's model-independent pieces (train/train_loop.hpp) and the GPT's run_training: the GPT as
// a module (its visit walk, forward, checkpoint), the variant check on --resume, sampling and pictures.
#include "train/trainer.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "io/checkpoint.hpp"
#include "kernels/parallel.hpp"
#include "models/gpt_decode.hpp"
#include "optim/optim.hpp"
#include "train/plots.hpp"
#include "train/progress.hpp"
#include "train/text_data.hpp"

namespace xgrad::train
{
namespace fs = std::filesystem;

namespace detail
{
void check_loop_options(const train_options& o)
{
    auto bad = [](const std::string& what) { throw std::invalid_argument(what); };
    if (o.data.empty() || o.out.empty())
    {
        bad("--data and --out are required");
    }
    if (o.steps < 1)
    {
        bad("--steps must be at least 1, got " + std::to_string(o.steps));
    }
    if (o.batch < 1 || o.model.block_size < 1 || o.model.layers < 1)
    {
        bad("--batch, --block and --layers must be at least 1");
    }
    if (!(o.lr > 0) || !std::isfinite(o.lr))
    {
        bad("--lr must be a positive number");
    }
    if ((o.warmup && *o.warmup < 0) || (o.decay_steps && *o.decay_steps < 1))
    {
        bad("--warmup must be >= 0 and --decay-steps >= 1");
    }
    if (o.threads < 1)
    {
        bad("--threads must be at least 1, got " + std::to_string(o.threads));
    }
    if (!(o.dropout >= 0 && o.dropout < 1))
    {
        bad("--dropout must be in [0, 1), got " + std::to_string(o.dropout));
    }
}

std::string checkpoint_path(const train_options& o) { return (fs::path(o.out) / "model.safetensors").string(); }

// Temporary checkpoints that a killed run left behind (".model.safetensors.tmp-XXXXXX"): never the
// checkpoint itself, which is only ever replaced whole by a rename.
void remove_stale_temporaries(const train_options& o)
{
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(o.out, ec))
    {
        const std::string name = entry.path().filename().string();
        if (name.rfind(".model.safetensors.tmp-", 0) == 0)
        {
            fs::remove(entry.path(), ec);
        }
    }
}

void check_vocabulary(const std::map<std::string, std::string>& metadata, const byte_vocabulary& vocab,
                      const std::string& path)
{
    const auto it = metadata.find("vocab");
    if (it == metadata.end() || byte_vocabulary::from_json(it->second).to_json() != vocab.to_json())
    {
        throw std::runtime_error("--resume: " + path + " was trained on another vocabulary than --data's");
    }
}

std::int64_t checkpoint_step(const std::map<std::string, std::string>& metadata, const std::string& path)
{
    const auto it = metadata.find("step");
    if (it == metadata.end() || it->second.empty() ||
        it->second.find_first_not_of("0123456789") != std::string::npos || it->second.size() > 12)
    {
        throw std::runtime_error("--resume: " + path + " has no valid \"step\" metadata");
    }
    return std::stoll(it->second);
}

io::checkpoint_extras extras_of(const optim::optimiser<float>& opt, const byte_vocabulary& vocab, std::int64_t step,
                                const train_options& o)
{
    io::checkpoint_extras e;
    e.metadata["vocab"] = vocab.to_json();
    e.metadata["step"] = std::to_string(step);
    e.metadata["seed"] = std::to_string(o.seed);
    e.metadata["batch"] = std::to_string(o.batch);
    for (const auto& [name, tensor] : opt.export_state())
    {
        e.tensors[name] = io::stored_tensor{"F32", array<double>(tensor)};
    }
    return e;
}

optim::named_tensors<float> optimiser_state(const std::map<std::string, io::stored_tensor>& tensors)
{
    optim::named_tensors<float> state;
    for (const auto& [name, tensor] : tensors)
    {
        state[name] = array<float>(tensor.values);
    }
    return state;
}

gradient_averager::gradient_averager(const std::vector<parameter<float>>& params)
{
    std::size_t total = 0;
    for (const auto& p : params)
    {
        total += p.value().size();
    }
    buffer_.resize(total);
}

void gradient_averager::average(std::vector<parameter<float>>& params, communicator& comm)
{
    if (comm.size() == 1)
    {
        return;
    }
    float* out = buffer_.data();
    for (auto& p : params)
    {
        out = std::copy(p.grad().begin(), p.grad().end(), out);
    }
    constexpr std::size_t bucket = std::size_t(1) << 22;  // 16 MiB of float per call
    for (std::size_t first = 0; first < buffer_.size(); first += bucket)
    {
        comm.allreduce_sum(buffer_.data() + first, std::min(bucket, buffer_.size() - first));
    }
    const float scale = 1.0f / static_cast<float>(comm.size());
    const float* in = buffer_.data();
    for (auto& p : params)
    {
        for (auto& g : p.grad())
        {
            g = *in++ * scale;
        }
    }
}

std::mt19937_64 dropout_generator(std::uint64_t seed, std::uint64_t step)
{
    std::seed_seq sequence{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
                           static_cast<std::uint32_t>(step), static_cast<std::uint32_t>(step >> 32), 0xd209u};
    return std::mt19937_64(sequence);
}

// Whether any process was interrupted (all of them stop at the same step).
bool stop_requested(const train_options& o, communicator& comm)
{
    float stop = o.interrupt && *o.interrupt ? 1.0f : 0.0f;
    if (comm.size() > 1)
    {
        comm.allreduce_sum(&stop, 1);
    }
    return stop > 0;
}

double median(std::vector<double> v)
{
    if (v.empty())
    {
        return 0;
    }
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
}
}  // namespace detail

namespace
{
// The GPT as a module for train_module: its parameters' walk, its forward, its checkpoint.
struct gpt_module
{
    models::gpt_parameters<float> params;

    template <class F>
    void visit(F&& f)
    {
        params.visit(std::forward<F>(f));
    }

    models::gpt_result<float> forward(tape<float>& t, const ids_t& tokens, const ids_t* targets,
                                      const models::forward_options& options) const
    {
        return models::gpt_forward(t, params, tokens, targets, options);
    }

    void save(const std::string& path, const io::checkpoint_extras& extras) const
    {
        io::save_checkpoint(path, params, extras);
    }

    // The checkpoint's sizes and variant must be the ones the flags ask for (one line naming the first
    // that differs), its tensors those of that model.
    io::checkpoint_extras resume_from(const std::string& path)
    {
        io::checkpoint<float> ck = io::load_checkpoint<float>(path);
        check_same_model(ck.params.config, params.config, path);
        params = std::move(ck.params);
        io::checkpoint_extras extras;
        extras.metadata = std::move(ck.metadata);
        extras.tensors = std::move(ck.optimiser);
        return extras;
    }

    static void check_same_model(const models::gpt_config& have, const models::gpt_config& want, const std::string& path)
    {
        auto differs = [&](const char* flag, std::size_t a, std::size_t b) {
            if (a != b)
            {
                throw std::invalid_argument("--resume: " + path + " has " + flag + " " + std::to_string(a) +
                                         " but the flags ask for " + std::to_string(b));
            }
        };
        differs("--layers", have.layers, want.layers);
        differs("--d-model", have.d_model, want.d_model);
        differs("--heads", have.heads, want.heads);
        differs("--kv-heads", have.kv_head_count(), want.kv_head_count());
        differs("--block", have.block_size, want.block_size);
        const auto a = models::variant_metadata(have), b = models::variant_metadata(want);
        for (const char* key : models::variant_keys)
        {
            if (a.at(key) != b.at(key))
            {
                throw std::invalid_argument("--resume: " + path + " has " + key + " = " + a.at(key) +
                                         " but the flags ask for " + key + " = " + b.at(key));
            }
        }
    }
};

void draw_pictures(const models::gpt_parameters<float>& params, const text_corpus& data, const train_options& o, std::FILE* progress)
{
    const std::string log = (fs::path(o.out) / "log.csv").string();
    const std::string title = "L=" + std::to_string(params.config.layers) + " d=" + std::to_string(params.config.d_model) +
                              " H=" + std::to_string(params.config.heads) + " G=" + std::to_string(params.config.kv_head_count());
    std::vector<plot_note> notes;
    notes.push_back(plot_loss_curves({log}, {title}, (fs::path(o.out) / "loss.png").string(), "xgrad-train: " + title));
    const std::string text = prose_sample(data, std::min<std::size_t>(params.config.block_size, 32));
    const auto ids = data.vocabulary.encode(text);
    ids_t tokens = ids_t::from_shape({1, ids.size()});
    std::copy(ids.begin(), ids.end(), tokens.begin());
    models::kv_cache<float> cache;
    std::vector<array<float>> weights;
    models::gpt_decode(params, tokens, cache, &weights);
    std::vector<array<double>> maps;
    for (const auto& w : weights)
    {
        maps.push_back(xt::view(array<double>(w), 0));  // (H, T, T) of the single sequence
    }
    notes.push_back(plot_attention_maps(maps, text, (fs::path(o.out) / "attention.png").string(),
                                        "attention per head: " + title));
    for (const auto& note : notes)
    {
        if (note && progress)
        {
            std::fprintf(progress, "%s\n", note->c_str());
        }
    }
}

std::string sample_text(const models::gpt_parameters<float>& params, const text_corpus& data, const train_options& o)
{
    const std::vector<std::int32_t> prompt{data.validation.front()};
    models::sampling_options so;
    so.tokens = o.sample_tokens;
    so.temperature = 0.8;
    so.top_k = 0;
    so.seed = o.seed;
    return data.vocabulary.decode(prompt) + data.vocabulary.decode(models::sample(params, prompt, so));
}
}  // namespace

train_summary run_training(const train_options& o, std::FILE* progress, bool terminal, communicator& comm)
{
    detail::check_loop_options(o);
    models::gpt_config probe = o.model;
    probe.vocab_size = 1;
    probe.validate("xgrad-train");  // d % H, H % G, zero sizes, dh odd with RoPE
    set_num_threads(o.threads);
    const text_corpus data = text_corpus::load(o.data, o.model.block_size);
    models::gpt_config config = o.model;
    config.vocab_size = data.vocabulary.size();

    gpt_module model;
    model.params = o.resume ? models::gpt_parameters<float>::declare(config)
                            : models::gpt_parameters<float>::init(config, o.seed);
    train_summary summary = train_module(model, data, o, progress, terminal, comm);
    const bool finished = summary.last_step > summary.first_step && !summary.interrupted;
    if (comm.rank() == 0 && finished && o.sample_tokens > 0)
    {
        summary.sample = sample_text(model.params, data, o);
    }
    if (comm.rank() == 0 && finished && o.plots)
    {
        draw_pictures(model.params, data, o, progress);
    }
    return summary;
}

train_summary run_training(const train_options& options, std::FILE* progress, bool terminal)
{
    communicator single;
    return run_training(options, progress, terminal, single);
}
}  // namespace xgrad::train
