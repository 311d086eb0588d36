#include "experiment/grid_report.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "experiment/stats.hpp"
#include "io/safetensors.hpp"
#include "train/plots.hpp"
#include "train/run_log.hpp"

namespace xgrad::train::grid
{
namespace fs = std::filesystem;

namespace
{
double median(std::vector<double> v)
{
    if (v.empty())
    {
        return 0;
    }
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
}

std::vector<double> values_of(const std::map<std::int64_t, double>& by_step)
{
    std::vector<double> out;
    for (const auto& [step, v] : by_step)
    {
        out.push_back(v);
    }
    return out;
}

// The parameters of a checkpoint: every tensor but the optimiser's state (names beginning "optim.").
std::uint64_t parameter_count(const std::string& checkpoint)
{
    std::uint64_t count = 0;
    for (const auto& [name, tensor] : io::read_safetensors(checkpoint).tensors)
    {
        if (name.rfind("optim.", 0) != 0)
        {
            count += tensor.values.size();
        }
    }
    return count;
}

// elapsed_s counts from the start of each session of a run: where it falls, a resumed session began.
double training_seconds(const std::map<std::int64_t, double>& elapsed)
{
    double total = 0, previous = 0;
    for (const auto& [step, e] : elapsed)
    {
        total += e >= previous ? e - previous : e;
        previous = e;
    }
    return total;
}

std::string fixed(double v, int digits)
{
    if (std::isnan(v))
    {
        return "n/a";
    }
    char text[64];
    std::snprintf(text, sizeof text, "%.*f", digits, v);
    return text;
}

std::string signed_fixed(double v, int digits) { return (v > 0 ? "+" : "") + fixed(v, digits); }

std::string p_text(double p)
{
    if (std::isnan(p))
    {
        return "n/a";
    }
    if (p < 0.001)
    {
        return "< 0.001";
    }
    char text[32];
    std::snprintf(text, sizeof text, "%.3f", p);
    return text;
}

// "p = 0.017" or "p < 0.001".
std::string p_is(double p)
{
    const std::string text = p_text(p);
    return text[0] == '<' ? "p " + text : "p = " + text;
}

std::string interval_text(double mean, double half, int digits)
{
    return std::isnan(half) ? "n/a" : signed_fixed(mean - half, digits) + " .. " + signed_fixed(mean + half, digits);
}
}  // namespace

run_result read_run(const run& r)
{
    const run_log log = run_log::read((fs::path(r.dir) / "log.csv").string());
    const fs::path checkpoint = fs::path(r.dir) / "model.safetensors";
    if (log.rows.empty() || !fs::exists(checkpoint))
    {
        throw std::runtime_error("no finished run in " + r.dir + " (log.csv or model.safetensors missing)");
    }
    run_result out;
    out.variant = r.variant;
    out.seed = r.seed;
    out.steps = log.last_step();
    out.finished = fs::exists(fs::path(r.dir) / "finished") && out.steps == r.steps;
    const auto val = log.numbers("val_loss");
    out.val_loss = val.empty() ? NAN : val.rbegin()->second;
    const auto bpb = log.numbers("val_bpb");
    if (!bpb.empty())
    {
        out.val_bpb = bpb.rbegin()->second;
    }
    out.tokens_per_s = median(values_of(log.numbers("tokens_per_s")));
    out.train_seconds = training_seconds(log.numbers("elapsed_s"));
    out.parameters = parameter_count(checkpoint.string());
    return out;
}

namespace
{
// A variant's finished runs and the numbers the tables need.
struct variant_results
{
    const variant* v = nullptr;
    std::vector<run_result> runs;
    std::vector<const run*> planned;
    std::vector<double> metric() const;
    bool by_bpb = false;
};

std::vector<double> variant_results::metric() const
{
    std::vector<double> out;
    for (const run_result& r : runs)
    {
        out.push_back(by_bpb ? *r.val_bpb : r.val_loss);
    }
    return out;
}

// The flags where a variant differs from the fixed ones, as on a command line.
std::string differing_flags(const spec& s, const variant& v)
{
    std::string text;
    for (const flag& f : v.flags)
    {
        const bool same = std::any_of(s.fixed.begin(), s.fixed.end(), [&](const flag& g) {
            return g.name == f.name && g.value == f.value && g.is_switch == f.is_switch;
        });
        if (!same)
        {
            text += (text.empty() ? "" : " ") + ("--" + f.name) + (f.is_switch ? "" : " " + f.value);
        }
    }
    for (const flag& f : s.fixed)
    {
        if (flag_value(v, f.name).empty())
        {
            text += (text.empty() ? "" : " ") + std::string("(no --") + f.name + ")";
        }
    }
    return text.empty() ? "(the fixed flags)" : "`" + text + "`";
}

std::string fixed_flags(const spec& s)
{
    std::string text;
    for (const flag& f : s.fixed)
    {
        text += (text.empty() ? "" : " ") + ("--" + f.name) + (f.is_switch ? "" : " " + f.value);
    }
    return text.empty() ? "none" : "`" + text + "`";
}

std::string budget_text(const budget& b)
{
    const char* units[] = {"steps", "training tokens", "seconds of training (steps chosen by a timed probe)"};
    char text[64];
    std::snprintf(text, sizeof text, "%.0f ", b.amount);
    return text + std::string(units[static_cast<int>(b.kind)]) + " per run";
}

double session_seconds(const std::string& out)
{
    double total = 0;
    for (const auto& entry : fs::directory_iterator(out))
    {
        const std::string name = entry.path().filename().string();
        if (name.rfind("session-", 0) == 0 && entry.path().extension() == ".txt")
        {
            std::ifstream in(entry.path());
            double s = 0;
            in >> s;
            total += s;
        }
    }
    return total;
}

void results_table(std::ostream& md, const spec& s, const std::vector<variant_results>& all, bool bpb)
{
    md << "| variant | flags | steps | parameters | tokens/s (median) | seeds | validation loss (mean ± sd) | 95% CI";
    md << (bpb ? " | bits per byte (mean ± sd) | 95% CI |\n|---|---|---|---|---|---|---|---|---|---|\n"
               : " |\n|---|---|---|---|---|---|---|---|\n");
    for (const variant_results& r : all)
    {
        std::vector<double> losses, rates, bpbs;
        for (const run_result& x : r.runs)
        {
            losses.push_back(x.val_loss);
            rates.push_back(x.tokens_per_s);
            if (x.val_bpb)
            {
                bpbs.push_back(*x.val_bpb);
            }
        }
        const auto loss = stats::mean_interval(losses);
        md << "| " << r.v->name << " | " << differing_flags(s, *r.v) << " | "
           << (r.planned.empty() ? 0 : r.planned.front()->steps) << " | "
           << (r.runs.empty() ? std::string("?") : std::to_string(r.runs.front().parameters)) << " | "
           << fixed(median(rates), 0) << " | " << r.runs.size() << "/" << r.planned.size() << " | "
           << fixed(loss.mean, 4) << " ± " << fixed(stats::sample_sd(losses), 4) << " | "
           << (std::isnan(loss.half_width) ? "n/a" : fixed(loss.mean - loss.half_width, 4) + " .. " +
                                                          fixed(loss.mean + loss.half_width, 4));
        if (bpb)
        {
            const auto b = stats::mean_interval(bpbs);
            md << " | " << fixed(b.mean, 4) << " ± " << fixed(stats::sample_sd(bpbs), 4) << " | "
               << (std::isnan(b.half_width) ? "n/a" : fixed(b.mean - b.half_width, 4) + " .. " +
                                                          fixed(b.mean + b.half_width, 4));
        }
        md << " |\n";
    }
}

// Both variants' metric on the seeds both finished, in seed order.
std::pair<std::vector<double>, std::vector<double>> on_common_seeds(const variant_results& a, const variant_results& b)
{
    std::pair<std::vector<double>, std::vector<double>> out;
    const std::vector<double> ma = a.metric(), mb = b.metric();
    for (std::size_t i = 0; i < a.runs.size(); ++i)
    {
        for (std::size_t k = 0; k < b.runs.size(); ++k)
        {
            if (a.runs[i].seed == b.runs[k].seed)
            {
                out.first.push_back(ma[i]);
                out.second.push_back(mb[k]);
            }
        }
    }
    return out;
}

std::string verdict(const variant_results& r, const variant_results& base, const stats::comparison& w,
                    const std::optional<stats::comparison>& p, const std::string& unit)
{
    const std::string name = "**" + r.v->name + "** vs " + base.v->name;
    if (std::isnan(w.p))
    {
        return name + ": too few finished seeds to compare (at least two on each side are needed).";
    }
    std::string line = name + ": " + signed_fixed(w.difference, 4) + " " + unit + " (95% CI " +
                       interval_text(w.difference, w.half_width, 4) + ", Welch " + p_is(w.p) + "): ";
    if (w.p < 0.05)
    {
        line += std::string(w.difference < 0 ? "lower (better)" : "higher (worse)") +
                " than the baseline, beyond the seed noise.";
    }
    else
    {
        line += "**within noise**: " + std::to_string(std::min(r.runs.size(), base.runs.size())) +
                " seeds cannot separate it from the baseline.";
    }
    if (p && !std::isnan(p->p))
    {
        line += " Paired by seed (" + fixed(p->df + 1, 0) + " seeds): " + signed_fixed(p->difference, 4) + " (95% CI " +
                interval_text(p->difference, p->half_width, 4) + ", " + p_is(p->p) + ")" +
                (p->p < 0.05 && w.p >= 0.05 ? ", a consistent difference once the seed's own effect is removed." : ".");
    }
    return line;
}

void comparison_table(std::ostream& md, const std::vector<variant_results>& all, const variant_results& base,
                      const std::string& metric_name, const std::string& unit, std::vector<std::string>& verdicts)
{
    md << "| variant | Δ " << metric_name << " vs " << base.v->name
       << " | 95% CI of Δ | Welch t (df) | Welch p | paired Δ (95% CI) | paired p |\n|---|---|---|---|---|---|---|\n";
    for (const variant_results& r : all)
    {
        if (&r == &base)
        {
            continue;
        }
        const stats::comparison w = stats::welch(r.metric(), base.metric());
        std::optional<stats::comparison> p;
        const auto [mine, theirs] = on_common_seeds(r, base);
        if (mine.size() >= 2)
        {
            p = stats::paired(mine, theirs);
        }
        md << "| " << r.v->name << " | " << signed_fixed(w.difference, 4) << " | "
           << interval_text(w.difference, w.half_width, 4) << " | " << fixed(w.t, 2) << " (" << fixed(w.df, 1)
           << ") | " << p_text(w.p) << " | "
           << (p ? signed_fixed(p->difference, 4) + " (" + interval_text(p->difference, p->half_width, 4) + ")" : "n/a")
           << " | " << (p ? p_text(p->p) : "n/a") << " |\n";
        verdicts.push_back(verdict(r, base, w, p, unit));
    }
}

// ---- pictures ----

// Mean and sample sd over seeds at every step all of a variant's runs logged `column`.
std::vector<std::array<double, 3>> curve(const std::vector<const run*>& runs, const std::string& column)
{
    std::map<std::int64_t, std::vector<double>> by_step;
    for (const run* r : runs)
    {
        for (const auto& [step, v] : run_log::read((fs::path(r->dir) / "log.csv").string()).numbers(column))
        {
            by_step[step].push_back(v);
        }
    }
    std::vector<std::array<double, 3>> out;
    for (const auto& [step, values] : by_step)
    {
        if (values.size() == runs.size())
        {
            out.push_back({static_cast<double>(step), stats::mean(values), stats::sample_sd(values)});
        }
    }
    return out;
}

// The training loss averaged over windows of `width` steps (it is noisy step by step).
std::vector<std::array<double, 3>> smoothed(const std::vector<std::array<double, 3>>& c, std::size_t width)
{
    std::vector<std::array<double, 3>> out;
    for (std::size_t i = 0; i + width <= c.size(); i += width)
    {
        double m = 0, sd = 0;
        for (std::size_t k = i; k < i + width; ++k)
        {
            m += c[k][1];
            sd += c[k][2];
        }
        out.push_back({c[i + width - 1][0], m / static_cast<double>(width), sd / static_cast<double>(width)});
    }
    return out;
}

std::string write_curve(const std::vector<std::array<double, 3>>& c, const std::string& path)
{
    std::ofstream out(path);
    out << "# step mean sd (over seeds)\n";
    for (const auto& [step, m, sd] : c)
    {
        out << step << " " << m << " " << sd << "\n";
    }
    return path;
}

// loss-curves.png: validation (left) and smoothed training (right) loss, mean ± sd over seeds per variant.
// The data files and the gnuplot script stay in OUT/curves, so the picture can be redrawn by hand.
std::optional<std::string> plot_curves(const std::vector<variant_results>& all, const std::string& out,
                                       const std::string& val_column)
{
    const fs::path dir = fs::path(out) / grid_files::curves;
    fs::create_directories(dir);
    std::string val_plot, train_plot;
    int colour = 1;
    for (const variant_results& r : all)
    {
        std::vector<const run*> done;
        for (const run* p : r.planned)
        {
            if (fs::exists(fs::path(p->dir) / "finished"))
            {
                done.push_back(p);
            }
        }
        if (done.empty())
        {
            continue;
        }
        const std::string name = folder_name(r.v->name);
        const auto train_curve = curve(done, "train_loss");
        const std::string val = write_curve(curve(done, val_column), (dir / (name + ".val.dat")).string());
        const std::string train = write_curve(smoothed(train_curve, std::max<std::size_t>(1, train_curve.size() / 60)),
                                              (dir / (name + ".train.dat")).string());
        const std::string lc = " lc " + std::to_string(colour++);
        for (auto [plot, file] : {std::pair<std::string*, std::string>{&val_plot, val}, {&train_plot, train}})
        {
            *plot += std::string(plot->empty() ? "plot " : ", ") + gnuplot_quoted(file) +
                     " using 1:($2-$3):($2+$3) with filledcurves fs transparent solid 0.15 noborder" + lc +
                     " notitle, " + gnuplot_quoted(file) + " using 1:2 with lines lw 2" + lc + " title " +
                     gnuplot_quoted(r.v->name);
        }
    }
    if (val_plot.empty())
    {
        return "no finished runs to plot";
    }
    const std::string png = (fs::path(out) / grid_files::loss_curves).string();
    const std::string script = (dir / "loss-curves.gp").string();
    std::ostringstream commands;
    commands << "set multiplot layout 1,2\nset grid\nset key top right\nset xlabel 'step'\n"
             << "set title 'validation " << (val_column == "val_bpb" ? "bits per byte" : "loss")
             << ": mean and ± 1 sd over seeds'\n"
             << val_plot << "\nset title 'training loss (window means): mean and ± 1 sd over seeds'\n"
             << train_plot << "\nunset multiplot";
    switch (draw_png(commands.str(), png, 1400, 600, script))  // the script stays, to redraw by hand
    {
    case draw_result::drawn:
        return std::nullopt;
    case draw_result::no_gnuplot:
        return "gnuplot not found: loss-curves.png not drawn (apt-get install gnuplot-nox)";
    case draw_result::script_not_written:
    case draw_result::failed:
        break;
    }
    return "gnuplot could not draw loss-curves.png (script: " + script + ")";
}

// attention-<variant>.png: the first finished seed's attention.png (xgrad-train draws it).
std::vector<std::string> copy_attention_maps(const std::vector<variant_results>& all, const std::string& out)
{
    std::vector<std::string> lines;
    for (const variant_results& r : all)
    {
        for (const run* p : r.planned)
        {
            const fs::path from = fs::path(p->dir) / "attention.png";
            if (fs::exists(fs::path(p->dir) / "finished") && fs::exists(from))
            {
                const std::string name = "attention-" + folder_name(r.v->name) + ".png";
                fs::copy_file(from, fs::path(out) / name, fs::copy_options::overwrite_existing);
                lines.push_back("![" + r.v->name + ", seed " + std::to_string(p->seed) + "](" + name + ")");
                break;
            }
        }
    }
    return lines;
}

void runs_table(std::ostream& md, const std::vector<variant_results>& all, bool bpb)
{
    md << "| variant | seed | steps | validation loss" << (bpb ? " | bits per byte" : "")
       << " | tokens/s | training seconds |\n|---|---|---|---|---|---|" << (bpb ? "---|" : "") << "\n";
    for (const variant_results& r : all)
    {
        for (const run_result& x : r.runs)
        {
            md << "| " << r.v->name << " | " << x.seed << " | " << x.steps << " | " << fixed(x.val_loss, 4)
               << (bpb ? " | " + fixed(x.val_bpb.value_or(NAN), 4) : "") << " | " << fixed(x.tokens_per_s, 0) << " | "
               << fixed(x.train_seconds, 1) << " |\n";
        }
    }
}
}  // namespace

std::string write_report(const spec& s, const std::vector<run>& runs, const report_context& c)
{
    std::vector<variant_results> all;
    std::vector<std::string> unfinished;
    for (const variant& v : s.variants)
    {
        variant_results r;
        r.v = &v;
        for (const run& p : runs)
        {
            if (p.variant != v.name)
            {
                continue;
            }
            r.planned.push_back(&p);
            if (fs::exists(fs::path(p.dir) / "finished"))
            {
                r.runs.push_back(read_run(p));
            }
            else
            {
                unfinished.push_back(v.name + "/seed-" + std::to_string(p.seed));
            }
        }
        all.push_back(r);
    }
    // Bits per byte compare across tokenizers; nats per token do not. Use them when every run has them.
    bool bpb = true, any = false;
    for (const variant_results& r : all)
    {
        for (const run_result& x : r.runs)
        {
            bpb = bpb && x.val_bpb.has_value();
            any = true;
        }
    }
    bpb = bpb && any;
    for (variant_results& r : all)
    {
        r.by_bpb = bpb;
    }
    const variant_results& base =
        *std::find_if(all.begin(), all.end(), [&](const variant_results& r) { return r.v->name == s.baseline; });

    std::ostringstream md;
    md << "# Experiment report\n\nData `" << s.data << "`; fixed flags " << fixed_flags(s) << "; "
       << budget_text(s.per_run) << "; seeds";
    for (std::uint64_t seed : s.seeds)
    {
        md << " " << seed;
    }
    md << "; baseline " << s.baseline << ".\n";
    double train_seconds = 0;
    for (const variant_results& r : all)
    {
        for (const run_result& x : r.runs)
        {
            train_seconds += x.train_seconds;
        }
    }
    md << "Machine: " << (c.machine.empty() ? "not recorded" : c.machine) << "; " << c.jobs << " runs at a time, "
       << c.threads << " thread(s) each; wall-clock " << fixed(session_seconds(c.out) / 60, 1) << " min, "
       << fixed(train_seconds / 60, 1) << " min of training summed over runs.\n\n";
    if (!unfinished.empty())
    {
        md << "**Unfinished runs, left out below:** " << unfinished.size() << " (";
        for (std::size_t i = 0; i < unfinished.size(); ++i)
        {
            md << (i ? ", " : "") << unfinished[i];
        }
        md << ").\n\n";
    }
    md << "## Results\n\nValidation loss in nats per token at the last step; the intervals are 95% t intervals "
          "over seeds.\n\n";
    results_table(md, s, all, bpb);
    const std::string metric = bpb ? "bits per byte" : "validation loss";
    md << "\n## Against the baseline (" << metric << ", lower is better)\n\n"
       << "Welch's t-test does not assume equal variances; the paired test uses the per-seed differences "
          "on the seeds both finished (the same seed gives the same batches, and the same initial weights where the "
          "shapes agree).\n\n";
    std::vector<std::string> verdicts;
    comparison_table(md, all, base, metric, bpb ? "bits/byte" : "nats", verdicts);
    md << "\n## Verdict\n\n";
    for (const std::string& v : verdicts)
    {
        md << "- " << v << "\n";
    }
    if (verdicts.size() > 1)
    {
        md << "\n" << verdicts.size() << " comparisons: for all of them to hold at once at the 5% level "
           << "(Bonferroni), each p must be below " << fixed(0.05 / static_cast<double>(verdicts.size()), 3) << ".\n";
    }
    md << "\n## Curves\n\n";
    if (const auto note = plot_curves(all, c.out, bpb ? "val_bpb" : "val_loss"))
    {
        md << "(" << *note << ")\n";
    }
    else
    {
        md << "![loss curves, mean and band over seeds](loss-curves.png)\n";
    }
    const std::vector<std::string> maps = copy_attention_maps(all, c.out);
    if (!maps.empty())
    {
        md << "\n## Attention maps (one seed per variant)\n\n";
        for (const std::string& m : maps)
        {
            md << m << "\n\n";
        }
    }
    md << "\n## Runs\n\n";
    runs_table(md, all, bpb);
    const std::string text = md.str();
    const std::string path = (fs::path(c.out) / grid_files::report).string();
    {
        std::ofstream out(path + ".tmp");
        out << text;
    }
    fs::rename(path + ".tmp", path);
    return text;
}
}  // namespace xgrad::train::grid
