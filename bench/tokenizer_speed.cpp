// Tokenizer speed on one core: GPT-2's byte-level BPE (train/gpt2_tokenizer.hpp) beside a SentencePiece
// BPE model of the same vocabulary size trained on the same text, encoding and decoding the first MiB of
// the fortunes text (Debian's fortunes package), best of several runs in CPU seconds of the one thread.
//
//   tokenizer_speed [--gpt2 DIR] [--text FILE] [--bytes N] [--repeat R]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "examples/command_line.hpp"
#include "tests/source_dir.hpp"
#include "train/gpt2_tokenizer.hpp"
#include "train/tokenizer.hpp"

using namespace xgrad::train;
namespace fs = std::filesystem;

namespace
{
std::string read_file(const fs::path& path)
{
    std::ifstream in(path, std::ios::binary);
    return { std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>() };
}

// The files of the fortunes package without a dot in their names, sorted, as the tests read them.
std::string fortunes_text()
{
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator("/usr/share/games/fortunes"))
    {
        if (e.is_regular_file() && e.path().filename().string().find('.') == std::string::npos)
        {
            files.push_back(e.path());
        }
    }
    std::sort(files.begin(), files.end());
    std::string text;
    for (const auto& f : files)
    {
        text += read_file(f);
    }
    return text;
}

double thread_cpu_seconds()
{
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// The best of `repeat` runs, in this thread's CPU time (the machine may be shared: wall time would count
// other processes' turns).
double best_seconds(int repeat, const std::function<void()>& work)
{
    double best = 1e300;
    for (int r = 0; r < repeat; ++r)
    {
        const double start = thread_cpu_seconds();
        work();
        best = std::min(best, thread_cpu_seconds() - start);
    }
    return best;
}

void measure(const char* name, const tokenizer& tok, const std::string& text, int repeat)
{
    std::vector<std::int32_t> ids;
    const double encode = best_seconds(repeat, [&] { ids = tok.encode_allowing_unknown(text); });
    std::string back;
    const double decode = best_seconds(repeat, [&] { back = tok.decode(ids); });
    std::printf("%-28s encode %8.3f s (%6.2f MB/s)  decode %7.3f s  %zu tokens%s\n",
                name,
                encode,
                text.size() / encode / 1e6,
                decode,
                ids.size(),
                back == text ? "" : "  (decode differs)");
}
} // namespace

int main(int argc, char** argv)
{
    std::string gpt2_dir = xgrad::test::source_dir() + "/tests/fixtures/gpt2", text_file;
    std::size_t bytes = 1u << 20;
    int repeat = 5;
    xgrad::examples::command_line cli{"GPT-2's tokenizer against SentencePiece on the same text, one core",
                                      "tokenizer_speed"};
    cli.add_option("--gpt2", gpt2_dir, "folder with vocab.json and merges.txt");
    cli.add_option("--text", text_file, "text to encode (default: the fortunes text)");
    cli.add_option("--bytes", bytes, "encode the first N bytes");
    cli.add_option("--repeat", repeat, "runs; the best is reported").positive();
    if (const auto status = cli.parse(argc, argv))
    {
        return *status;
    }

    std::string text = text_file.empty() ? fortunes_text() : read_file(text_file);
    text = replace_invalid_utf8(text.substr(0, bytes)); // a cut character becomes U+FFFD
    const auto gpt2 = gpt2_tokenizer::from_folder(gpt2_dir);
    std::printf("%zu bytes of text, best of %d runs\n", text.size(), repeat);
    measure(("gpt2 (" + std::to_string(gpt2->size()) + " tokens)").c_str(), *gpt2, text, repeat);

    const std::string spec = "bpe:" + std::to_string(gpt2->size());
    const auto start = std::chrono::steady_clock::now();
    const auto sentencepiece = sentencepiece_tokenizer::train(tokenizer_spec::parse(spec), text);
    std::printf("(SentencePiece %s trained on the same text in %.1f s)\n",
                spec.c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    measure(("sentencepiece " + spec).c_str(), *sentencepiece, text, repeat);
    return 0;
}
