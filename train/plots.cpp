#include "train/plots.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

extern char** environ;

namespace xgrad::train
{
namespace fs = std::filesystem;

bool gnuplot_available()
{
    const char* path = std::getenv("PATH");
    std::istringstream folders(path ? path : "");
    for (std::string folder; std::getline(folders, folder, ':');)
    {
        const fs::path program = fs::path(folder.empty() ? "." : folder) / "gnuplot";
        std::error_code ec;
        if (::access(program.c_str(), X_OK) == 0 && !fs::is_directory(program, ec))
        {
            return true;
        }
    }
    return false;
}

namespace
{
// Runs gnuplot on the script file `script`, its standard input empty; returns gnuplot's exit status, or -1
// when it could not be run. `output` receives the start of what it printed (standard output and error).
int run_gnuplot_script(const std::string& script, std::string& output)
{
    // gnuplot, found on PATH, gets the script's path as its one argument: no shell parses it, so any byte
    // of a path is taken as it is. A path that begins with '-' is made relative so that it is not an option.
    const std::string argument = script.rfind('-', 0) == 0 ? "./" + script : script;
    int pipe_ends[2];  // close-on-exec: no other thread's child inherits them; the dup2'd copies stay open
    if (::pipe2(pipe_ends, O_CLOEXEC) != 0)
    {
        return -1;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, pipe_ends[1], 1);
    posix_spawn_file_actions_adddup2(&actions, pipe_ends[1], 2);
    char program[] = "gnuplot";
    char* argv[] = {program, const_cast<char*>(argument.c_str()), nullptr};
    pid_t pid = 0;
    const int spawned = posix_spawnp(&pid, program, &actions, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(pipe_ends[1]);
    std::string printed;
    char buffer[256];
    for (ssize_t n; (n = ::read(pipe_ends[0], buffer, sizeof buffer)) != 0;)
    {
        if (n < 0 && errno == EINTR)
        {
            continue;
        }
        if (n < 0)
        {
            break;
        }
        if (printed.size() < 4096)  // the first lines say what went wrong; the rest is drained
        {
            printed.append(buffer, static_cast<std::size_t>(n));
        }
    }
    ::close(pipe_ends[0]);
    output = printed;
    if (spawned != 0)
    {
        return -1;
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0)
    {
        if (errno != EINTR)
        {
            return -1;
        }
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
}  // namespace

std::string gnuplot_quoted(const std::string& s)
{
    std::string out = "'";
    for (char c : s)
    {
        out += c == '\'' ? std::string("''") : std::string(1, c);
    }
    return out + "'";
}

draw_result draw_png(const std::string& commands, const std::string& png, int width, int height,
                     const std::string& script, std::string* first_line)
{
    const std::string tmp_png = png + ".tmp";
    {
        std::ofstream out(script);
        out << "set terminal pngcairo size " << width << "," << height << " noenhanced font ',10'\nset output "
            << gnuplot_quoted(tmp_png) << "\n"
            << commands << "\nunset output\n";
        if (!out)
        {
            return draw_result::script_not_written;
        }
    }
    if (!gnuplot_available())
    {
        return draw_result::no_gnuplot;
    }
    std::string output;
    std::error_code ec;
    if (run_gnuplot_script(script, output) == 0 && fs::exists(tmp_png))
    {
        fs::rename(tmp_png, png, ec);
        if (!ec)
        {
            return draw_result::drawn;
        }
    }
    fs::remove(tmp_png, ec);
    if (first_line)
    {
        *first_line = output.substr(0, output.find('\n'));
    }
    return draw_result::failed;
}

namespace
{
// Draws `commands` into png through a script beside it (png + ".gp", removed after); a one-line note
// when the picture was not drawn.
plot_note run_gnuplot(const std::string& commands, const std::string& png, int width = 1200, int height = 800)
{
    const std::string script = png + ".gp";
    std::string first_line;
    const draw_result result = draw_png(commands, png, width, height, script, &first_line);
    std::error_code ec;
    fs::remove(script, ec);
    switch (result)
    {
    case draw_result::drawn:
        return std::nullopt;
    case draw_result::no_gnuplot:
        return "note: gnuplot not found, " + png + " not drawn (apt-get install gnuplot-nox)";
    case draw_result::script_not_written:
        return "note: cannot write " + script + ", " + png + " not drawn";
    case draw_result::failed:
        break;
    }
    return "note: gnuplot could not draw " + png + (first_line.empty() ? "" : ": " + first_line);
}
}  // namespace

plot_note plot_loss_curves(const std::vector<std::string>& logs, const std::vector<std::string>& labels,
                           const std::string& png, const std::string& title)
{
    std::ostringstream s;
    s << "set datafile separator ','\nset key outside right top\nset grid\nset xlabel 'step'\n"
      << "set ylabel 'loss (nats per token)'\nset title " << gnuplot_quoted(title) << "\n";
    s << "plot ";
    for (std::size_t i = 0; i < logs.size(); ++i)
    {
        const std::string label = i < labels.size() ? labels[i] : logs[i];
        s << (i ? ", \\\n     " : "") << gnuplot_quoted(logs[i]) << " using 1:2 every ::1 with lines lw 1 lc " << i + 1
          << " title " << gnuplot_quoted(label + " train") << ", " << gnuplot_quoted(logs[i])
          << " using 1:($3 == $3 ? $3 : 1/0) every ::1 with linespoints lw 2 pt 7 ps 0.6 dt 2 lc " << i + 1
          << " title " << gnuplot_quoted(label + " validation");
    }
    s << "\n";
    return run_gnuplot(s.str(), png);
}

plot_note plot_bits_per_byte(const std::vector<std::string>& logs, const std::vector<std::string>& labels,
                             const std::string& png, const std::string& title)
{
    constexpr int val_bpb_column = 9;  // train/progress.hpp, log_header()
    std::ostringstream s;
    s << "set datafile separator ','\nset key outside right top\nset grid\nset xlabel 'step'\n"
      << "set ylabel 'validation loss (bits per byte)'\nset title " << gnuplot_quoted(title) << "\n";
    s << "plot ";
    for (std::size_t i = 0; i < logs.size(); ++i)
    {
        const std::string label = i < labels.size() ? labels[i] : logs[i];
        s << (i ? ", \\\n     " : "") << gnuplot_quoted(logs[i]) << " using 1:($" << val_bpb_column << " == $"
          << val_bpb_column << " ? $" << val_bpb_column << " : 1/0) every ::1 with linespoints lw 2 pt 7 ps 0.6 lc "
          << i + 1 << " title " << gnuplot_quoted(label);
    }
    s << "\n";
    return run_gnuplot(s.str(), png);
}

plot_note plot_sharpness(const std::string& log, const std::string& png, const std::string& title)
{
    constexpr int lr_column = 4, sharpness_column = 10;  // train/progress.hpp, log_header()
    std::ostringstream s;
    s << "set datafile separator ','\nset key outside right top\nset grid\nset xlabel 'step'\n"
      << "set ylabel 'top Hessian eigenvalue'\nset logscale y\nset title " << gnuplot_quoted(title) << "\n";
    s << "plot " << gnuplot_quoted(log) << " using 1:($" << sharpness_column << " == $" << sharpness_column << " ? $"
      << sharpness_column << " : 1/0) every ::1 with linespoints lw 2 pt 7 ps 0.6 lc 1 title 'sharpness', \\\n     "
      << gnuplot_quoted(log) << " using 1:(2 / $" << lr_column << ") every ::1 with lines lw 1 dt 2 lc 2 title '2 / lr'\n";
    return run_gnuplot(s.str(), png);
}

plot_note plot_attention_maps(const std::vector<array<double>>& weights, const std::string& text,
                              const std::string& png, const std::string& title)
{
    if (weights.empty())
    {
        return "note: no attention weights to draw";
    }
    const std::size_t layers = weights.size(), heads = weights.front().shape()[0], t = weights.front().shape()[1];
    std::ostringstream s;
    s << "set palette defined (0 'white', 0.5 '#6baed6', 1 '#08306b')\nset cbrange [0:1]\nunset colorbox\n"
      << "set size ratio -1\nset xrange [-0.5:" << t - 0.5 << "]\nset yrange [" << t - 0.5 << ":-0.5]\n"
      << "set tics scale 0 font ',7'\n";
    // The sentence's characters as tick labels (spaces and newlines shown as symbols).
    std::string tics;
    for (std::size_t i = 0; i < t && i < text.size(); ++i)
    {
        const char c = text[i];
        const std::string shown = c == ' '    ? "_"
                                  : c == '\n' ? "\\\\n"
                                  : c == '\t' ? "\\\\t"
                                  : c == '"'  ? "''"
                                              : std::string(1, c);
        tics += (i ? ", " : "") + std::string("\"") + (c == '\\' ? "\\\\" : shown) + "\" " + std::to_string(i);
    }
    s << "set xtics (" << tics << ")\nset ytics (" << tics << ")\n";
    s << "set multiplot layout " << layers << "," << heads << " title " << gnuplot_quoted(title) << "\n";
    for (std::size_t l = 0; l < layers; ++l)
    {
        for (std::size_t h = 0; h < heads; ++h)
        {
            s << "set title 'layer " << l << ", head " << h << "'\n";
            s << "plot '-' matrix with image notitle\n";
            for (std::size_t i = 0; i < t; ++i)
            {
                for (std::size_t j = 0; j < t; ++j)
                {
                    s << (j ? " " : "") << weights[l](h, i, j);
                }
                s << "\n";
            }
            s << "e\n";
        }
    }
    s << "unset multiplot\n";
    // Panels of about 300 x 300 pixels, one row per layer.
    const int width = static_cast<int>(std::max<std::size_t>(2, heads)) * 300;
    const int height = static_cast<int>(layers) * 320 + 60;
    return run_gnuplot(s.str(), png, width, height);
}
}  // namespace xgrad::train
