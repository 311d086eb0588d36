// train_module's definition (included by train/trainer.hpp): the training loop for any module, and the
// model-independent pieces it calls (defined in train/trainer.cpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "autodiff/grad.hpp"
#include "optim/muon.hpp"
#include "optim/optim.hpp"
#include "train/folder_lock.hpp"
#include "train/progress.hpp"

namespace xgrad::train
{
namespace detail
{
// Throws std::invalid_argument naming the flag. Checks every option but the model's sizes.
void check_loop_options(const train_options& o);
std::string checkpoint_path(const train_options& o);
// Temporary checkpoints a killed run left behind (never the checkpoint itself).
void remove_stale_temporaries(const train_options& o);
// The "step" a checkpoint records, and that it was trained with `vocab`; std::runtime_error otherwise.
std::int64_t checkpoint_step(const std::map<std::string, std::string>& metadata, const std::string& path);
void check_vocabulary(const std::map<std::string, std::string>& metadata, const tokenizer& vocab,
                      const std::string& path);
// The metadata (the tokenizer's and the optimiser's among it) and the optimiser's state tensors a
// checkpoint stores beside the parameters.
io::checkpoint_extras extras_of(const optim::named_tensors<float>& optimiser_state, const tokenizer& vocab,
                                std::int64_t step, const train_options& o);
// That the checkpoint to resume was trained with o.optimizer (its metadata "optimizer"; none: adamw).
void check_same_optimizer(const std::map<std::string, std::string>& metadata, const train_options& o,
                          const std::string& path);
// Whether --optimizer muon updates this parameter with Muon: the matrices the model declares inside its
// blocks (docs/training.md, "Muon").
bool muon_takes(const models::declaration& d);

// The run's optimiser: AdamW alone, or under --optimizer muon Muon on the parameters muon_takes and AdamW
// on the rest.
template <class Model>
optim::muon_with_adamw<float> make_optimiser(const Model& model, const std::vector<parameter<float>>& named,
                                              const train_options& o)
{
    std::set<std::string> for_muon;
    for (const auto& [name, declared] : models::declared_parameters(model))
    {
        if (o.optimizer == "muon" && muon_takes(declared))
        {
            for_muon.insert(name);
        }
    }
    return optim::muon_with_adamw<float>(
        named, [&for_muon](const parameter<float>& p) { return for_muon.count(p.name()) > 0; },
        optim::adamw_options(o.lr, o.weight_decay, 0.9, o.beta2), optim::muon_options{o.muon_lr, o.muon_momentum});
}
optim::named_tensors<float> optimiser_state(const std::map<std::string, io::stored_tensor>& tensors);
// Averages the gradients of every process: one contiguous buffer, summed in a few large calls.
class gradient_averager
{
public:
    explicit gradient_averager(const std::vector<parameter<float>>& params);
    void average(std::vector<parameter<float>>& params, communicator& comm);

private:
    std::vector<float> buffer_;
};
// Whether any process was interrupted, and whether any has trained for --time seconds (all stop at the
// same step).
std::pair<bool, bool> stop_requested(const train_options& o, communicator& comm, double elapsed_s);
double median(std::vector<double> v);
// The dropout generator of one step: a function of (seed, step), so a resumed run drops what an
// unbroken one drops.
std::mt19937_64 dropout_generator(std::uint64_t seed, std::uint64_t step);

// Mean loss over the validation windows, B at a time, each batch weighted by its windows. Under MPI
// every process takes every world-th batch and the sums are added up. Never drops out.
template <class Model>
double validation_loss(const Model& model, const text_corpus& data, const std::vector<std::size_t>& offsets,
                       std::size_t block, std::size_t batch, communicator& comm)
{
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
        const auto r = model.forward(t, b.inputs, &b.targets, models::forward_options{});
        total += static_cast<double>(r.loss.item()) * static_cast<double>(b.inputs.shape()[0]);
    }
    comm.allreduce_sum(&total, 1);
    return total / static_cast<double>(offsets.size());
}

// The top Hessian eigenvalue of the training loss on the windows of step 0 (never a training step's:
// steps count from 1), by o.sharpness_iters steps of power iteration on Hessian-vector products
// (autodiff/grad.hpp). Every process computes the same number. Never drops out.
template <class Model>
double sharpness(const Model& model, const text_corpus& data, std::size_t block, const train_options& o)
{
    const auto offsets = training_offsets(data.train.size(), block, o.batch, o.seed, 0);
    const token_batch b = make_batch(data.train, offsets, block, 0, o.batch);
    tape<float> t;
    const auto r = model.forward(t, b.inputs, &b.targets, models::forward_options{});
    std::vector<var<float>> leaves;
    for (const auto& named : parameter_leaves(r.loss))
    {
        leaves.push_back(named.second);
    }
    return top_hessian_eigenvalue(r.loss, leaves, o.sharpness_iters, static_cast<unsigned>(o.seed)).value;
}
}  // namespace detail

