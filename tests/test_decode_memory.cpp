// Memory as a contract of loading and decoding: a checkpoint of N bytes of parameters loads with a peak
// below 2N plus a small constant (measured from /proc/self/status in a child process), a file whose header
// claims more than it holds is refused before anything is allocated from the claim, and a decoder's
// step, the sampler's draw and sample() past its prompt allocate nothing per token (every operator new
// of this program is counted).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>

#include "io/checkpoint.hpp"
#include "kernels/parallel.hpp"
#include "models/gpt_decode.hpp"
#include "test_util.hpp"

using namespace xgrad;
using xgrad::test::temp_dir;

// ---- every allocation counted ----------------------------------------------------------------------

namespace
{
std::atomic<long> allocations{0};
}  // namespace

void* operator new(std::size_t bytes)
{
    ++allocations;
    if (void* p = std::malloc(bytes == 0 ? 1 : bytes))
    {
        return p;
    }
    throw std::bad_alloc();
}
void* operator new(std::size_t bytes, std::align_val_t align)
{
    ++allocations;
    const std::size_t a = static_cast<std::size_t>(align);
    if (void* p = std::aligned_alloc(a, (bytes + a - 1) / a * a))
    {
        return p;
    }
    throw std::bad_alloc();
}
// The replaced operator new takes its memory from malloc, so free is its match (GCC cannot see that).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept
{
    std::free(p);
}
#pragma GCC diagnostic pop
void operator delete(void* p, std::size_t) noexcept
{
    operator delete(p);
}
void operator delete(void* p, std::align_val_t) noexcept
{
    operator delete(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept
{
    operator delete(p);
}

namespace
{
// ---- peak memory in a child process -----------------------------------------------------------------

// A field of /proc/self/status ("VmRSS", "VmHWM") in bytes.
long long status_bytes(const char* field)
{
    std::ifstream status("/proc/self/status");
    std::string line;
    const std::string prefix = std::string(field) + ":";
    while (std::getline(status, line))
    {
        if (line.rfind(prefix, 0) == 0)
        {
            return std::stoll(line.substr(prefix.size())) * 1024;  // "  1234 kB"
        }
    }
    FAIL("no " << field << " in /proc/self/status");
    return 0;
}

struct child_report
{
    long long peak_added = 0;  // VmHWM during the call minus VmRSS before it
    bool threw = false;
    char what[512] = {};
};

// Runs f in a child process whose peak resident size is reset just before (clear_refs 5) and whose large
// allocations come fresh from the system (a fixed mmap threshold, free memory trimmed first), so that the
// peak it reports is what f itself touched. (The test's own large allocations run in children as well,
// in_child below: memory this process freed but kept could otherwise serve f unseen.)
// With `run_once_first`, for a refusal that keeps nothing, f runs once before the measured call: the
// resident size also counts the library's code pages a call touches first (1.5 to 2 MB for a checkpoint's
// refusal, depending on how the linker laid the code out), and the measured call then counts only memory.
template <class F>
child_report peak_of(const F& f, bool run_once_first = false)
{
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0)
    {
        ::close(fds[0]);
        child_report r;
        ::mallopt(M_MMAP_THRESHOLD, 64 * 1024);
        if (run_once_first)
        {
            try
            {
                f();
            }
            catch (const std::exception&)
            {
            }
        }
        ::malloc_trim(0);
        const long long before = status_bytes("VmRSS");
        const int clear = ::open("/proc/self/clear_refs", O_WRONLY);
        const bool reset = clear >= 0 && ::write(clear, "5", 1) == 1;
        try
        {
            f();
        }
        catch (const std::exception& e)
        {
            r.threw = true;
            std::strncpy(r.what, e.what(), sizeof r.what - 1);
        }
        r.peak_added = reset ? status_bytes("VmHWM") - before : -1;
        const bool sent = ::write(fds[1], &r, sizeof r) == static_cast<ssize_t>(sizeof r);
        ::_exit(sent ? 0 : 1);
    }
    ::close(fds[1]);
    child_report r;
    const bool got = ::read(fds[0], &r, sizeof r) == static_cast<ssize_t>(sizeof r);
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    REQUIRE(got);
    REQUIRE_MESSAGE(r.peak_added >= 0, "/proc/self/clear_refs could not reset the peak resident size");
    return r;
}

// Runs f in a child process, for the memory it takes to be given back when the child ends.
template <class F>
void in_child(const F& f)
{
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0)
    {
        try
        {
            f();
        }
        catch (...)
        {
            ::_exit(1);
        }
        ::_exit(0);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
}

constexpr long long MB = 1 << 20;

// A default GPT of about 7 million parameters (28 MB in float32).
models::gpt_config load_test_config()
{
    return {256, 64, 4, 384, 6, 0};
}
}  // namespace

TEST_CASE("loading a checkpoint of N bytes of parameters peaks below 2N + 4 MB, with its optimiser state "
          "left on disk")
{
    temp_dir dir;
    const std::string path = dir / "model.safetensors";
    const models::gpt_config c = load_test_config();
    const long long n = static_cast<long long>(models::gpt_parameter_count(c) * sizeof(float));
    REQUIRE(n > 20 * MB);
    in_child(
        [&]
        {
            const auto p = models::gpt_parameters<float>::init(c, 1);
            io::checkpoint_extras extras;
            for (const auto& param : p.named_parameters())  // optimiser state twice the parameters, as Adam's
            {
                const array<double> zeros = xt::zeros<double>(param.value().shape());
                extras.tensors.emplace("optim.m." + param.name(), io::stored_tensor{"F32", zeros});
                extras.tensors.emplace("optim.v." + param.name(), io::stored_tensor{"F32", zeros});
            }
            io::save_checkpoint(path, p, extras);
        });

    const child_report parameters = peak_of(
        [&]
        {
            const auto ck = io::load_checkpoint<float>(path, io::optimiser_state::skip);
            REQUIRE(ck.optimiser.empty());
        });
    CHECK_FALSE(parameters.threw);
    MESSAGE("N = " << n / MB << " MB; the load's peak added " << parameters.peak_added / MB << " MB");
    CHECK((test::under_address_sanitizer || parameters.peak_added < 2 * n + 4 * MB));
    CHECK(parameters.peak_added > n / 2);  // the measurement sees the parameters themselves

    // Loading the optimiser's state too costs it as float64 (3 N more here), no more.
    const child_report everything = peak_of([&] { io::load_checkpoint<float>(path); });
    CHECK_FALSE(everything.threw);
    CHECK((test::under_address_sanitizer || everything.peak_added < 2 * n + 2 * 3 * n + 4 * MB));
}

TEST_CASE("a decoder read straight from a checkpoint holds its parameters once, plus one matrix")
{
    temp_dir dir;
    const std::string path = dir / "model.safetensors";
    const models::gpt_config c = load_test_config();
    const long long n = static_cast<long long>(models::gpt_parameter_count(c) * sizeof(float));
    in_child([&] { io::save_checkpoint(path, models::gpt_parameters<float>::init(c, 1)); });
    const long long largest_matrix = static_cast<long long>(c.d_model * c.hidden_width() * sizeof(float));

    const child_report r = peak_of(
        [&]
        {
            const io::checkpoint_reader file(path);
            models::decoder<float> d(file.config(), file.source<float>());
            d.step(1);
        });
    CHECK_FALSE(r.threw);
    MESSAGE("N = " << n / MB << " MB; the decoder's peak added " << r.peak_added / MB << " MB");
    // N, one matrix of scratch, the buffer's rounding to 2 MiB pages, a few positions of the cache.
    CHECK((test::under_address_sanitizer || r.peak_added < n + largest_matrix + 2 * MB + 4 * MB));
    CHECK(r.peak_added > n / 2);
}

TEST_CASE("a corrupt or truncated file is refused before anything is allocated from its claims")
{
    temp_dir dir;
    const std::string path = dir / "model.safetensors";
    in_child([&] { io::save_checkpoint(path, models::gpt_parameters<float>::init(load_test_config(), 2)); });
    const auto size = std::filesystem::file_size(path);

    SUBCASE("cut in half: the header's byte ranges run past the data")
    {
        std::filesystem::resize_file(path, size / 2);
        const child_report r = peak_of([&] { io::load_checkpoint<float>(path); }, true);
        CHECK(r.threw);
        CHECK(std::string(r.what).find("outside the data buffer") != std::string::npos);
        CHECK((test::under_address_sanitizer || r.peak_added < 2 * MB));
    }
    SUBCASE("a header that claims a tensor of 10^12 values in a file of a few bytes")
    {
        const std::string header =
            R"({"huge":{"dtype":"F32","shape":[1000000,1000000],"data_offsets":[0,4000000000000]}})";
        std::string bytes(8, '\0');
        for (std::size_t k = 0; k < 8; ++k)
        {
            bytes[k] = static_cast<char>((header.size() >> (8 * k)) & 0xff);
        }
        std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes << header << "data";
        const child_report r = peak_of([&] { io::safetensors_reader reader(path); }, true);
        CHECK(r.threw);
        CHECK(std::string(r.what).find("'huge'") != std::string::npos);
        CHECK((test::under_address_sanitizer || r.peak_added < 2 * MB));
    }
    SUBCASE("metadata that claims 4 billion layers")
    {
        in_child(
            [&]
            {
                io::safetensors_file file = io::read_safetensors(path);
                file.metadata["layers"] = "4000000000";
                io::write_safetensors(path, file);
            });
        const child_report r = peak_of([&] { io::load_checkpoint<float>(path); }, true);
        CHECK(r.threw);
        CHECK(std::string(r.what).find("layers = 4000000000") != std::string::npos);
        CHECK((test::under_address_sanitizer || r.peak_added < 2 * MB));
    }
}

TEST_CASE("a decoder step and a sampler draw allocate nothing, on one thread and on two")
{
    const models::gpt_config c =
        models::config_with_values({256, 64, 2, 192, 6, 3}, {{"position", "rope"}, {"mlp", "swiglu"}});
    const auto p = models::gpt_parameters<float>::init(c, 3);
    const int before = num_threads();
    for (int threads : {1, 2})
    {
        CAPTURE(threads);
        set_num_threads(threads);
        models::decoder<float> d(p);
        models::token_sampler sampler(c.vocab_size, 0.9, 0, 4);
        models::token_sampler top_k(c.vocab_size, 0.9, 5, 4);
        d.step(3);  // the first step may warm the thread pool up
        std::int32_t token = 3;
        const long start = allocations.load();
        for (int n = 0; n < 60; ++n)
        {
            const float* logits = d.step(token);
            token = n % 2 ? sampler.draw(logits) : top_k.draw(logits);
        }
        CHECK(allocations.load() == start);
    }
    set_num_threads(before);
}

TEST_CASE("sample() allocates as much for 200 tokens as for 20, refills of its context included")
{
    const models::gpt_config c{256, 32, 2, 64, 4, 0};
    const auto p = models::gpt_parameters<float>::init(c, 5);
    auto count = [&](std::size_t tokens)
    {
        models::sampling_options o;
        o.tokens = tokens;
        o.top_k = 7;
        const long start = allocations.load();
        const auto out = models::sample(p, {1, 2, 3}, o);
        REQUIRE(out.size() == tokens);
        return allocations.load() - start;
    };
    count(20);  // the first call fills the buffer pool (autodiff/memory.hpp) the later ones reuse
    const long short_run = count(20);
    CHECK(count(200) == short_run);
}
