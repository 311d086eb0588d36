// xgrad-train's --tokenizer and --time (docs/spec.md, "Training on text"): a SentencePiece model trained
// on the training split and stored in the checkpoint, the same flags giving the same tokenizer and losses,
// val_bpb in log.csv, --resume refusing another tokenizer, and a wall-clock budget that ends the run (and
// log.csv) at the step that passes it, with validation and a checkpoint there.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "io/safetensors.hpp"
#include "test_util.hpp"
#include "train/option_error.hpp"
#include "train/text_data.hpp"
#include "train/tokenizer.hpp"
#include "train/trainer.hpp"

namespace test_train_tokenizer
{
using namespace xgrad;
using namespace xgrad::train;
using xgrad::test::temp_dir;

namespace
{
// Practice text with tabs, so that tokenizers must keep whitespace as it is.
std::string tokenizer_text()
{
    return test::practice_text(3000, 11,
                               {"the ", "cat ", "sat ", "on ", "a ", "mat. ", "dogs ", "run ", "fast!\n", "\tand "});
}

train_options small_run(const std::string& data, const std::string& out, const std::string& tokenizer)
{
    train_options o;
    o.data = data;
    o.out = out;
    o.steps = 8;
    o.model.block_size = 16;
    o.model.layers = 1;
    o.model.d_model = 16;
    o.model.heads = 2;
    o.batch = 4;
    o.lr = 1e-2;
    o.eval_every = 4;
    o.eval_windows = 8;
    o.save_every = 4;
    o.sample_tokens = 0;
    o.plots = false;
    o.tokenizer = tokenizer;
    return o;
}

std::vector<std::vector<std::string>> csv(const std::string& path)
{
    std::ifstream in(path);
    std::vector<std::vector<std::string>> rows;
    for (std::string line; std::getline(in, line);)
    {
        std::vector<std::string> cells;
        std::stringstream s(line);
        for (std::string cell; std::getline(s, cell, ',');)
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
} // namespace

TEST_CASE("--tokenizer bpe:N trains on the training split, stores the model, and logs val_bpb")
{
    temp_dir dir;
    const std::string text = tokenizer_text();
    const std::string data = dir / "text.txt";
    std::ofstream(data, std::ios::binary) << text;
    run_training(small_run(data, dir / "a", "bpe:48"));
    const auto ck = io::read_safetensors(dir / "a/model.safetensors");
    CHECK(ck.metadata.at("tokenizer") == "sentencepiece");
    CHECK(ck.metadata.count("vocab") == 0);
    CHECK(ck.metadata.at("vocab_size") == "48");
    const auto tok = tokenizer_from_metadata(ck.metadata, "a");
    CHECK(tok->size() == 48);

    // val_bpb = val_loss x (validation tokens / validation bytes) / ln 2, the split at byte floor(0.9 n).
    const std::size_t split = text.size() * 9 / 10;
    const double tokens_per_byte =
      double(tok->encode(text.substr(split)).size()) / double(text.size() - split);
    CHECK(tokens_per_byte < 0.5);
    const auto rows = csv(dir / "a/log.csv");
    REQUIRE(rows.size() == 9);
    CHECK(rows[0][8] == "val_bpb");
    std::size_t measured = 0;
    for (std::size_t r = 1; r < rows.size(); ++r)
    {
        CAPTURE(r);
        REQUIRE(rows[r].size() == rows[0].size());
        CHECK(rows[r][2].empty() == rows[r][8].empty());
        if (!rows[r][2].empty())
        {
            ++measured;
            CHECK(std::stod(rows[r][8]) ==
                  doctest::Approx(std::stod(rows[r][2]) * tokens_per_byte / std::log(2.0)).epsilon(1e-7));
        }
    }
    CHECK(measured == 2); // steps 4 and 8

    // The same flags: the same tokenizer, bit for bit, and the same losses.
    run_training(small_run(data, dir / "b", "bpe:48"));
    CHECK(io::read_safetensors(dir / "b/model.safetensors").metadata.at("tokenizer_model") ==
          ck.metadata.at("tokenizer_model"));
    const auto again = csv(dir / "b/log.csv");
    for (std::size_t r = 1; r < rows.size(); ++r)
    {
        CHECK(again[r][1] == rows[r][1]);
        CHECK(again[r][2] == rows[r][2]);
    }

    // --resume with another tokenizer is refused, naming the metadata key.
    train_options other = small_run(data, dir / "a", "unigram:48");
    other.steps = 12;
    other.resume = true;
    CHECK_THROWS_WITH_AS(run_training(other), doctest::Contains("another tokenizer"), train::option_error);
    other.tokenizer = "bpe:48";
    CHECK(run_training(other).last_step == 12);
}

TEST_CASE("with bytes, val_bpb is val_loss / ln 2")
{
    temp_dir dir;
    const std::string data = dir / "text.txt";
    std::ofstream(data, std::ios::binary) << tokenizer_text();
    run_training(small_run(data, dir / "run", "bytes"));
    const auto rows = csv(dir / "run/log.csv");
    REQUIRE(rows.size() == 9);
    CHECK(std::stod(rows[8][8]) == doctest::Approx(std::stod(rows[8][2]) / std::log(2.0)).epsilon(1e-7));
    CHECK(io::read_safetensors(dir / "run/model.safetensors").metadata.count("tokenizer") == 0);
}

TEST_CASE("--time ends the run at the step that passes it, with validation and a checkpoint there")
{
    temp_dir dir;
    const std::string data = dir / "text.txt";
    std::ofstream(data, std::ios::binary) << tokenizer_text();
    train_options o = small_run(data, dir / "run", "bytes");
    o.steps = 1000;
    o.time_limit_s = 1e-9; // passed by the end of the first step
    const train_summary s = run_training(o);
    CHECK(s.last_step == 1);
    CHECK_FALSE(s.interrupted);
    const auto rows = csv(dir / "run/log.csv");
    REQUIRE(rows.size() == 2);
    CHECK(rows[1][0] == "1");
    CHECK_FALSE(rows[1][2].empty());
    CHECK(io::read_safetensors(dir / "run/model.safetensors").metadata.at("step") == "1");
    o.time_limit_s = -1;
    CHECK_THROWS_WITH_AS(run_training(o), doctest::Contains("time_limit_s must be"), std::invalid_argument);
    o.time_limit_s = 0;
    o.tokenizer = "bpe:x";
    CHECK_THROWS_WITH_AS(run_training(o), doctest::Contains("tokenizer: 'bpe:x'"), std::invalid_argument);
}
}  // namespace test_train_tokenizer
