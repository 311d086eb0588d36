// train/memory_estimate: the budget's parsing, saturation on sizes that overflow, xgrad-train refusing a
// run the machine cannot hold before it allocates, and the estimate against the peak resident memory of
// a real training run (an upper bound, within a factor of 2.5).
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <string>

#include "test_util.hpp"
#include "train/memory_estimate.hpp"
#include "train/trainer.hpp"

namespace test_memory_estimate
{
using namespace xgrad;
using namespace xgrad::train;
using xgrad::test::temp_dir;

namespace
{
constexpr std::uint64_t saturated = std::numeric_limits<std::uint64_t>::max();

train_options run_of(const temp_dir& dir,
                     std::size_t layers,
                     std::size_t d,
                     std::size_t heads,
                     std::size_t block,
                     std::size_t batch)
{
    const std::string data = dir / "text.txt";
    std::ofstream(data, std::ios::binary) << test::practice_text(3000);
    train_options o;
    o.data = data;
    o.out = dir / "run";
    o.steps = 2;
    o.model = {0, block, layers, d, heads, 0};
    o.batch = batch;
    o.eval_every = 100;
    o.eval_windows = 4;
    o.sample_tokens = 0;
    o.plots = false;
    return o;
}

// The message of the std::invalid_argument that run_training throws, or "" when it does not.
std::string refusal(const train_options& o)
{
    try
    {
        run_training(o, nullptr, false);
    }
    catch (const std::invalid_argument& e)
    {
        return e.what();
    }
    return "";
}

// VmHWM of this process, in bytes.
std::uint64_t peak_resident_bytes()
{
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
    {
        if (line.rfind("VmHWM:", 0) == 0)
        {
            return std::stoull(line.substr(6)) * 1024;
        }
    }
    return 0;
}

// Trains `o` in a child process and returns its peak resident memory (0 if the run failed).
std::uint64_t measured_peak(const train_options& o)
{
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0)
    {
        close(fds[0]);
        std::uint64_t peak = 0;
        try
        {
            run_training(o, nullptr, false);
            peak = peak_resident_bytes();
        }
        catch (...)
        {
        }
        const bool sent = write(fds[1], &peak, sizeof peak) == static_cast<ssize_t>(sizeof peak);
        _exit(sent ? 0 : 1);
    }
    close(fds[1]);
    std::uint64_t peak = 0;
    const bool received = read(fds[0], &peak, sizeof peak) == static_cast<ssize_t>(sizeof peak);
    close(fds[0]);
    int status = 0;
    waitpid(child, &status, 0);
    return received ? peak : 0;
}

}  // namespace

TEST_CASE("memory budgets: auto, bytes with binary suffixes, and errors that name the flag")
{
    CHECK(parse_memory_budget("123", "--max-memory").bytes == 123);
    CHECK(parse_memory_budget("4K", "--max-memory").bytes == 4096);
    CHECK(parse_memory_budget("512M", "--max-memory").bytes == 512ull << 20);
    CHECK(parse_memory_budget("2GiB", "--max-memory").bytes == 2ull << 30);
    CHECK(parse_memory_budget("1t", "--max-memory").bytes == 1ull << 40);
    CHECK(parse_memory_budget("1G", "--max-memory").source == "--max-memory");
    const memory_budget automatic = parse_memory_budget("auto", "--max-memory");
    CHECK(automatic.bytes > 0);
    CHECK((automatic.source.find("MemAvailable") != std::string::npos ||
           automatic.source.find("cgroup") != std::string::npos || automatic.source == "XGRAD_MAX_MEMORY"));
    for (const char* bad : {"", "-1", "1.5G", "G", "12X", "1GB2", "99999999999999999999", "16777216T"})
    {
        CAPTURE(bad);
        CHECK_THROWS_WITH_AS(parse_memory_budget(bad, "--max-memory"),
                             doctest::Contains("--max-memory must be 'auto' or a number of bytes"),
                             std::invalid_argument);
    }
}

