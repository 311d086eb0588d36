// Fuzz target: the experiment spec (experiment/grid.hpp), load_spec on the bytes as the spec file's text.
// A spec it refuses must give std::invalid_argument with one line of at most 4096 bytes; one it accepts must
// be within the grid's bounds (10000 variants, 10000 seeds, 100000 runs), with a budget that is a positive
// finite number (whole for steps and tokens), and plan runs whose folders all lie inside --out. Deep
// nesting, huge counts and long names must neither crash, nor allocate beyond libFuzzer's limits, nor take
// long.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>

#include "fuzz/fuzz_util.hpp"
#include "experiment/grid.hpp"

namespace grid = xgrad::train::grid;
namespace fuzz = xgrad::fuzz;
namespace fs = std::filesystem;

namespace
{
void check_accepted(const grid::spec& s)
{
    fuzz::require(!s.variants.empty() && s.variants.size() <= 10000, "variants outside 1..10000");
    fuzz::require(!s.seeds.empty() && s.seeds.size() <= 10000, "seeds outside 1..10000");
    fuzz::require(s.variants.size() * s.seeds.size() <= 100000, "more than 100000 runs");
    const double amount = s.per_run.amount;
    fuzz::require(std::isfinite(amount) && amount > 0, "a budget that is not a positive finite number");
    fuzz::require(s.per_run.kind == grid::budget::unit::seconds || amount == std::floor(amount),
                  "a budget of steps or tokens that is not whole");
    std::map<std::string, std::int64_t> steps;
    for (const grid::variant& v : s.variants)
    {
        steps[v.name] = 1;
    }
    const fs::path out = "/fuzz-out";
    for (const grid::run& r : grid::plan_runs(s, steps, out.string()))
    {
        const fs::path dir = fs::path(r.dir).lexically_normal();
        const auto [end, unused] = std::mismatch(out.begin(), out.end(), dir.begin(), dir.end());
        fuzz::require(end == out.end() && dir != out, "a run folder outside --out", r.dir);
    }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const std::string text(reinterpret_cast<const char*>(data), size);
    try
    {
        check_accepted(grid::load_spec(text, {}));
    }
    catch (const std::invalid_argument& e)
    {
        const std::string what = e.what();
        fuzz::require(!what.empty() && what.find('\n') == std::string::npos, "not one line", what);
        fuzz::require(what.size() <= 4096, "a message of more than 4096 bytes", what.substr(0, 200));
    }
    return 0;
}