template <class Model>
train_summary train_module(Model& model, const text_corpus& data, const train_options& o, std::FILE* progress,
                           bool terminal, communicator& comm)
{
    namespace fs = std::filesystem;
    using clock_type = std::chrono::steady_clock;
    detail::check_loop_options(o);
    const bool leader = comm.rank() == 0;
    const std::size_t block = o.model.block_size;

    std::int64_t first_step = 0;
    const std::string ck_path = detail::checkpoint_path(o);
    io::checkpoint_extras resumed;
    if (o.resume)
    {
        if (!fs::exists(ck_path))
        {
            throw std::runtime_error("--resume: no checkpoint at " + ck_path);
        }
        resumed = model.resume_from(ck_path);
        detail::check_vocabulary(resumed.metadata, *data.tokens, ck_path);
        detail::check_same_optimizer(resumed.metadata, o, ck_path);
        first_step = detail::checkpoint_step(resumed.metadata, ck_path);
    }
    std::vector<parameter<float>> named = models::named_parameters<float>(model);
    optim::muon_with_adamw<float> opt = detail::make_optimiser(model, named, o);
    if (o.resume)
    {
        opt.import_state(detail::optimiser_state(resumed.tensors));
        resumed = {};
    }
    const optim::lr_schedule schedule = optim::make_lr_schedule(o.lr, o.steps, o.warmup, o.decay_steps);
    const optim::lr_schedule muon_schedule = optim::make_lr_schedule(o.muon_lr, o.steps, o.warmup, o.decay_steps);

    train_summary summary;
    summary.first_step = first_step;
    summary.last_step = std::max(first_step, o.steps);
    summary.parameters = models::parameter_scalars(model);
    if (first_step >= o.steps)
    {
        return summary;  // nothing left to do
    }
    // What can still refuse the run comes before anything is written to its folder.
    const auto val_offsets = validation_offsets(data.validation.size(), block, o.eval_windows);
    std::optional<training_log> log;
    std::optional<folder_lock> writer;  // one run writes a folder at a time
    if (leader)
    {
        fs::create_directories(o.out);
        writer.emplace(o.out);
        detail::remove_stale_temporaries(o);
        log.emplace((fs::path(o.out) / "log.csv").string(), o.resume, static_cast<std::uint64_t>(first_step));
    }
    std::optional<progress_display> display;
    if (leader && progress)
    {
        display.emplace(progress, static_cast<std::uint64_t>(first_step), static_cast<std::uint64_t>(o.steps),
                        terminal, std::max<std::uint64_t>(1, static_cast<std::uint64_t>(o.steps) / 40));
    }

    const std::size_t world = static_cast<std::size_t>(comm.size());
    detail::gradient_averager averager(named);
    std::vector<double> rates;  // the last rate_window steps' tokens/s (bounded: memory stays flat)
    constexpr std::size_t rate_window = 1000;
    const auto start = clock_type::now();
    for (std::int64_t s = first_step + 1; s <= o.steps; ++s)
    {
        const auto step_start = clock_type::now();
        // The global batch of world * B windows, drawn as one process would; this rank takes its rows.
        const auto offsets = training_offsets(data.train.size(), block, o.batch * world, o.seed,
                                              static_cast<std::uint64_t>(s));
        const token_batch b = make_batch(data.train, offsets, block,
                                         static_cast<std::size_t>(comm.rank()) * o.batch, o.batch);
        tape<float> t;
        t.detect_anomaly(o.detect_anomaly);
        std::mt19937_64 generator = detail::dropout_generator(o.seed + static_cast<std::uint64_t>(comm.rank()),
                                                              static_cast<std::uint64_t>(s));
        models::forward_options fo;
        fo.dropout = o.dropout;
        fo.generator = o.dropout > 0 ? &generator : nullptr;
        fo.every_activation = false;  // nothing reads the activations' gradients: the fused nodes may merge
        const auto r = model.forward(t, b.inputs, &b.targets, fo);
        t.backward(r.loss);
        float loss = r.loss.item();
        if (world > 1)
        {
            comm.allreduce_sum(&loss, 1);
            loss /= static_cast<float>(world);
        }
        averager.average(named, comm);
        step_record rec;
        rec.step = static_cast<std::uint64_t>(s);
        rec.train_loss = loss;
        rec.grad_norm = optim::grad_norm(named);  // clip_grad_norm, its scaling done inside the update's pass
        rec.lr = schedule.at(s);
        opt.set_lr(rec.lr, muon_schedule.at(s));
        opt.scaled_step(optim::clip_factor(rec.grad_norm, o.clip));
        opt.zero_grad();
        if (!std::isfinite(loss))
        {
            throw std::runtime_error("the training loss became " + std::to_string(loss) + " at step " +
                                     std::to_string(s) + " (try a lower --lr, or --detect-anomaly to find the op)");
        }
        const auto [stop, out_of_time] =
            detail::stop_requested(o, comm, std::chrono::duration<double>(clock_type::now() - start).count());
        const bool last = s == o.steps || out_of_time;  // --time: this step ends the run
        if ((o.eval_every > 0 && s % o.eval_every == 0) || last)
        {
            rec.val_loss = detail::validation_loss(model, data, val_offsets, block, o.batch, comm);
            rec.val_bpb = data.validation_bits_per_byte(*rec.val_loss);
            summary.val_loss = *rec.val_loss;
        }
        const double step_s = std::chrono::duration<double>(clock_type::now() - step_start).count();
        if (o.sharpness_every > 0 && s % o.sharpness_every == 0)
        {
            rec.sharpness = detail::sharpness(model, data, block, o);  // after the step's clock stopped
        }
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
                model.save(ck_path, detail::extras_of(opt.export_state(), *data.tokens, s, o));
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
    summary.tokens_per_s = detail::median(rates);
    return summary;
}

template <class Model>
train_summary train_module(Model& model, const text_corpus& data, const train_options& options, std::FILE* progress)
{
    communicator single;
    return train_module(model, data, options, progress, false, single);
}
}  // namespace xgrad::train
