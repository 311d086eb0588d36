// The library names option fields in its errors (train/option_error.hpp); xgrad-train says them as flags.
// Every flag that sets a field has its entry, and a library error reads right both ways.
#include <set>

#include <doctest/doctest.h>

#include "tools/train_args.hpp"
#include "train/option_error.hpp"

using namespace xgrad;

TEST_CASE("option_error: each {} names a field, {{ is a brace, literal() keeps typed text as it is")
{
    const train::option_error e("{} and {} are required", {"data", "out"});
    CHECK(std::string(e.what()) == "data and out are required");
    CHECK(e.message([](const std::string& f) { return "--" + f; }) == "--data and --out are required");
    CHECK(e.problem == train::option_problem::bad_value);

    const std::string path = "runs/{}/{{x";
    const train::option_error f("{}: " + train::option_error::literal(path) + " was trained with {} 2, not 4",
                                {"resume", "model.layers"}, train::option_problem::disagrees_with_files);
    CHECK(std::string(f.what()) == "resume: runs/{}/{{x was trained with model.layers 2, not 4");
    CHECK(f.message(tools::train_cli::flag_of_field) == "--resume: runs/{}/{{x was trained with --layers 2, not 4");
    CHECK(f.problem == train::option_problem::disagrees_with_files);
}

TEST_CASE("every xgrad-train flag that sets an option maps to a field and back")
{
    const std::vector<std::string> flags = tools::train_cli::train_flags();
    REQUIRE(flags.size() > 30);
    std::set<std::string> fields;
    for (const std::string& flag : flags)
    {
        CAPTURE(flag);
        // A flag without an entry would come back from flag_of_field(field) unchanged: no entry maps to it.
        bool found = false;
        for (const char* field : {"data", "out", "steps", "model.layers", "model.d_model", "model.heads",
                                  "model.kv_heads", "model.block_size", "batch", "lr", "warmup", "decay_steps",
                                  "seed", "threads", "resume", "tokenizer", "time_limit_s", "weight_decay",
                                  "clip", "eval_every", "eval_windows", "save_every", "sample_tokens", "plots",
                                  "max_memory", "detect_anomaly", "model.norm", "model.position",
                                  "model.rope_base", "model.mlp", "model.mlp_hidden", "model.bias",
                                  "model.tied_head", "dropout", "optimizer", "muon_lr", "muon_momentum",
                                  "sharpness_every", "sharpness_iters"})
        {
            if (tools::train_cli::flag_of_field(field) == flag)
            {
                found = true;
                fields.insert(field);
            }
        }
        CHECK(found);
    }
    CHECK(fields.size() == flags.size());  // one field per flag
    CHECK(tools::train_cli::flag_of_field("not_an_option") == "not_an_option");
}

TEST_CASE("the training loop's own refusals name fields, as flags on the command line")
{
    train::train_options o;
    o.data = "x.txt";
    o.out = "out";
    o.steps = 0;
    try
    {
        train::run_training(o);
        FAIL("steps = 0 was accepted");
    }
    catch (const train::option_error& e)
    {
        CHECK(std::string(e.what()) == "steps must be at least 1, got 0");
        CHECK(e.message(tools::train_cli::flag_of_field) == "--steps must be at least 1, got 0");
    }
    o.steps = 1;
    o.tokenizer = "bpe:{}";
    try
    {
        train::run_training(o);
        FAIL("tokenizer bpe:{} was accepted");
    }
    catch (const train::option_error& e)
    {
        CHECK(e.message(tools::train_cli::flag_of_field).rfind("--tokenizer: 'bpe:{}' is not one of", 0) == 0);
    }
}
