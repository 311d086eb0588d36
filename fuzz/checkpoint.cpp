// Fuzz target: the GPT checkpoint reader (io/checkpoint.hpp), load_checkpoint on the bytes. A file it
// refuses must give format_error with one printable line that names the file; a file it accepts must
// hold a model whose parameters are exactly its sizes' (docs/spec.md, "Parameter names and shapes") and
// must survive save_checkpoint and a second load unchanged. Whatever the metadata claims, the loader must
// never allocate far beyond what the file holds (libFuzzer's -malloc_limit_mb and -rss_limit_mb catch
// it), take long (-timeout) or report anything but format_error.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "fuzz/fuzz_util.hpp"
#include "io/checkpoint.hpp"

using namespace xgrad;
namespace fuzz = xgrad::fuzz;

namespace
{
// Bit for bit, except that a NaN may come back as another NaN: the writer widens float values to double
// on the way (io/safetensors.hpp, stored_tensor), and the CPU's conversion quiets a signalling NaN.
bool same_values(const array<float>& a, const array<float>& b)
{
    if (to_shape(a.shape()) != to_shape(b.shape()))
    {
        return false;
    }
    for (std::size_t k = 0; k < a.size(); ++k)
    {
        const float x = a.data()[k], y = b.data()[k];
        const bool both_nan = std::isnan(x) && std::isnan(y);
        if (!both_nan && std::memcmp(&x, &y, sizeof x) != 0)
        {
            return false;
        }
    }
    return true;
}

void check_round_trip(const io::checkpoint<float>& ck, const std::string& path)
{
    // The sizes are written from the model (a stored "01" comes back as "1"); the rest as it was.
    io::checkpoint_extras extras{ck.metadata, ck.optimiser};
    for (const std::string& key : models::size_keys())
    {
        extras.metadata.erase(key);
    }
    io::save_checkpoint(path, ck.params, extras);
    const io::checkpoint<float> again = io::load_checkpoint<float>(path);
    const models::gpt_config &a = ck.params.config, &b = again.params.config;
    fuzz::require(a.vocab_size == b.vocab_size && a.block_size == b.block_size && a.layers == b.layers &&
                    a.d_model == b.d_model && a.heads == b.heads && a.kv_head_count() == b.kv_head_count(),
                  "the sizes changed in a save and load");
    for (const auto& [key, value] : extras.metadata)
    {
        const auto found = again.metadata.find(key);
        fuzz::require(found != again.metadata.end() && found->second == value, "metadata changed", key);
    }
    fuzz::require(again.optimiser.size() == ck.optimiser.size(),
                  "optimiser state changed in a save and load");
    const auto before = ck.params.named_parameters(), after = again.params.named_parameters();
    fuzz::require(before.size() == after.size(), "the parameter count changed in a save and load");
    for (std::size_t k = 0; k < before.size(); ++k)
    {
        fuzz::require(before[k].name() == after[k].name(), "a parameter's name changed", before[k].name());
        fuzz::require(
          same_values(before[k].value(), after[k].value()), "a parameter changed", before[k].name());
    }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    static const fuzz::scratch_file input("checkpoint-input"), copy("checkpoint-copy");
    input.write(data, size);
    io::checkpoint<float> ck;
    try
    {
        ck = io::load_checkpoint<float>(input.path);
    }
    catch (const io::format_error& e)
    {
        const std::string message = e.what();
        fuzz::require(
          message.rfind(input.path + ": ", 0) == 0, "message does not start with the path", message);
        fuzz::require(fuzz::printable(message), "message holds a byte that is not printable ASCII", message);
        fuzz::require(message.find('\n') == std::string::npos, "message is not one line", message);
        return 0;
    }
    std::uint64_t values = 0;
    for (const parameter<float>& p : ck.params.named_parameters())
    {
        values += p.value().size();
    }
    fuzz::require(values * sizeof(float) <= 2 * size, "the model holds more values than the file");
    check_round_trip(ck, copy.path);
    return 0;
}
