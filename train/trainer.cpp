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
using model = models::gpt_parameters<float>;
using clock_type = std::chrono::steady_clock;

namespace
{
void check_options(const train_options& o)
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
    if (!(o.time_limit_s >= 0) || !std::isfinite(o.time_limit_s))
    {
        bad("--time must be a number of seconds >= 0 (0: no limit)");
    }
    if (o.threads < 1)
    {
        bad("--threads must be at least 1, got " + std::to_string(o.threads));
    }
    models::gpt_config c = o.model;
    c.vocab_size = 1;
    c.validate("xgrad-train");  // d % H, H % G, zero sizes
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

// The model's sizes in a checkpoint must be the ones asked for, and its vocabulary the data's.
void check_resumable(const io::checkpoint<float>& ck, const models::gpt_config& wanted, const tokenizer& vocab,
                     const std::string& path)
{
    const models::gpt_config& c = ck.params.config;
    auto differs = [&](const char* flag, std::size_t have, std::size_t want) {
        if (have != want)
        {
            throw std::runtime_error("--resume: " + path + " has " + flag + " " + std::to_string(have) +
                                     " but the flags ask for " + std::to_string(want));
        }
    };
    differs("--layers", c.layers, wanted.layers);
    differs("--d-model", c.d_model, wanted.d_model);
    differs("--heads", c.heads, wanted.heads);
    differs("--kv-heads", c.kv_head_count(), wanted.kv_head_count());
    differs("--block", c.block_size, wanted.block_size);
    metadata_map ours;
    vocab.to_metadata(ours);
    for (const auto& [key, value] : ours)
    {
        const auto it = ck.metadata.find(key);
        if (it == ck.metadata.end() || it->second != value)
        {
            throw std::runtime_error("--resume: " + path + " was trained with another tokenizer or vocabulary than "
                                     "--data and --tokenizer give (metadata \"" + key + "\")");
        }
    }
}

std::int64_t checkpoint_step(const io::checkpoint<float>& ck, const std::string& path)
{
    const auto it = ck.metadata.find("step");
    if (it == ck.metadata.end() || it->second.empty() ||
        it->second.find_first_not_of("0123456789") != std::string::npos || it->second.size() > 12)
    {
        throw std::runtime_error("--resume: " + path + " has no valid \"step\" metadata");
    }
    return std::stoll(it->second);
}

io::checkpoint_extras extras_of(const optim::optimiser<float>& opt, const tokenizer& vocab, std::int64_t step,
                                const train_options& o)
{
    io::checkpoint_extras e;
    vocab.to_metadata(e.metadata);
    e.metadata["step"] = std::to_string(step);
    e.metadata["seed"] = std::to_string(o.seed);
    e.metadata["batch"] = std::to_string(o.batch);
    for (const auto& [name, tensor] : opt.export_state())
    {
        e.tensors[name] = io::stored_tensor{"F32", array<double>(tensor)};
    }
    return e;
}

optim::named_tensors<float> optimiser_state(const io::checkpoint<float>& ck)
{
    optim::named_tensors<float> state;
    for (const auto& [name, tensor] : ck.optimiser)
    {
        state[name] = array<float>(tensor.values);
    }
    return state;
}

// Mean loss over the validation windows, B at a time, each batch weighted by its windows. Under MPI
// every process takes every world-th batch and the sums are added up.
double validation_loss(const model& params, const text_corpus& data, const std::vector<std::size_t>& offsets,
                       std::size_t batch, communicator& comm)
{
    const std::size_t block = params.config.block_size;
    double total = 0;
    std::size_t index = 0;
    for (std::size_t first = 0; first < offsets.size(); first += batch, ++index)
    {
        if (index % static_cast<std::size_t>(comm.size()) != static_cast<std::size_t>(comm.rank()))
        {
            continue;
        }
        const token_batch b = make_batch(data.validation, offsets, block, first, batch);
        tape<float> t;
        auto guard = t.no_grad();
        const auto r = models::gpt_forward(t, params, b.inputs, &b.targets);
        total += static_cast<double>(r.loss.value()()) * static_cast<double>(b.inputs.shape()[0]);
    }
    comm.allreduce_sum(&total, 1);
    return total / static_cast<double>(offsets.size());
}

// Averages the gradients of every process: one contiguous buffer, summed in a few large calls.
class gradient_averager
{
public:
    explicit gradient_averager(const std::vector<parameter<float>>& params)
    {
        std::size_t total = 0;
        for (const auto& p : params)
        {
            total += p.value().size();
        }
        buffer_.resize(total);
    }

