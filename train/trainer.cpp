// The trainer's model-independent pieces (train/train_loop.hpp) and the GPT's run_training: the GPT as
// a module (its visit walk, forward, checkpoint), the variant check on --resume, sampling and pictures.
#include "train/trainer.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
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
#include "train/option_error.hpp"
#include "train/data_memory.hpp"
#include "train/memory_estimate.hpp"  // refuse a run the machine cannot hold, before allocating

namespace xgrad::train
{
namespace fs = std::filesystem;

namespace detail
{
namespace
{
// At most 40 characters of a value someone typed, each outside printable ASCII as '?': one clean line.
std::string printable(const std::string& text)
{
    std::string shown = text.substr(0, 40);
    for (char& ch : shown)
    {
        ch = ch >= 32 && ch < 127 ? ch : '?';
    }
    return shown;
}
}  // namespace

void check_loop_options(const train_options& o)
{
    if (o.data.empty() || o.out.empty())
    {
        throw option_error("{} and {} are required", {"data", "out"});
    }
    if (o.steps < 1)
    {
        throw option_error("{} must be at least 1, got " + std::to_string(o.steps), {"steps"});
    }
    if (o.batch < 1 || o.model.block_size < 1 || o.model.layers < 1)
    {
        throw option_error("{}, {} and {} must be at least 1", {"batch", "model.block_size", "model.layers"});
    }
    if (!(o.lr > 0) || !std::isfinite(o.lr))
    {
        throw option_error("{} must be a positive number", {"lr"});
    }
    if ((o.warmup && *o.warmup < 0) || (o.decay_steps && *o.decay_steps < 1))
    {
        throw option_error("{} must be >= 0 and {} >= 1", {"warmup", "decay_steps"});
    }
    constexpr int max_threads = 1024;  // more than any machine's cores; beyond it thread creation fails
    if (o.threads < 1 || o.threads > max_threads)
    {
        throw option_error("{} must be from 1 to " + std::to_string(max_threads) + ", got " +
                             std::to_string(o.threads),
                           {"threads"});
    }
    if (!(o.dropout >= 0 && o.dropout < 1))
    {
        throw option_error("{} must be in [0, 1), got " + std::to_string(o.dropout), {"dropout"});
    }
    if (!(o.time_limit_s >= 0) || !std::isfinite(o.time_limit_s))
    {
        throw option_error("{} must be a number of seconds >= 0 (0: no limit)", {"time_limit_s"});
    }
    if (o.optimizer != "adamw" && o.optimizer != "muon")
    {
        throw option_error("{} '" + option_error::literal(printable(o.optimizer)) + "' is not one of adamw, muon",
                           {"optimizer"});
    }
    if (!(o.muon_lr > 0) || !std::isfinite(o.muon_lr))
    {
        throw option_error("{} must be a positive number", {"muon_lr"});
    }
    if (!(o.clip > 0) || !std::isfinite(o.clip))
    {
        throw option_error("{} must be a positive number (the largest global gradient norm)", {"clip"});
    }
    if (o.eval_windows < 1)
    {
        throw option_error("{} must be at least 1", {"eval_windows"});
    }
    if (o.sample_tokens > models::max_sampled_tokens)
    {
        throw option_error("{} must be at most " + std::to_string(models::max_sampled_tokens) + ", got " +
                               std::to_string(o.sample_tokens),
                           {"sample_tokens"});
    }
    if (o.sharpness_iters < 1)
    {
        throw option_error("{} must be at least 1", {"sharpness_iters"});
    }
    if (!(o.muon_momentum >= 0 && o.muon_momentum < 1))
    {
        throw option_error("{} must be in [0, 1), got " + std::to_string(o.muon_momentum), {"muon_momentum"});
    }
    tokenizer_spec::parse(o.tokenizer);  // names --tokenizer and the forms allowed
}

void check_same_optimizer(const std::map<std::string, std::string>& metadata, const train_options& o,
                          const std::string& path)
{
    const auto it = metadata.find("optimizer");
    const std::string trained_with = it == metadata.end() ? "adamw" : it->second;
    if (trained_with != o.optimizer)
    {
        throw option_error("{}: " + option_error::literal(path) + " was trained with {} " +
                               option_error::literal(printable(trained_with)) + ", not " + o.optimizer +
                               " (a run resumes with the optimiser it started with)",
                           {"resume", "optimizer"});
    }
}

// The model's description says which parameters are matrices inside the model (the GPT's attn.W_* and
// mlp.W_*, not its embeddings or head): models::parameter_role.
bool muon_takes(const models::declaration& d) { return d.role == models::parameter_role::matrix; }

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

void check_vocabulary(const std::map<std::string, std::string>& metadata, const tokenizer& vocab,
                      const std::string& path)
{
    metadata_map ours;
    vocab.to_metadata(ours);
    for (const auto& [key, value] : ours)
    {
        const auto it = metadata.find(key);
        if (it == metadata.end() || it->second != value)
        {
            throw option_error("{}: " + option_error::literal(path) + " was trained with another tokenizer or vocabulary than {} and {} give "
                               "(metadata \"" + option_error::literal(key) + "\")",
                               {"resume", "data", "tokenizer"}, option_problem::disagrees_with_files);
        }
    }
}

std::int64_t checkpoint_step(const std::map<std::string, std::string>& metadata, const std::string& path)
{
    const auto it = metadata.find("step");
    if (it == metadata.end() || it->second.empty() ||
        it->second.find_first_not_of("0123456789") != std::string::npos || it->second.size() > 12)
    {
        // A malformed checkpoint, which the tools refuse with exit status 2 (docs/spec.md, "Exit statuses").
        throw option_error("{}: " + option_error::literal(path) + " has no valid \"step\" metadata", {"resume"},
                           option_problem::bad_value);
    }
    return std::stoll(it->second);
}

io::checkpoint_extras extras_of(const optim::named_tensors<float>& optimiser_state, const tokenizer& vocab,
                                std::int64_t step, const train_options& o)
{
    io::checkpoint_extras e;
    vocab.to_metadata(e.metadata);
    e.metadata["step"] = std::to_string(step);
    e.metadata["seed"] = std::to_string(o.seed);
    e.metadata["batch"] = std::to_string(o.batch);
    if (o.optimizer != "adamw")
    {
        e.metadata["optimizer"] = o.optimizer;  // absent for AdamW: its checkpoints stay as they were
    }
    for (const auto& [name, tensor] : optimiser_state)
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

std::pair<bool, bool> stop_requested(const train_options& o, communicator& comm, double elapsed_s)
{
    float stop[2] = {o.interrupt && *o.interrupt ? 1.0f : 0.0f,
                     o.time_limit_s > 0 && elapsed_s >= o.time_limit_s ? 1.0f : 0.0f};
    if (comm.size() > 1)
    {
        comm.allreduce_sum(stop, 2);
    }
    return {stop[0] > 0, stop[1] > 0};
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
        models::gpt_config wanted = want;
        wanted.vocab_size = have.vocab_size;  // the tokenizer's, checked apart
        std::string trained;
        const std::string key = models::first_difference(have, wanted, &trained);
        if (!key.empty())
        {
            std::string asked;
            models::first_difference(wanted, have, &asked);
            if (trained == "true" || trained == "false")
            {
                // A bool's flag sets the opposite of its default (--untied-head sets tied_head false): the
                // values are the key's, the flag named after them.
                throw option_error("{}: " + option_error::literal(path) + " was trained with " + key + " = " +
                                       trained + ", not " + asked + " ({})",
                                   {"resume", "model." + key});
            }
            throw option_error("{}: " + option_error::literal(path) + " was trained with {} " +
                                   option_error::literal(trained) + ", not " + option_error::literal(asked),
                               {"resume", "model." + key});
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
    const auto ids = data.tokens->encode_allowing_unknown(text);
    std::string labels;  // one character per token: its first
    for (std::int32_t id : ids)
    {
        labels += data.tokens->piece(static_cast<std::size_t>(id)).substr(0, 1);
    }
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
    if (o.sharpness_every > 0)
    {
        notes.push_back(plot_sharpness(log, (fs::path(o.out) / "sharpness.png").string(),
                                       "xgrad-train: sharpness, " + title));
    }
    notes.push_back(plot_bits_per_byte({log}, {title + " " + o.tokenizer}, (fs::path(o.out) / "bpb.png").string(),
                                       "xgrad-train: validation bits per byte, " + title));
    notes.push_back(plot_attention_maps(maps, labels, (fs::path(o.out) / "attention.png").string(),
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
    return data.tokens->decode(prompt) + data.tokens->decode(models::sample(params, prompt, so));
}
}  // namespace

namespace
{
// The memory check of run_training, its messages naming the max_memory option wherever they say "{}".
void require_memory_option(const memory_estimate& need, const std::string& max_memory)
{
    const auto naming_max_memory = [](const std::string& format) {
        std::vector<std::string> fields;
        for (std::size_t at = format.find("{}"); at != std::string::npos; at = format.find("{}", at + 2))
        {
            fields.push_back("max_memory");
        }
        return option_error(format, fields);
    };
    memory_budget budget;
    try
    {
        budget = parse_memory_budget(max_memory, "max_memory");
    }
    catch (const std::invalid_argument& e)
    {
        throw naming_max_memory("{}" + option_error::literal(std::string(e.what()).substr(std::strlen("max_memory"))));
    }
    if (budget.source == "max_memory")
    {
        budget.source = "{}";
    }
    const std::string refusal =
        memory_shortfall(need, budget, "this run", "use a smaller model or batch, or {} BYTES to insist");
    if (!refusal.empty())
    {
        throw naming_max_memory(refusal);
    }
}
}  // namespace

train_summary run_training(const train_options& o, std::FILE* progress, bool terminal, communicator& comm)
{
    detail::check_loop_options(o);
    models::gpt_config probe = o.model;
    probe.vocab_size = 1;
    probe.validate("train_options.model");  // d % H, H % G, zero sizes, dh odd with RoPE
    set_num_threads(o.threads);
    const tokenizer_spec tokenizer = tokenizer_spec::parse(o.tokenizer);
    require_data_memory(o.data, o.max_memory, tokenizer);  // before reading: the text and its tokens must fit
    const text_corpus data = text_corpus::load(o.data, o.model.block_size, tokenizer);
    models::gpt_config config = o.model;
    config.vocab_size = data.tokens->size();
    require_memory_option(with_training_data(estimate_training(sizes_of(config), o.batch,
                                                               static_cast<std::uint64_t>(o.threads)),
                                             data),
                          o.max_memory);

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
