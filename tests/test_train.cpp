// The training loop of xgrad-train: log.csv and checkpoints as docs/spec.md says, the same losses for the same
// flags, --resume that logs exactly what an unbroken run logs, clear errors, and a bf16 run whose losses
// stay near float32's (kernels/precision.hpp).
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "io/checkpoint.hpp"
#include "kernels/precision.hpp"
#include "test_util.hpp"
#include "train/plots.hpp"
#include "train/progress.hpp"
#include "train/trainer.hpp"

namespace test_train
{
using namespace xgrad;
using namespace xgrad::train;
using xgrad::test::temp_dir;

namespace
{
std::string write_text(const temp_dir& dir, const std::string& text, const std::string& name = "text.txt")
{
    const std::string path = dir / name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
}

train_options tiny_run(const std::string& data, const std::string& out, std::int64_t steps)
{
    train_options o;
    o.data = data;
    o.out = out;
    o.steps = steps;
    o.model = {0, 16, 2, 16, 2, 0};
    o.batch = 4;
    o.lr = 1e-2;
    o.eval_every = 4;
    o.eval_windows = 8;
    o.save_every = 5;
    o.sample_tokens = 0;
    o.plots = false;
    return o;
}

std::vector<std::vector<std::string>> read_log(const std::string& path)
{
    std::ifstream in(path);
    std::vector<std::vector<std::string>> rows;
    std::string line;
    while (std::getline(in, line))
    {
        std::vector<std::string> cells;
        std::stringstream cells_in(line);
        std::string cell;
        while (std::getline(cells_in, cell, ','))
        {
            cells.push_back(cell);
        }
        if (!line.empty() && line.back() == ',')
        {
            cells.push_back("");
        }
        rows.push_back(cells);
    }
    return rows;
}

// step, train_loss, val_loss, lr of each row (the columns that must match bit for bit).
std::vector<std::string> loss_columns(const std::vector<std::vector<std::string>>& rows, std::size_t first_row = 1)
{
    std::vector<std::string> out;
    for (std::size_t i = first_row; i < rows.size(); ++i)
    {
        out.push_back(rows[i][0] + "," + rows[i][1] + "," + rows[i][2] + "," + rows[i][3]);
    }
    return out;
}
}  // namespace

TEST_CASE("a run writes log.csv with a row per step and a checkpoint with the step, vocab and optimiser state")
{
    temp_dir dir;
    const std::string data = write_text(dir, test::practice_text());
    const auto summary = run_training(tiny_run(data, dir / "run", 9));
    CHECK(summary.last_step == 9);
    const auto rows = read_log(dir / "run/log.csv");
    REQUIRE(rows.size() == 10);
    CHECK(rows[0] == std::vector<std::string>{"step", "train_loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "elapsed_s", "rss_mib", "val_bpb", "sharpness"});
    for (std::size_t s = 1; s <= 9; ++s)
    {
        CHECK(rows[s][0] == std::to_string(s));
        CHECK(rows[s][2].empty() == !(s == 4 || s == 8 || s == 9));  // validation every 4 steps and at the last
    }
    // lr: W = min(100, 9 / 10) = 0 (no warm-up), so the cosine starts at step 1 and ends at X / 10 at D = 9
    const double pi = std::acos(-1.0);
    CHECK(std::stod(rows[1][3]) == doctest::Approx(1e-3 + 9e-3 * (1 + std::cos(pi / 9)) / 2).epsilon(1e-8));
    CHECK(std::stod(rows[9][3]) == doctest::Approx(1e-3));
    const auto ck = io::load_checkpoint<float>(dir / "run/model.safetensors");
    CHECK(ck.metadata.at("step") == "9");
    CHECK(ck.metadata.at("vocab") == "[10, 32, 33, 46, 97, 99, 100, 101, 102, 103, 104, 109, 110, 111, 114, 115, 116, 117]");
    CHECK(ck.params.config.vocab_size == 18);
    CHECK(ck.optimiser.count("optim.step") == 1);
    CHECK(ck.optimiser.count("optim.exp_avg.wte") == 1);
}

TEST_CASE("the same flags and seed give the same losses; another seed does not")
{
    temp_dir dir;
    const std::string data = write_text(dir, test::practice_text());
    run_training(tiny_run(data, dir / "a", 6));
    run_training(tiny_run(data, dir / "b", 6));
    auto other = tiny_run(data, dir / "c", 6);
    other.seed = 2;
    run_training(other);
    CHECK(loss_columns(read_log(dir / "a/log.csv")) == loss_columns(read_log(dir / "b/log.csv")));
    CHECK(loss_columns(read_log(dir / "a/log.csv")) != loss_columns(read_log(dir / "c/log.csv")));
}

TEST_CASE("--resume logs exactly what a run that never stopped logs (docs/spec.md's 60/120 example, scaled down)")
{
    temp_dir dir;
    const std::string data = write_text(dir, test::practice_text());
    auto first = tiny_run(data, dir / "resumed", 6);
    first.decay_steps = 12;
    run_training(first);
    auto second = first;
    second.steps = 12;
    second.resume = true;
    const auto summary = run_training(second);
    CHECK(summary.first_step == 6);
    auto straight = tiny_run(data, dir / "straight", 12);
    straight.decay_steps = 12;
    run_training(straight);
    const auto resumed_rows = read_log(dir / "resumed/log.csv");
    const auto straight_rows = read_log(dir / "straight/log.csv");
    REQUIRE(resumed_rows.size() == 13);
    // Rows 7..12 match in every loss column. Row 6 differs only in val_loss: the first run ended there,
    // and a run measures validation at its last step.
    CHECK(loss_columns(resumed_rows, 7) == loss_columns(straight_rows, 7));
    for (std::size_t s = 1; s <= 6; ++s)
    {
        CHECK(resumed_rows[s][1] == straight_rows[s][1]);
    }
    CHECK(resumed_rows[6][2] != "");
    CHECK(straight_rows[6][2] == "");
}

TEST_CASE("a resumed run drops log rows written after its checkpoint")
{
    temp_dir dir;
    const std::string data = write_text(dir, test::practice_text());
    auto o = tiny_run(data, dir / "run", 7);  // checkpoints at 5 and 7
    o.save_every = 5;
    run_training(o);
    // pretend the run was killed after logging step 7 but before its checkpoint: put step 5's back
    auto five = tiny_run(data, dir / "five", 5);
    run_training(five);
    std::filesystem::copy_file(dir / "five/model.safetensors", dir / "run/model.safetensors",
                               std::filesystem::copy_options::overwrite_existing);
    o.resume = true;
    o.steps = 8;
    run_training(o);
    const auto rows = read_log(dir / "run/log.csv");
    REQUIRE(rows.size() == 9);
    for (std::size_t s = 1; s <= 8; ++s)
    {
        CHECK(rows[s][0] == std::to_string(s));
    }
}

TEST_CASE("an interrupt stops after the current step with a checkpoint of it")
{
    temp_dir dir;
    const std::string data = write_text(dir, test::practice_text());
    volatile std::sig_atomic_t flag = 1;
    auto o = tiny_run(data, dir / "run", 50);
    o.interrupt = &flag;
    const auto s = run_training(o);
    CHECK(s.interrupted);
    CHECK(s.last_step == 1);
    CHECK(io::load_checkpoint<float>(dir / "run/model.safetensors").metadata.at("step") == "1");
}

TEST_CASE("training lowers the loss")
{
    temp_dir dir;
    const std::string data = write_text(dir, test::practice_text());
    auto o = tiny_run(data, dir / "run", 60);
    o.eval_every = 0;
    const auto s = run_training(o);
    const auto rows = read_log(dir / "run/log.csv");
    CHECK(std::stod(rows[1][1]) > 2.5);  // about log(18) = 2.89 at the start
    CHECK(s.val_loss < 2.0);
}

TEST_CASE("bad options and bad data are refused with one clear message")
{
    temp_dir dir;
    const std::string data = write_text(dir, test::practice_text());
    auto expect = [&](train_options o, const std::string& words) {
        CAPTURE(words);
        try
        {
            run_training(o);
            FAIL("no error");
        }
        catch (const std::exception& e)
        {
            CHECK(std::string(e.what()).find(words) != std::string::npos);
            CHECK(std::string(e.what()).find('\n') == std::string::npos);
        }
    };
    auto o = tiny_run(data, dir / "run", 3);
    o.steps = 0;
    expect(o, "steps must be at least 1");
    o = tiny_run(data, dir / "run", 3);
    o.model.heads = 3;
    expect(o, "not divisible");
    o = tiny_run(dir / "missing.txt", dir / "run", 3);
    expect(o, "cannot read");
    o = tiny_run(write_text(dir, "short", "short.txt"), dir / "run", 3);
    expect(o, "split has");
    o = tiny_run(data, dir / "nothing-here", 3);
    o.resume = true;
    expect(o, "no checkpoint");
    run_training(tiny_run(data, dir / "run", 2));
    o = tiny_run(data, dir / "run", 4);
    o.resume = true;
    o.model.layers = 3;
    expect(o, "was trained with model.layers 2, not 3");
}

TEST_CASE("gnuplot's string literals double a single quote, and a picture whose title and path hold one is drawn")
{
    CHECK(gnuplot_quoted("") == "''");
    CHECK(gnuplot_quoted("loss") == "'loss'");
    CHECK(gnuplot_quoted("it's 'x'") == "'it''s ''x'''");
    CHECK(gnuplot_quoted("a\\b \"c\"") == "'a\\b \"c\"'");  // no other escapes inside single quotes
    if (!gnuplot_available())
    {
        return;
    }
    const temp_dir dir;
    const std::string log = write_text(dir, "step,train_loss,val_loss\n1,2.5,2.6\n2,2.0,\n", "o'log.csv");
    const std::string png = dir / "it's.png";
    CHECK_FALSE(plot_loss_curves({log}, {"run 'a'"}, png, "the 'title'"));
    CHECK(std::filesystem::file_size(png) > 0);
}

TEST_CASE("durations print as m:ss or h:mm:ss")
{
    CHECK(format_duration(0) == "0:00");
    CHECK(format_duration(61) == "1:01");
    CHECK(format_duration(3723) == "1:02:03");
    CHECK(format_duration(-1) == "--:--");
}

// ---- variants, dropout and a module of one's own ---------------------------------------------------

namespace
{
train_options llama_run(const std::string& data, const std::string& out, std::int64_t steps)
{
    train_options o = tiny_run(data, out, steps);
    o.model.norm = models::norm_kind::rmsnorm;
    o.model.position = models::position_kind::rope;
    o.model.mlp = models::mlp_kind::swiglu;
    o.model.bias = models::bias_kind::none;
    o.model.kv_heads = 1;
    o.dropout = 0.1;
    return o;
}

std::string error_of(const train_options& o)
{
    try
    {
        run_training(o);
    }
    catch (const std::invalid_argument& e)
    {
        return e.what();
    }
    return "no std::invalid_argument";
}

// A two-parameter bigram model: logits = table[tokens] + bias.
struct bigram
{
    std::size_t vocab = 0;
    parameter<float> table, bias;

    template <class F>
    void visit(F&& f)
    {
        f("table", table, models::declare::normal({vocab, vocab}, 0.1));
        f("bias", bias, models::declare::zeros({vocab}));
    }
    struct output
    {
        var<float> logits, loss;
    };
    output forward(tape<float>& t, const ids_t& tokens, const ids_t* targets, const models::forward_options&) const
    {
        output r{ops::embedding(t.param(table), tokens) + t.param(bias), {}};
        r.loss = ops::cross_entropy(r.logits, *targets);
        return r;
    }
    std::map<std::string, std::string> metadata() const { return {{"vocab_size", std::to_string(vocab)}}; }
    void save(const std::string& path, const io::checkpoint_extras& e) const { io::save_module(path, *this, metadata(), e); }
    io::checkpoint_extras resume_from(const std::string& path) { return io::load_module(path, *this, metadata()); }
};
}  // namespace

TEST_CASE("a variant run with dropout resumes exactly, and stores its variant in the checkpoint")
{
    temp_dir dir;
    const std::string data = write_text(dir, test::practice_text());
    auto first = llama_run(data, dir / "resumed", 6);
    first.decay_steps = 12;
    run_training(first);
    auto second = first;
    second.steps = 12;
    second.resume = true;
    run_training(second);
    auto straight = llama_run(data, dir / "straight", 12);
    straight.decay_steps = 12;
    run_training(straight);
    const auto resumed_rows = read_log(dir / "resumed/log.csv"), straight_rows = read_log(dir / "straight/log.csv");
    REQUIRE(resumed_rows.size() == 13);
    CHECK(loss_columns(resumed_rows, 7) == loss_columns(straight_rows, 7));

    const auto ck = io::load_checkpoint<float>(dir / "straight/model.safetensors");
    CHECK(ck.metadata.at("norm") == "rmsnorm");
    CHECK(ck.metadata.at("position") == "rope");
    CHECK(ck.metadata.at("mlp") == "swiglu");
    CHECK(ck.metadata.at("bias") == "none");
    CHECK(ck.metadata.count("tied_head") == 0);  // the default is not written
    CHECK(ck.params.config.mlp == models::mlp_kind::swiglu);
}

TEST_CASE("dropout is seeded: the same seed gives the same losses, and it changes them")
{
    temp_dir dir;
    const std::string data = write_text(dir, test::practice_text());
    auto with = tiny_run(data, dir / "a", 4);
    with.dropout = 0.2;
    auto again = with;
    again.out = dir / "b";
    auto without = tiny_run(data, dir / "c", 4);
    run_training(with);
    run_training(again);
    run_training(without);
    const auto a = read_log(dir / "a/log.csv"), b = read_log(dir / "b/log.csv"), c = read_log(dir / "c/log.csv");
    CHECK(loss_columns(a) == loss_columns(b));
    CHECK(a[1][1] != c[1][1]);
    // Dropout is no part of the model: its checkpoint describes the same architecture.
    CHECK(models::config_metadata(io::load_checkpoint<float>(dir / "a/model.safetensors").params.config) ==
          models::config_metadata(io::load_checkpoint<float>(dir / "c/model.safetensors").params.config));

    auto bad = tiny_run(data, dir / "d", 2);
    bad.dropout = 1;
    CHECK(test::contains(error_of(bad), "dropout must be in [0, 1)"));
}

TEST_CASE("--resume refuses a checkpoint whose variant disagrees with the flags, naming the key")
{
    temp_dir dir;
    const std::string data = write_text(dir, test::practice_text());
    run_training(llama_run(data, dir / "run", 2));
    const std::string log_before = test::read_bytes(dir / "run/log.csv");
    const std::string ck_before = test::read_bytes(dir / "run/model.safetensors");
    const std::pair<const char*, void (*)(models::gpt_config&)> changes[] = {
        {"was trained with model.norm rmsnorm, not layernorm", [](models::gpt_config& c) { c.norm = models::norm_kind::layernorm; }},
        {"was trained with model.position rope, not none", [](models::gpt_config& c) { c.position = models::position_kind::none; }},
        {"was trained with model.rope_base 10000, not 500", [](models::gpt_config& c) { c.rope_base = 500; }},
        {"was trained with model.mlp swiglu, not gelu", [](models::gpt_config& c) { c.mlp = models::mlp_kind::gelu; }},
        {"was trained with model.mlp_hidden 64, not 24", [](models::gpt_config& c) { c.mlp_hidden = 24; }},
        {"was trained with model.bias none, not all", [](models::gpt_config& c) { c.bias = models::bias_kind::all; }},
        {"was trained with tied_head = true, not false (model.tied_head)",
         [](models::gpt_config& c) { c.tied_head = false; }},
    };
    for (const auto& [words, change] : changes)
    {
        CAPTURE(words);
        auto o = llama_run(data, dir / "run", 4);
        o.resume = true;
        change(o.model);
        const std::string message = error_of(o);
        CHECK(test::contains(message, words));
        CHECK(message.find('\n') == std::string::npos);
    }
    CHECK(test::read_bytes(dir / "run/log.csv") == log_before);
    CHECK(test::read_bytes(dir / "run/model.safetensors") == ck_before);
}

TEST_CASE("train_module trains a module of one's own, with checkpoints and an exact --resume")
{
    temp_dir dir;
    const text_corpus data = text_corpus::of_text(test::practice_text(), 16);
    auto options = [&](const std::string& out, std::int64_t steps) {
        train_options o = tiny_run("unused", dir / out, steps);
        o.decay_steps = 10;
        return o;
    };
    auto fresh = [&] {
        bigram m;
        m.vocab = data.vocabulary.size();
        models::initialise(m, 1);
        return m;
    };
    bigram straight = fresh();
    const train_summary s = train_module(straight, data, options("straight", 10));
    CHECK(s.parameters == data.vocabulary.size() * (data.vocabulary.size() + 1));
    CHECK(s.val_loss < std::log(static_cast<double>(data.vocabulary.size())));

    bigram first = fresh();
    train_module(first, data, options("resumed", 5));
    bigram second = fresh();
    auto more = options("resumed", 10);
    more.resume = true;
    CHECK(train_module(second, data, more).first_step == 5);
    CHECK(second.table.value() == straight.table.value());
    CHECK(loss_columns(read_log(dir / "resumed/log.csv"), 6) == loss_columns(read_log(dir / "straight/log.csv"), 6));

    bigram wider;
    wider.vocab = data.vocabulary.size() + 1;
    models::initialise(wider, 1);
    CHECK_THROWS_WITH_AS(train_module(wider, data, more), doctest::Contains("metadata 'vocab_size'"),
                         io::format_error);
}

TEST_CASE("a small bf16 training run ends within 0.05 nats of float32's validation loss")
{
    temp_dir dir;
    const std::string data = write_text(dir, test::practice_text());
    auto run = [&](matmul_precision precision, const std::string& out) {
        auto o = tiny_run(data, dir / out, 60);
        o.model = {0, 32, 2, 32, 4, 0};
        o.batch = 8;
        o.eval_every = 0;
        o.eval_windows = 16;
        o.save_every = 60;
        const precision_scope scope(precision);
        return run_training(o);
    };
    const auto fp32 = run(matmul_precision::fp32, "fp32");
    const auto bf16 = run(matmul_precision::bf16, "bf16");
    CHECK(fp32.val_loss < 2.0);  // both learned (about log(18) = 2.89 at the start)
    MESSAGE("validation loss after 60 steps: fp32 " << fp32.val_loss << ", bf16 " << bf16.val_loss);
    CHECK(std::fabs(bf16.val_loss - fp32.val_loss) <= 0.05);
    if (bf16_supported())
    {
        CHECK(bf16.val_loss != fp32.val_loss);
    }
}
}  // namespace test_train
