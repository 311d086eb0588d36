// Pictures of a run, drawn by gnuplot (Debian's gnuplot-nox): the loss curves of log.csv and the
// attention maps of every head for one sentence. Without gnuplot these return a one-line note instead
// of failing; a picture is written to a temporary name and renamed, so a half-drawn PNG never appears.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "autodiff/xtensor.hpp"

namespace xgrad::train
{
// Empty when the picture was written; otherwise one line saying why not (no gnuplot, gnuplot failed).
using plot_note = std::optional<std::string>;

// Whether a program named gnuplot is on PATH.
bool gnuplot_available();

// How draw_png ended.
enum class draw_result
{
    drawn,
    no_gnuplot,
    script_not_written,
    failed,
};

// Draws a PNG of width x height pixels with gnuplot: writes the script file `script` (the PNG terminal, the
// output png + ".tmp", then `commands`), runs gnuplot on it with the path as its one argument (no shell:
// any path is safe), then renames the picture over png, so that a half-drawn PNG never appears. The
// script is left for the caller to keep or remove. When gnuplot failed, `first_line` (when given)
// receives the first line it printed.
draw_result draw_png(const std::string& commands, const std::string& png, int width, int height,
                     const std::string& script, std::string* first_line = nullptr);

// A gnuplot string literal of `s`: single quotes, with any single quote doubled (no other escapes apply
// inside them). Every script the project writes quotes its titles and paths with it.
std::string gnuplot_quoted(const std::string& s);

// Train and validation loss against step, from one or more log.csv files (one curve pair per file,
// labelled by `labels`).
plot_note plot_loss_curves(const std::vector<std::string>& logs, const std::vector<std::string>& labels,
                           const std::string& png, const std::string& title);

// Validation bits per byte (log.csv's val_bpb column) against step, one curve per file: runs with
// different tokenizers on one scale.
plot_note plot_bits_per_byte(const std::vector<std::string>& logs, const std::vector<std::string>& labels,
                             const std::string& png, const std::string& title);

// The sharpness (the top Hessian eigenvalue, log.csv's `sharpness` column) against the step, with 2 / lr,
// the sharpness above which gradient descent at that learning rate cannot be stable, drawn for reference.
plot_note plot_sharpness(const std::string& log, const std::string& png, const std::string& title);

// One panel per (layer, head): weights (H, T, T) per layer for a single sequence, rows = queries,
// columns = keys, the sentence's characters on the axes.
plot_note plot_attention_maps(const std::vector<array<double>>& weights, const std::string& text,
                              const std::string& png, const std::string& title);
}  // namespace xgrad::train
