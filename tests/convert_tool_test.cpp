// xgrad-convert as a program: conversions that work, and bad input (formats, malformed files, a tokenizer
// that does not parse or disagrees with the checkpoint, an output in the way, a variant the target cannot
// express) giving one line on stderr, exit status 2 and nothing written, not even a staging folder.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <set>

#include "io/safetensors.hpp"
#include "source_dir.hpp"
#include "test_util.hpp"
#include "train/tokenizer.hpp"

namespace convert_tool_test
{
using namespace xgrad;
using xgrad::test::listing;
using xgrad::test::read_bytes;
using xgrad::test::run_tool;
using xgrad::test::tool_run;
using xgrad::test::temp_dir;
using xgrad::test::write_bytes;
namespace fs = std::filesystem;

namespace
{
const std::string tool = xgrad::test::program_dir() + "/xgrad-convert";
const std::string fixtures = xgrad::test::source_dir() + "/tests/data/convert_fixtures/";

// Exit 2, exactly one line on stderr holding `expected`, and the folder as it was.
void refused(const temp_dir& scratch, const std::string& args, const std::string& expected)
{
    CAPTURE(args);
    const auto before = listing(scratch.path);
    const tool_run r = run_tool(tool, scratch, args);
    CAPTURE(r.err);
    CHECK(r.status == 2);
    CHECK(r.out.empty());
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(r.err.rfind("xgrad-convert: ", 0) == 0);
    CHECK(r.err.find(expected) != std::string::npos);
    CHECK(listing(scratch.path) == before);
}
} // namespace

TEST_CASE("xgrad-convert converts between the three formats")
{
    temp_dir s;
    REQUIRE(run_tool(tool, s, "--from hf-gpt2 --to xgrad '" + fixtures + "hf_bf16' gpt2.safetensors").status == 0);
    const auto ck = io::read_safetensors(s / "gpt2.safetensors");
    CHECK(ck.metadata.at("bias") == "all");
    CHECK(ck.tensors.at("wte").dtype == "F32");
    REQUIRE(run_tool(tool, s, "--from xgrad --to hf-gpt2 gpt2.safetensors hf").status == 0);
    CHECK(listing(s / "hf") == std::set<std::string>{ "config.json", "model.safetensors" });
    REQUIRE(run_tool(tool, s, "--from llama2c --to xgrad '" + fixtures + "llama2c' llama.safetensors").status == 0);
    fs::create_directory(s / "empty");
    const tool_run r = run_tool(tool, s, "--from xgrad --to llama2c llama.safetensors empty");
    CHECK(r.status == 0);
    CHECK(listing(s / "empty") == std::set<std::string>{ "model.bin", "tokenizer.bin" });
    CHECK(read_bytes(s / "empty/model.bin") == read_bytes(fixtures + "llama2c/model.bin"));
    CHECK(run_tool(tool, s, "--help").status == 0);
}

TEST_CASE("bad command lines and bad input: one line, exit 2, nothing written")
{
    temp_dir s;
    REQUIRE(run_tool(tool, s, "--from hf-gpt2 --to xgrad '" + fixtures + "hf_f32' gpt2.safetensors").status == 0);
    REQUIRE(run_tool(tool, s, "--from llama2c --to xgrad '" + fixtures + "llama2c' llama.safetensors").status == 0);
    refused(s, "", "--from is required");
    refused(s, "--from gguf --to xgrad a b", "gguf not in");
    refused(s, "--from xgrad --to hf-gpt2 gpt2.safetensors", "OUT is required");
    refused(s, "--from xgrad --to xgrad gpt2.safetensors out.safetensors extra", "not expected: extra (see --help)");
    refused(s, "--from xgrad --to xgrad '' out.safetensors", "IN and OUT must not be empty");
    refused(s, "--from xgrad --to hf-gpt2 missing.safetensors out", "missing.safetensors");
    refused(s, "--from hf-gpt2 --to xgrad . out.safetensors", "config.json: cannot read");
    refused(s, "--from xgrad --to llama2c gpt2.safetensors out", "llama2c cannot express metadata \"norm\"");
    refused(s, "--from xgrad --to hf-gpt2 llama.safetensors out", "hf-gpt2 cannot express metadata \"norm\"");
    // An OUT that cannot be written is exit 2 as well: xgrad-convert has no other failure status.
    refused(s, "--from xgrad --to xgrad gpt2.safetensors gpt2.safetensors/out.safetensors",
            "gpt2.safetensors/out.safetensors");

    fs::create_directory(s / "taken");
    write_bytes(s / "taken/keep.txt", "mine");
    refused(s, "--from xgrad --to hf-gpt2 gpt2.safetensors taken", "taken exists and is not an empty folder");
    CHECK(read_bytes(s / "taken/keep.txt") == "mine");

    fs::create_directory(s / "bad");
    fs::copy(fixtures + "llama2c", s / "bad/llama", fs::copy_options::recursive);
    const std::string bin = read_bytes(s / "bad/llama/model.bin");
    write_bytes(s / "bad/llama/model.bin", bin.substr(0, 20));
    refused(s, "--from llama2c --to xgrad bad/llama out.safetensors", "truncated at byte 20");
    write_bytes(s / "bad/llama/model.bin", bin.substr(0, bin.size() - 1));
    refused(s, "--from llama2c --to hf-gpt2 bad/llama out", "implies");
    write_bytes(s / "bad/llama/model.bin", bin);
    write_bytes(s / "bad/llama/tokenizer.model", "garbage");
    refused(s, "--from llama2c --to xgrad bad/llama out.safetensors", "not a SentencePiece model");
}

TEST_CASE("a tokenizer in the metadata that does not parse or disagrees with the checkpoint is refused")
{
    temp_dir s;
    REQUIRE(run_tool(tool, s, "--from llama2c --to xgrad '" + fixtures + "llama2c' llama.safetensors").status == 0);
    io::safetensors_file f = io::read_safetensors(s / "llama.safetensors");
    const auto with_metadata = [&](const train::metadata_map& extra, const std::string& expected)
    {
        io::safetensors_file g = f;
        for (const auto& [k, v] : extra)
        {
            g.metadata[k] = v;
        }
        io::write_safetensors(s / "in.safetensors", g);
        refused(s, "--from xgrad --to llama2c in.safetensors out", expected);
        refused(s, "--from xgrad --to xgrad in.safetensors out.safetensors", expected);
        fs::remove(s / "in.safetensors");
    };
    with_metadata({ { "vocab", "[1, 2, 3]" } }, "has 3 tokens but \"vocab_size\" is 11");
    with_metadata({ { "vocab", "[1, 1]" } }, "vocab metadata");
    with_metadata(
      { { "tokenizer", "sentencepiece" }, { "tokenizer_model", train::to_base64("no model here") } },
      "not a SentencePiece model");
    with_metadata({ { "tokenizer", "sentencepiece" }, { "tokenizer_model", "%%%%" } }, "not base64");
    with_metadata({ { "tokenizer", "tiktoken" } }, "allowed: bytes, sentencepiece");
    with_metadata({ { "norm", "batchnorm" } }, "\"norm\" is 'batchnorm'; allowed: layernorm, rmsnorm");
}
}  // namespace convert_tool_test
