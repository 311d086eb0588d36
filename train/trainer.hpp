// The training loop behind xgrad-train (docs/spec.md, "Training on text"): a model on byte tokens,
// AdamW (or Muon on the matrices, docs/training.md) with warm-up and cosine decay, gradient clipping, validation at intervals, log.csv, atomic
// checkpoints with the optimiser's state, and --resume that continues exactly where a run stopped.
// Data-parallel runs plug in a communicator (train/communicator.hpp); everything else is the same.
//
// The loop (train_module) works on any module: a struct that
//   - declares its parameters in `template <class F> void visit(F&& f)` (models/module.hpp),
//   - has `forward(tape<float>&, const ids_t& tokens, const ids_t* targets, const models::forward_options&)
//     const` returning something with `.logits` (B, T, V) and `.loss` (a scalar var),
//   - saves itself: `void save(const std::string& path, const io::checkpoint_extras&) const`, and
//   - resumes: `io::checkpoint_extras resume_from(const std::string& path)`, loading a checkpoint of the
//     same architecture into itself (std::runtime_error naming the first key that disagrees).
// io::save_module and io::load_module write those two in one line each. run_training is the GPT's.
#pragma once

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "io/checkpoint.hpp"
#include "models/gpt.hpp"
#include "train/communicator.hpp"
#include "train/text_data.hpp"

namespace xgrad::train
{
struct train_options
{
    std::string data;  // a text file
    std::string out;   // folder for model.safetensors, log.csv and the pictures
    std::int64_t steps = 2000;
    models::gpt_config model{0, 64, 2, 64, 4, 0};  // vocab_size comes from the data
    std::size_t batch = 16;                        // windows per step (per process under MPI)
    double lr = 3e-3;
    std::optional<std::int64_t> warmup;       // docs/spec.md: min(100, D / 10)
    std::optional<std::int64_t> decay_steps;  // docs/spec.md: the number of steps
    std::uint64_t seed = 1;
    int threads = 1;
    bool resume = false;
    double dropout = 0;  // inverted dropout in training steps only, drawn from a generator of (seed, step)
    std::string tokenizer = "bytes";  // bytes | bpe:N | unigram:N (train/tokenizer.hpp)
    double time_limit_s = 0;          // > 0: stop after the step that passes this many seconds of training

    double weight_decay = 0.1;   // AdamW, on matrices only
    std::string optimizer = "adamw";  // adamw | muon: Muon on the model's matrices, AdamW on the rest
    double muon_lr = 0.02;            // Muon's peak learning rate (the same schedule as lr's)
    double muon_momentum = 0.95;
    double beta2 = 0.99;
    double clip = 1.0;           // global gradient norm
    std::int64_t eval_every = 100;   // validation every so many steps, and at the last step
    std::size_t eval_windows = 64;   // validation windows (evenly spaced over the split)
    std::int64_t save_every = 100;   // checkpoint every so many steps, and at the last step
    std::size_t sample_tokens = 200; // printed at the end (0: none)
    bool plots = true;               // loss.png and attention.png at the end
    bool detect_anomaly = false;
    // > 0: every so many steps, the top Hessian eigenvalue of the training loss on one fixed batch (the
    // windows of step 0), by sharpness_iters steps of power iteration (the log's `sharpness` column).
    std::int64_t sharpness_every = 0;
    std::size_t sharpness_iters = 20;
    std::string max_memory = "auto";  // refuse a run estimated to need more (train/memory_estimate.hpp)
    // Set (by a SIGINT handler, say) to stop after the current step with a checkpoint of it.
    const volatile std::sig_atomic_t* interrupt = nullptr;
};

struct train_summary
{
    std::int64_t first_step = 0;  // the step a resumed run started after (0 for a fresh run)
    std::int64_t last_step = 0;   // less than the steps asked for when interrupted
    bool interrupted = false;
    double train_loss = 0;        // at the last step
    double val_loss = 0;          // at the last step
    double tokens_per_s = 0;      // median over the last 1,000 steps, all processes together
    std::uint64_t parameters = 0;
    std::string sample;           // generated at the end
};

// Throws std::invalid_argument (bad options) or std::runtime_error (unreadable data, a checkpoint that
// does not match the options or the data) with one clear line; never leaves a half-written checkpoint.
// `progress` gets the progress bar (terminal) or plain lines; nullptr shows nothing.
train_summary run_training(const train_options& options, std::FILE* progress, bool terminal,
                           communicator& comm);
train_summary run_training(const train_options& options, std::FILE* progress = nullptr, bool terminal = false);

// Trains `model` (fresh, or replaced by the checkpoint's with options.resume) on `data` up to
// options.steps; `model` holds the trained parameters afterwards. Of options.model only block_size (the
// window length T) is used.
template <class Model>
train_summary train_module(Model& model, const text_corpus& data, const train_options& options, std::FILE* progress,
                           bool terminal, communicator& comm);
template <class Model>
train_summary train_module(Model& model, const text_corpus& data, const train_options& options,
                           std::FILE* progress = nullptr);
}  // namespace xgrad::train

#include "train/train_loop.hpp"
