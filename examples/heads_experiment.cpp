// Exercise 20.1 as an experiment: "why not one big head?" At a fixed width d, the same GPT is trained
// with H = 1, 2, 4, 8 heads and with grouped-query variants (H = 8 with G = 2 and G = 1), on the same
// data for the same steps, over several seeds. Prints a table (validation loss mean and spread,
// parameters, tokens/s) and draws the loss curves and each variant's attention maps.
//
//   build/bin/heads_experiment --data build/fortunes.txt --out build/heads     (about 30 minutes)
//   build/bin/heads_experiment --quick --data FILE --out DIR                    (seconds: the pipeline)
//   build/bin/heads_experiment --replot ...     (the same flags: table and pictures from the runs in --out)
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "io/checkpoint.hpp"
#include "models/gpt_decode.hpp"
#include "train/plots.hpp"
#include "train/text_data.hpp"
#include "train/trainer.hpp"

using namespace xgrad;
namespace fs = std::filesystem;

namespace
{
struct variant
{
    std::size_t heads, kv_heads;
    std::string name() const
    {
        return "H" + std::to_string(heads) + (kv_heads == heads ? "" : "-G" + std::to_string(kv_heads));
    }
};

struct outcome
{
    std::vector<double> val_losses;
    std::vector<double> tokens_per_s;
    std::uint64_t parameters = 0;
};

double mean(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size()); }

double stddev(const std::vector<double>& v)  // sample standard deviation (n - 1)
{
    if (v.size() < 2)
    {
        return 0;
    }
    const double m = mean(v);
    double s = 0;
    for (double x : v)
    {
        s += (x - m) * (x - m);
    }
    return std::sqrt(s / static_cast<double>(v.size() - 1));
}

// What a finished run in `dir` measured, read back from its log.csv and checkpoint (for --replot).
train::train_summary summary_of_run(const std::string& dir)
{
    std::ifstream log(fs::path(dir) / "log.csv");
    std::string line;
    std::vector<double> rates;
    train::train_summary s;
    std::getline(log, line);  // header
    while (std::getline(log, line))
    {
        std::vector<std::string> cells;
        std::stringstream in(line);
        for (std::string cell; std::getline(in, cell, ',');)
        {
            cells.push_back(cell);
        }
        if (cells.size() >= 6)
        {
            s.last_step = std::stoll(cells[0]);
            s.train_loss = std::stod(cells[1]);
            if (!cells[2].empty())
            {
                s.val_loss = std::stod(cells[2]);
            }
            rates.push_back(std::stod(cells[5]));
        }
    }
    if (rates.empty())
    {
        throw std::runtime_error("--replot: no finished run in " + dir);
    }
    std::nth_element(rates.begin(), rates.begin() + static_cast<std::ptrdiff_t>(rates.size() / 2), rates.end());
    s.tokens_per_s = rates[rates.size() / 2];
    s.parameters = models::gpt_parameter_count(io::load_checkpoint<float>((fs::path(dir) / "model.safetensors").string()).params.config);
    return s;
}

// The attention maps of a trained variant for the first characters of the validation split.
void draw_maps(const std::string& checkpoint, const train::text_corpus& data, const std::string& png,
               const std::string& title)
{
    const auto ck = io::load_checkpoint<float>(checkpoint);
    const std::vector<std::int32_t> ids =
        data.vocabulary.encode(train::prose_sample(data, std::min<std::size_t>(ck.params.config.block_size, 24)));
    ids_t tokens = ids_t::from_shape({1, ids.size()});
    std::copy(ids.begin(), ids.end(), tokens.begin());
    models::kv_cache<float> cache;
    std::vector<array<float>> weights;
    models::gpt_decode(ck.params, tokens, cache, &weights);
    std::vector<array<double>> maps;
    for (const auto& w : weights)
    {
        maps.push_back(xt::view(array<double>(w), 0));
    }
    if (auto note = train::plot_attention_maps(maps, data.vocabulary.decode(ids), png, title))
    {
        std::printf("%s\n", note->c_str());
    }
}
}  // namespace

