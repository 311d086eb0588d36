// xgrad-train's sharpness: the `sharpness` column of log.csv on the steps asked for, and sharpness.png.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "test_util.hpp"
#include "train/plots.hpp"
#include "train/trainer.hpp"

namespace test_gradgrad_train
{
using namespace xgrad;
using namespace xgrad::train;
using namespace xgrad::test;

TEST_CASE("sharpness every 2 steps: the column holds the top Hessian eigenvalue there, empty elsewhere")
{
    temp_dir dir;
    write_bytes(dir / "text.txt", practice_text());
    train_options o;
    o.data = dir / "text.txt";
    o.out = dir / "run";
    o.steps = 5;
    o.model = { 0, 16, 2, 16, 2, 0 };
    o.batch = 4;
    o.lr = 1e-2;
    o.eval_windows = 8;
    o.sample_tokens = 0;
    o.plots = gnuplot_available();
    o.sharpness_every = 2;
    o.sharpness_iters = 8;
    run_training(o);
    std::ifstream in(dir / "run/log.csv");
    std::string line;
    std::getline(in, line);
    REQUIRE(line.substr(line.rfind(',') + 1) == "sharpness");
    for (int step = 1; std::getline(in, line); ++step)
    {
        const std::string cell = line.substr(line.rfind(',') + 1);
        CAPTURE(step);
        CHECK(cell.empty() == (step % 2 != 0));
        if (!cell.empty())
        {
            const double sharpness = std::stod(cell);
            CHECK(std::isfinite(sharpness));
            CHECK(std::abs(sharpness) > 1e-3); // a trained GPT's loss is curved
        }
    }
    if (o.plots)
    {
        CHECK(std::ifstream(dir / "run/sharpness.png").good());
    }
}

TEST_CASE("sharpness_every 0 (the default): the column stays empty")
{
    temp_dir dir;
    write_bytes(dir / "text.txt", practice_text());
    train_options o;
    o.data = dir / "text.txt";
    o.out = dir / "run";
    o.steps = 2;
    o.model = { 0, 16, 1, 16, 2, 0 };
    o.batch = 2;
    o.eval_windows = 4;
    o.sample_tokens = 0;
    o.plots = false;
    run_training(o);
    std::ifstream in(dir / "run/log.csv");
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line))
    {
        CHECK(line.back() == ','); // the sharpness cell is empty
    }
}
}  // namespace test_gradgrad_train