TEST_CASE("memory estimates grow with every size and saturate instead of wrapping")
{
    const models::gpt_config base_config{256, 64, 2, 64, 4, 4};
    const gpt_sizes base = sizes_of(base_config);
    const std::uint64_t small = estimate_training(base, 16, 1).total();
    models::gpt_config wider_config = base_config;
    wider_config.d_model = 128;
    const gpt_sizes wider = sizes_of(wider_config);
    models::gpt_config deeper_config = base_config;
    deeper_config.layers = 4;
    const gpt_sizes deeper = sizes_of(deeper_config);
    CHECK(estimate_training(wider, 16, 1).total() > small);
    CHECK(estimate_training(deeper, 16, 1).total() > small);
    CHECK(estimate_training(base, 32, 1).total() > small);
    CHECK(estimate_training(base, 16, 2).total() > small);
    // The later variants keep more values (relu(x) beside its square, the normalised Q and K, the uncapped
    // logits); the window keeps none.
    for (const auto& [key, value] : std::map<std::string, std::string>{
           {"mlp", "relu2"}, {"qk_norm", "rms"}, {"logit_softcap", "30"}})
    {
        CAPTURE(key);
        const gpt_sizes later = sizes_of(models::config_with_values(base_config, {{key, value}}));
        CHECK(estimate_training(later, 16, 1).activations > estimate_training(base, 16, 1).activations);
    }

    // --layers 200 --d-model 4096: about 40 billion parameters x 80 bytes.
    const gpt_sizes huge = sizes_of(models::gpt_config{256, 64, 200, 4096, 4, 4});
    CHECK(estimate_training(huge, 16, 1).total() > (3000ull << 30));
    const gpt_sizes absurd = sizes_of(models::gpt_config{256, 64, 2, std::uint64_t(1) << 62, 1, 1});
    const memory_estimate e = estimate_training(absurd, 16, 1);
    CHECK(e.total() == saturated);
    CHECK(e.describe().find("more than 16 EiB") != std::string::npos);
    CHECK(estimate_attention_run(1, std::uint64_t(1) << 40, std::uint64_t(1) << 40, 1, 1, 8).total() ==
          saturated);
    // attention weights of 131072^2 values, six arrays of them in float64: about 768 GiB.
    CHECK(estimate_attention_run(1, 131072, 131072, 1, 1, 8).total() > (700ull << 30));
    CHECK(estimate_gpt_run(base, 65536, 1, 8, true).total() <
          estimate_gpt_run(wider, 65536, 1, 8, true).total());
}

TEST_CASE("xgrad-train refuses a run that needs more memory than is available, saying how it estimated")
{
    temp_dir dir;
    train_options o = run_of(dir, 200, 4096, 4, 64, 16);
    const std::string message = refusal(o);
    INFO(message);
    CHECK(message.find("this run needs about ") == 0);
    CHECK(message.find("parameters ") != std::string::npos);
    CHECK(message.find("Adam state ") != std::string::npos);
    CHECK(message.find("activations ") != std::string::npos);
    CHECK(message.find("B = 16 windows of T = 64 tokens, 1 thread") != std::string::npos);
    CHECK(message.find("available (") != std::string::npos);
    CHECK(message.find("or max_memory BYTES to insist") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(dir / "run/model.safetensors"));

    // A small run refused by a small budget, the option named as the budget's source.
    o = run_of(dir, 1, 16, 2, 16, 4);
    o.max_memory = "1M";
    const std::string small = refusal(o);
    INFO(small);
    CHECK(small.find("more than the 1.0 MiB available (max_memory)") != std::string::npos);
    o.max_memory = "lots";
    CHECK(refusal(o).find("max_memory must be 'auto'") != std::string::npos);
    o.max_memory = "64G";  // more than it needs: trains
    CHECK(refusal(o).empty());
    CHECK(std::filesystem::exists(dir / "run/model.safetensors"));
}

TEST_CASE("the training estimate bounds the measured peak resident memory, within a factor of 2.5")
{
    if (test::under_address_sanitizer)
    {
        MESSAGE("skipped under AddressSanitizer");
        return;
    }
    struct shape
    {
        std::size_t layers, d, heads, block, batch;
    };
    for (const shape s : {shape{2, 64, 4, 64, 16}, shape{1, 128, 4, 32, 32}})
    {
        temp_dir dir;
        const train_options o = run_of(dir, s.layers, s.d, s.heads, s.block, s.batch);
        models::gpt_config c = o.model;
        c.vocab_size = 14;  // the distinct bytes of test::practice_text()
        const std::uint64_t estimate = estimate_training(sizes_of(c), o.batch, 1).total();
        const std::uint64_t measured = measured_peak(o);
        CAPTURE(s.layers);
        CAPTURE(s.d);
        INFO("estimate " << estimate / 1024 << " KiB, measured peak " << measured / 1024 << " KiB");
        REQUIRE(measured > 0);
        CHECK(measured <= estimate);
        CHECK(static_cast<double>(estimate) <= 2.5 * static_cast<double>(measured));
    }
}
}  // namespace test_memory_estimate
