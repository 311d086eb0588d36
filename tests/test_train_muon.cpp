// xgrad-train's --optimizer muon (docs/training.md, "Muon"): Muon on the matrices inside the blocks and
// AdamW on the rest, both in the checkpoint's state; --resume that logs exactly what an unbroken run logs;
// a checkpoint of one optimiser refused by the other; bad values refused before anything is written.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/checkpoint.hpp"
#include "test_util.hpp"
#include "train/trainer.hpp"

namespace test_train_muon
{
using namespace xgrad;
using namespace xgrad::train;
using xgrad::test::temp_dir;
namespace fs = std::filesystem;

namespace
{
std::string write_text(const temp_dir& dir, const std::string& text)
{
    const std::string path = dir / "text.txt";
    std::ofstream(path, std::ios::binary) << text;
    return path;
}

train_options muon_run(const std::string& data, const std::string& out, std::int64_t steps)
{
    train_options o;
    o.data = data;
    o.out = out;
    o.steps = steps;
    o.decay_steps = 12;
    o.model = {0, 16, 2, 16, 2, 0};
    o.batch = 4;
    o.lr = 1e-2;
    o.eval_every = 4;
    o.eval_windows = 8;
    o.save_every = 5;
    o.sample_tokens = 0;
    o.plots = false;
    o.optimizer = "muon";
    return o;
}

// The log's rows without the columns of speed, time and memory.
std::vector<std::string> loss_rows(const std::string& path, std::size_t from_step = 1)
{
    std::ifstream in(path);
    std::vector<std::string> rows;
    std::string line;
    std::getline(in, line);  // the header
    for (std::size_t step = 1; std::getline(in, line); ++step)
    {
        if (step >= from_step)
        {
            std::stringstream cells(line);
            std::string cell, kept;
            for (int column = 0; column < 5 && std::getline(cells, cell, ','); ++column)
            {
                kept += cell + ",";
            }
            rows.push_back(kept);
        }
    }
    return rows;
}

std::string error_of(const train_options& o)
{
    try
    {
        run_training(o);
    }
    catch (const std::exception& e)
    {
        return e.what();
    }
    return "no error";
}
}  // namespace

TEST_CASE("--optimizer muon: Muon's momentum for the blocks' matrices, AdamW's moments for the rest")
{
    temp_dir dir;
    const std::string data = write_text(dir, test::practice_text());
    run_training(muon_run(data, dir / "run", 3));
    const auto ck = io::load_checkpoint<float>(dir / "run/model.safetensors");
    CHECK(ck.metadata.at("optimizer") == "muon");
    for (const std::string matrix : {"attn.W_Q", "attn.W_K", "attn.W_V", "attn.W_O", "mlp.W_fc", "mlp.W_proj"})
    {
        for (const std::string block : {"blocks.0.", "blocks.1."})
        {
            CAPTURE(block + matrix);
            CHECK(ck.optimiser.count("optim.momentum." + block + matrix) == 1);
            CHECK(ck.optimiser.count("optim.exp_avg." + block + matrix) == 0);
        }
    }
    for (const std::string rest : {"wte", "wpe", "blocks.0.ln_1.weight", "blocks.1.mlp.b_fc", "ln_f.weight"})
    {
        CAPTURE(rest);
        CHECK(ck.optimiser.count("optim.exp_avg." + rest) == 1);
        CHECK(ck.optimiser.count("optim.exp_avg_sq." + rest) == 1);
        CHECK(ck.optimiser.count("optim.momentum." + rest) == 0);
    }
    CHECK(ck.optimiser.at("optim.step").values() == 3.0);
}

TEST_CASE("--optimizer adamw writes the checkpoint it always wrote: no optimizer key, no momentum")
{
    temp_dir dir;
    const std::string data = write_text(dir, test::practice_text());
    auto o = muon_run(data, dir / "run", 2);
    o.optimizer = "adamw";
    run_training(o);
    const auto ck = io::load_checkpoint<float>(dir / "run/model.safetensors");
    CHECK(ck.metadata.count("optimizer") == 0);
    CHECK(ck.optimiser.count("optim.exp_avg.blocks.0.attn.W_Q") == 1);
    CHECK(ck.optimiser.count("optim.momentum.blocks.0.attn.W_Q") == 0);
}

TEST_CASE("Muon trains differently from AdamW and lowers the loss")
{
    temp_dir dir;
    const std::string data = write_text(dir, test::practice_text());
    const auto muon = run_training(muon_run(data, dir / "muon", 12));
    auto o = muon_run(data, dir / "adamw", 12);
    o.optimizer = "adamw";
    run_training(o);
    CHECK(loss_rows(dir / "muon/log.csv") != loss_rows(dir / "adamw/log.csv"));
    const auto first = loss_rows(dir / "muon/log.csv").front();
    CHECK(muon.train_loss < std::stod(first.substr(first.find(',') + 1)));
}

TEST_CASE("--resume with Muon logs exactly what a run that never stopped logs")
{
    temp_dir dir;
    const std::string data = write_text(dir, test::practice_text());
    run_training(muon_run(data, dir / "resumed", 6));
    auto second = muon_run(data, dir / "resumed", 12);
    second.resume = true;
    CHECK(run_training(second).first_step == 6);
    run_training(muon_run(data, dir / "straight", 12));
    // Rows 7..12 equal in every loss column (row 6 differs in val_loss: the first run ended there).
    CHECK(loss_rows(dir / "resumed/log.csv", 7) == loss_rows(dir / "straight/log.csv", 7));
    const auto resumed = io::load_checkpoint<float>(dir / "resumed/model.safetensors");
    const auto straight = io::load_checkpoint<float>(dir / "straight/model.safetensors");
    for (const auto& [name, tensor] : straight.optimiser)
    {
        CAPTURE(name);
        CHECK(tensor.values == resumed.optimiser.at(name).values);
    }
}

TEST_CASE("--resume across optimisers is refused, naming both flags, and changes nothing")
{
    temp_dir dir;
    const std::string data = write_text(dir, test::practice_text());
    run_training(muon_run(data, dir / "muon", 2));
    auto adamw = muon_run(data, dir / "adamw", 2);
    adamw.optimizer = "adamw";
    run_training(adamw);
    const auto before = fs::last_write_time(dir / "muon/model.safetensors");
    const std::string log_before = test::read_bytes(dir / "muon/log.csv");

    auto o = muon_run(data, dir / "muon", 4);
    o.resume = true;
    o.optimizer = "adamw";
    const std::string to_adamw = error_of(o);
    CHECK(to_adamw.find("resume: ") == 0);
    CHECK(to_adamw.find("was trained with optimizer muon, not adamw") != std::string::npos);
    CHECK(fs::last_write_time(dir / "muon/model.safetensors") == before);
    CHECK(test::read_bytes(dir / "muon/log.csv") == log_before);

    o = muon_run(data, dir / "adamw", 4);
    o.resume = true;
    CHECK(error_of(o).find("was trained with optimizer adamw, not muon") != std::string::npos);
}

TEST_CASE("bad Muon options are refused by name before anything is written")
{
    temp_dir dir;
    const std::string data = write_text(dir, test::practice_text());
    auto o = muon_run(data, dir / "run", 2);
    o.optimizer = "sgd";
    CHECK(error_of(o) == "optimizer 'sgd' is not one of adamw, muon");
    o = muon_run(data, dir / "run", 2);
    o.muon_lr = 0;
    CHECK(error_of(o) == "muon_lr must be a positive number");
    o = muon_run(data, dir / "run", 2);
    o.muon_momentum = 1;
    CHECK(error_of(o).find("muon_momentum must be in [0, 1)") == 0);
    CHECK_FALSE(fs::exists(dir / "run"));
}
}  // namespace test_train_muon