int main(int argc, char** argv)
{
    std::string data, out = "heads-experiment";
    bool quick = false, replot = false;
    std::int64_t steps = 800;
    std::size_t seeds = 3, d_model = 64;
    int threads = 2;
    CLI::App app{"Exercise 20.1: many heads or one? Trains H = 1, 2, 4, 8 and grouped-query variants", "heads_experiment"};
    app.add_option("--data", data, "text file")->required();
    app.add_option("--out", out, "folder for the runs, results.md and the pictures")->capture_default_str();
    app.add_option("--steps", steps, "steps per run")->capture_default_str();
    app.add_option("--seeds", seeds, "seeds per variant")->capture_default_str();
    app.add_option("--d-model", d_model, "width d, the same for every variant")->capture_default_str();
    app.add_option("--threads", threads, "threads per run")->capture_default_str();
    app.add_flag("--quick", quick, "a few steps of a tiny model: checks the pipeline in seconds");
    app.add_flag("--replot", replot, "no training: the table and pictures from the runs already in --out");
    CLI11_PARSE(app, argc, argv);

    train::train_options base;
    base.data = data;
    base.threads = threads;
    base.steps = steps;
    base.model = {0, 64, 2, d_model, 1, 0};
    base.batch = 16;
    base.lr = 3e-3;
    base.eval_every = std::max<std::int64_t>(1, steps / 10);
    base.eval_windows = 128;
    base.save_every = 0;  // the last step only
    base.sample_tokens = 0;
    base.plots = false;
    if (quick)
    {
        base.steps = 6;
        base.eval_every = 3;
        base.eval_windows = 8;
        base.model.block_size = 16;
        base.model.d_model = 16;
        base.batch = 4;
        seeds = std::min<std::size_t>(seeds, 2);
    }
    const std::vector<variant> variants{{1, 1}, {2, 2}, {4, 4}, {8, 8}, {8, 2}, {8, 1}};
    try
    {
        fs::create_directories(out);
        const auto corpus = train::text_corpus::load(data, base.model.block_size);
        std::vector<outcome> results(variants.size());
        std::vector<std::string> logs, labels;
        for (std::size_t v = 0; v < variants.size(); ++v)
        {
            for (std::size_t s = 1; s <= seeds; ++s)
            {
                train::train_options o = base;
                o.model.heads = variants[v].heads;
                o.model.kv_heads = variants[v].kv_heads;
                o.seed = s;
                o.out = (fs::path(out) / (variants[v].name() + "-seed" + std::to_string(s))).string();
                std::printf("%-8s seed %zu ... ", variants[v].name().c_str(), s);
                std::fflush(stdout);
                const auto summary = replot ? summary_of_run(o.out) : train::run_training(o);
                std::printf("validation loss %.4f, %.0f tokens/s\n", summary.val_loss, summary.tokens_per_s);
                results[v].val_losses.push_back(summary.val_loss);
                results[v].tokens_per_s.push_back(summary.tokens_per_s);
                results[v].parameters = summary.parameters;
                if (s == 1)
                {
                    logs.push_back((fs::path(o.out) / "log.csv").string());
                    labels.push_back(variants[v].name());
                    draw_maps((fs::path(o.out) / "model.safetensors").string(), corpus,
                              (fs::path(out) / ("attention-" + variants[v].name() + ".png")).string(),
                              "attention per head, " + variants[v].name() + " (seed 1)");
                }
            }
        }
        std::ofstream md(fs::path(out) / "results.md");
        md << "| variant | heads H | kv heads G | d_h | parameters | validation loss (mean ± sd over " << seeds
           << " seeds) | min .. max | tokens/s (median of runs) |\n|---|---|---|---|---|---|---|---|\n";
        for (std::size_t v = 0; v < variants.size(); ++v)
        {
            const auto& r = results[v];
            char row[400];
            std::vector<double> rates = r.tokens_per_s;
            std::sort(rates.begin(), rates.end());
            std::snprintf(row, sizeof row, "| %s | %zu | %zu | %zu | %llu | %.4f ± %.4f | %.4f .. %.4f | %.0f |\n",
                          variants[v].name().c_str(), variants[v].heads, variants[v].kv_heads,
                          base.model.d_model / variants[v].heads, static_cast<unsigned long long>(r.parameters),
                          mean(r.val_losses), stddev(r.val_losses),
                          *std::min_element(r.val_losses.begin(), r.val_losses.end()),
                          *std::max_element(r.val_losses.begin(), r.val_losses.end()), rates[rates.size() / 2]);
            md << row;
        }
        md.close();
        if (auto note = train::plot_loss_curves(logs, labels, (fs::path(out) / "loss-curves.png").string(),
                                                "Exercise 20.1: loss by number of heads (seed 1)"))
        {
            std::printf("%s\n", note->c_str());
        }
        std::ifstream table(fs::path(out) / "results.md");
        std::printf("\n%s", std::string(std::istreambuf_iterator<char>(table), {}).c_str());
        return 0;
    }
    catch (const std::exception& e)
    {
        std::fprintf(stderr, "heads_experiment: %s\n", e.what());
        return 1;
    }
}