    void average(std::vector<parameter<float>>& params, communicator& comm)
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

private:
    std::vector<float> buffer_;
};

void draw_pictures(const model& params, const text_corpus& data, const train_options& o, std::FILE* progress)
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
    notes.push_back(plot_bits_per_byte({log}, {title}, (fs::path(o.out) / "bpb.png").string(),
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

// Whether any process was interrupted, and whether any has used up --time (all stop at the same step).
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
}  // namespace

train_summary run_training(const train_options& o, std::FILE* progress, bool terminal, communicator& comm)
{
    check_options(o);
    set_num_threads(o.threads);
    const text_corpus data = text_corpus::load(o.data, o.model.block_size, tokenizer_spec::parse(o.tokenizer));
    models::gpt_config config = o.model;
    config.vocab_size = data.tokens->size();
    const bool leader = comm.rank() == 0;

    model params;
    std::int64_t first_step = 0;
    const std::string ck_path = checkpoint_path(o);
    io::checkpoint<float> resumed;
    if (o.resume)
    {
        if (!fs::exists(ck_path))
        {
            throw std::runtime_error("--resume: no checkpoint at " + ck_path);
        }
        resumed = io::load_checkpoint<float>(ck_path);
        check_resumable(resumed, config, *data.tokens, ck_path);
        params = resumed.params;
        first_step = checkpoint_step(resumed, ck_path);
    }
    else
    {
        params = model::init(config, o.seed);
    }
    std::vector<parameter<float>> named = params.named_parameters();
    optim::adam<float> opt(named, optim::adamw_options(o.lr, o.weight_decay, 0.9, o.beta2));
    if (o.resume)
    {
        opt.import_state(optimiser_state(resumed));
        resumed = {};
    }
    const optim::lr_schedule schedule = optim::make_lr_schedule(o.lr, o.steps, o.warmup, o.decay_steps);

    train_summary summary;
    summary.first_step = first_step;
    summary.last_step = std::max(first_step, o.steps);
    summary.parameters = models::gpt_parameter_count(config);
    if (first_step >= o.steps)
    {
        return summary;  // nothing left to do
    }
    std::optional<training_log> log;
    if (leader)
    {
        fs::create_directories(o.out);
        remove_stale_temporaries(o);
        log.emplace((fs::path(o.out) / "log.csv").string(), o.resume, static_cast<std::uint64_t>(first_step));
    }
    std::optional<progress_display> display;
    if (leader && progress)
    {
        display.emplace(progress, static_cast<std::uint64_t>(first_step), static_cast<std::uint64_t>(o.steps), terminal,
                        std::max<std::uint64_t>(1, static_cast<std::uint64_t>(o.steps) / 40));
    }

    const std::size_t block = config.block_size, world = static_cast<std::size_t>(comm.size());
    const auto val_offsets = validation_offsets(data.validation.size(), block, o.eval_windows);
    gradient_averager averager(named);
    std::vector<double> rates;  // the last rate_window steps' tokens/s (bounded: memory stays flat)
    constexpr std::size_t rate_window = 1000;
    const auto start = clock_type::now();
    for (std::int64_t s = first_step + 1; s <= o.steps; ++s)
    {
        const auto step_start = clock_type::now();
        // The global batch of world * B windows, drawn as one process would; this rank takes its rows.
        const auto offsets = training_offsets(data.train.size(), block, o.batch * world, o.seed, static_cast<std::uint64_t>(s));
        const token_batch b = make_batch(data.train, offsets, block, static_cast<std::size_t>(comm.rank()) * o.batch, o.batch);
        tape<float> t;
        t.detect_anomaly(o.detect_anomaly);
        const auto r = models::gpt_forward(t, params, b.inputs, &b.targets);
        t.backward(r.loss);
        float loss = r.loss.value()();
        if (world > 1)
        {
            comm.allreduce_sum(&loss, 1);
            loss /= static_cast<float>(world);
        }
        averager.average(named, comm);
        step_record rec;
        rec.step = static_cast<std::uint64_t>(s);
        rec.train_loss = loss;
        rec.grad_norm = optim::clip_grad_norm(named, o.clip);
        rec.lr = schedule.at(s);
        opt.set_lr(rec.lr);
        opt.step();
        opt.zero_grad();
        if (!std::isfinite(loss))
        {
            throw std::runtime_error("the training loss became " + std::to_string(loss) + " at step " + std::to_string(s) +
                                     " (try a lower --lr, or --detect-anomaly to find the op)");
        }
        const auto [stop, out_of_time] =
            stop_requested(o, comm, std::chrono::duration<double>(clock_type::now() - start).count());
        const bool last = s == o.steps || out_of_time;
        if ((o.eval_every > 0 && s % o.eval_every == 0) || last)
        {
            rec.val_loss = validation_loss(params, data, val_offsets, o.batch, comm);
            rec.val_bpb = data.validation_bits_per_byte(*rec.val_loss);
            summary.val_loss = *rec.val_loss;
        }
        const double step_s = std::chrono::duration<double>(clock_type::now() - step_start).count();
        rec.tokens_per_s = static_cast<double>(o.batch * world * block) / step_s;
        rec.elapsed_s = std::chrono::duration<double>(clock_type::now() - start).count();
        rec.rss_mib = resident_mib();
        if (rates.size() < rate_window)
        {
            rates.push_back(rec.tokens_per_s);
        }
        else
        {
            rates[static_cast<std::size_t>(s) % rate_window] = rec.tokens_per_s;
        }
        summary.train_loss = loss;
        if (leader)
        {
            // The row first: a run killed between the two resumes from the older checkpoint, which cuts
            // the log back to its own step, so no step is ever missing or doubled.
            log->write(rec);
            if ((o.save_every > 0 && s % o.save_every == 0) || last || stop)
            {
                io::save_checkpoint(ck_path, params, extras_of(opt, *data.tokens, s, o));
            }
            if (display)
            {
                display->show(rec);
            }
        }
        if (stop || out_of_time)
        {
            summary.interrupted = stop;
            summary.last_step = s;
            break;
        }
    }
    if (display)
    {
        display->finish();
    }
    summary.tokens_per_s = median(rates);
    if (leader && o.sample_tokens > 0 && !summary.interrupted)
    {
        const std::vector<std::int32_t> prompt{data.validation.front()};
        models::sampling_options so;
        so.tokens = o.sample_tokens;
        so.temperature = 0.8;
        so.top_k = 0;
        so.seed = o.seed;
        summary.sample = data.tokens->decode(prompt) + data.tokens->decode(models::sample(params, prompt, so));
    }
    if (leader && o.plots && !summary.interrupted)
    {
        draw_pictures(params, data, o, progress);
    }
    return summary;
}

train_summary run_training(const train_options& options, std::FILE* progress, bool terminal)
{
    communicator single;
    return run_training(options, progress, terminal, single);
}
}  // namespace xgrad::train
