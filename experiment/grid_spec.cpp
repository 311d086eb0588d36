// The grid's spec: JSON (nlohmann-json) and command-line overrides parsed into variants, seeds and a
// budget, and the runs it plans.
#include "experiment/grid.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "io/escape.hpp"
#include "io/json_limits.hpp"

namespace xgrad::train::grid
{
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace
{
[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument("spec: " + what); }

// A grid's bounds: far beyond any grid one machine can run, small enough that planning it is instant.
constexpr std::uint64_t max_variants = 10000;
constexpr std::uint64_t max_seeds = 10000;
constexpr std::uint64_t max_runs = 100000;
constexpr double max_budget_steps = 1e9;    // steps and tokens: integers below 2^53, so a double holds them
constexpr double max_budget_tokens = 1e15;
constexpr double max_budget_seconds = 1e7;  // about 115 days

// A name from the spec for a message: escaped, cut after 60 bytes, in double quotes.
std::string named(const std::string& name)
{
    return "\"" + io::escaped(name.substr(0, 60)) + (name.size() > 60 ? "...\"" : "\"");
}

// A JSON value for a message: its text, cut after 60 bytes and escaped.
std::string shown(const json& value) { return io::quoted(value.dump(), 60); }

// Flags xgrad-experiment sets on every run itself.
const std::set<std::string> runner_flags{"data", "out", "seed", "steps", "resume", "quiet", "threads", "help"};

std::string flag_name(std::string name, const std::string& where)
{
    if (name.rfind("--", 0) == 0)
    {
        name = name.substr(2);
    }
    const bool well_formed = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
    });
    if (!well_formed)
    {
        bad(where + ": " + named(name) + " is not a flag name (lower-case letters, digits and '-')");
    }
    if (runner_flags.count(name))
    {
        bad(where + ": --" + name + " is set by the runner (use \"data\", \"seeds\" or \"budget\")");
    }
    return name;
}

// Sets, replaces (value a number or string), adds a switch (true) or removes (false, null) flag `name`.
void apply_flag(std::vector<flag>& flags, const std::string& name, const json& value, const std::string& where)
{
    flags.erase(std::remove_if(flags.begin(), flags.end(), [&](const flag& f) { return f.name == name; }), flags.end());
    if (value.is_boolean() || value.is_null())
    {
        if (value.is_boolean() && value.get<bool>())
        {
            flags.push_back({name, "", true});
        }
        return;
    }
    if (value.is_string())
    {
        flags.push_back({name, value.get<std::string>(), false});
    }
    else if (value.is_number())
    {
        flags.push_back({name, value.dump(), false});
    }
    else
    {
        bad(where + ": --" + name + " must be a number, a string or true/false, got " + shown(value));
    }
}

// "name=value" for a variant's generated name.
std::string describe(const std::string& name, const json& value)
{
    if (value.is_boolean() || value.is_null())
    {
        return value.is_boolean() && value.get<bool>() ? name : "no-" + name;
    }
    return name + "=" + (value.is_string() ? value.get<std::string>() : value.dump());
}

// A command-line value: JSON when it is a JSON number or boolean, a string otherwise.
json cli_value(const std::string& text)
{
    const json parsed = json::parse(text, nullptr, false);
    return !parsed.is_discarded() && (parsed.is_number() || parsed.is_boolean()) ? parsed : json(text);
}

std::pair<std::string, std::string> split_at(const std::string& s, char sep, const std::string& what)
{
    const auto at = s.find(sep);
    if (at == std::string::npos || at == 0)
    {
        throw std::invalid_argument(what + ": expected NAME" + sep + "VALUE, got \"" + s + "\"");
    }
    return {s.substr(0, at), s.substr(at + 1)};
}

std::vector<std::string> split_list(const std::string& s)
{
    std::vector<std::string> items;
    std::stringstream in(s);
    for (std::string item; std::getline(in, item, ',');)
    {
        items.push_back(item);
    }
    return items;
}

// The spec's key `key`, which an override is about to write into, must be an object (or a list).
void require_container(const json& j, const char* key, bool list)
{
    if (j.contains(key) && (list ? !j[key].is_array() : !j[key].is_object()))
    {
        bad(std::string("\"") + key + "\" must be " + (list ? "a list" : "an object") + ", got " +
            shown(j[key]));
    }
}

// The overrides written into the spec's JSON, so that one parser checks both.
void apply_overrides(json& j, const spec_overrides& o)
{
    require_container(j, "fixed", false);
    require_container(j, "axes", false);
    require_container(j, "variants", true);
    if (!o.data.empty())
    {
        j["data"] = o.data;
    }
    for (const auto& s : o.sets)
    {
        const auto [name, value] = split_at(s, '=', "--set");
        j["fixed"][name] = cli_value(value);
    }
    for (const auto& a : o.axes)
    {
        const auto [name, values] = split_at(a, '=', "--axis");
        json list = json::array();
        for (const auto& v : split_list(values))
        {
            list.push_back(cli_value(v));
        }
        j["axes"][name] = list;
    }
    for (const auto& v : o.variants)
    {
        const auto [name, flags] = split_at(v, ':', "--variant");
        json entry = {{"name", name}};
        for (const auto& f : split_list(flags))
        {
            const auto [flag, value] = split_at(f, '=', "--variant " + name);
            entry[flag] = cli_value(value);
        }
        j["variants"].push_back(entry);
    }
    if (!o.seeds.empty())
    {
        json seeds = json::array();
        for (const auto& s : split_list(o.seeds))
        {
            seeds.push_back(cli_value(s));
        }
        j["seeds"] = seeds.size() == 1 ? seeds[0] : seeds;
    }
    if (!o.baseline.empty())
    {
        j["baseline"] = o.baseline;
    }
    if (!o.budget.empty())
    {
        const auto [unit, amount] = split_at(o.budget, '=', "budget");
        j["budget"] = {{unit, cli_value(amount)}};
    }
}

std::vector<variant> product_of_axes(const json& axes, const std::vector<flag>& fixed)
{
    if (!axes.is_object() || axes.empty())
    {
        bad("\"axes\" must be an object of flag: [values]");
    }
    std::uint64_t count = 1;
    for (const auto& [key, values] : axes.items())
    {
        const std::string name = flag_name(key, "axes");
        if (!values.is_array() || values.empty())
        {
            bad("axes: --" + name + " needs a non-empty list of values");
        }
        if (__builtin_mul_overflow(count, values.size(), &count) || count > max_variants)
        {
            bad("axes: the product of the axes' lengths is more than " + std::to_string(max_variants) +
                " variants (the limit)");
        }
    }
    std::vector<variant> out{{"", fixed}};
    for (const auto& [key, values] : axes.items())
    {
        const std::string name = flag_name(key, "axes");
        std::vector<variant> next;
        for (const variant& v : out)
        {
            for (const json& value : values)
            {
                variant w = v;
                w.name += (w.name.empty() ? "" : ",") + describe(name, value);
                apply_flag(w.flags, name, value, "axes");
                next.push_back(w);
            }
        }
        out = next;
    }
    return out;
}

variant listed_variant(const json& entry, const std::vector<flag>& fixed)
{
    if (!entry.is_object())
    {
        bad("each of \"variants\" must be an object of flags (and \"name\")");
    }
    variant v{"", fixed};
    if (entry.contains("name"))
    {
        const json& name = entry["name"];
        if (!name.is_string() || name.get<std::string>().empty())
        {
            bad("variants: \"name\" must be a non-empty string, got " + shown(name));
        }
        v.name = name.get<std::string>();
        const bool separator = v.name.find_first_of("/\\") != std::string::npos;
        if (separator || v.name == "." || v.name == "..")
        {
            bad("variants: the name " + named(v.name) +
                " would be a folder outside --out (no '/', '\\', \".\" or \"..\")");
        }
    }
    std::string generated;
    for (const auto& [key, value] : entry.items())
    {
        if (key == "name")
        {
            continue;
        }
        const std::string name = flag_name(key, "variants");
        const std::string where = "variant " + (v.name.empty() ? std::string("?") : named(v.name));
        apply_flag(v.flags, name, value, where);
        generated += (generated.empty() ? "" : ",") + describe(name, value);
    }
    if (v.name.empty())
    {
        v.name = generated.empty() ? "default" : generated;
    }
    return v;
}

std::vector<std::uint64_t> seeds_of(const json& j)
{
    std::vector<std::uint64_t> seeds;
    const std::uint64_t listed = j.is_number_unsigned() ? j.get<std::uint64_t>()
                                 : j.is_array()         ? j.size()
                                                        : 0;
    if (listed > max_seeds)
    {
        bad("\"seeds\": " + std::to_string(listed) + " seeds; at most " + std::to_string(max_seeds) +
            " (the limit)");
    }
    if (j.is_number_unsigned() && j.get<std::uint64_t>() >= 1)
    {
        for (std::uint64_t s = 1; s <= j.get<std::uint64_t>(); ++s)
        {
            seeds.push_back(s);
        }
        return seeds;
    }
    if (!j.is_array() || j.empty())
    {
        bad("\"seeds\" must be a count (seeds 1..N) or a non-empty list of seeds, got " + shown(j));
    }
    for (const json& s : j)
    {
        if (!s.is_number_unsigned())
        {
            bad("\"seeds\": " + shown(s) + " is not a non-negative integer");
        }
        seeds.push_back(s.get<std::uint64_t>());
    }
    if (std::set<std::uint64_t>(seeds.begin(), seeds.end()).size() != seeds.size())
    {
        bad("\"seeds\" lists a seed twice");
    }
    return seeds;
}

budget budget_of(const json& j)
{
    if (!j.is_object() || j.size() != 1)
    {
        bad("\"budget\" must be one of {\"steps\": N}, {\"tokens\": N}, {\"seconds\": S}, got " + shown(j));
    }
    const std::string unit = j.begin().key();  // (a structured binding to items() outlives its proxy)
    const json& amount = j.begin().value();
    budget b;
    if (unit == "steps")
    {
        b.kind = budget::unit::steps;
    }
    else if (unit == "tokens")
    {
        b.kind = budget::unit::tokens;
    }
    else if (unit == "seconds")
    {
        b.kind = budget::unit::seconds;
    }
    else
    {
        bad("budget: unknown unit " + named(unit) + " (steps, tokens or seconds)");
    }
    const bool whole = b.kind != budget::unit::seconds;
    const double most = b.kind == budget::unit::steps    ? max_budget_steps
                        : b.kind == budget::unit::tokens ? max_budget_tokens
                                                         : max_budget_seconds;
    const double value = amount.is_number() ? amount.get<double>() : 0;
    if (!amount.is_number() || !(value > 0 && value <= most) || (whole && value != std::floor(value)))
    {
        char limit[32];
        std::snprintf(limit, sizeof limit, "%.0f", most);
        const std::string range = whole ? "a whole number from 1" : "a number of seconds above 0";
        bad("budget: " + unit + " must be " + range + " to " + limit + ", got " + shown(amount));
    }
    b.amount = amount.get<double>();
    return b;
}

void check_keys(const json& j)
{
    const std::set<std::string> known{"data", "fixed", "axes", "variants", "seeds", "baseline", "budget", "name",
                                      "description"};
    for (const auto& [key, value] : j.items())
    {
        if (!known.count(key))
        {
            bad("unknown key " + named(key) +
                " (data, fixed, axes, variants, seeds, baseline, budget, name, description)");
        }
    }
}
}  // namespace

spec load_spec(const std::string& json_text, const spec_overrides& overrides)
{
    json j = json::object();
    if (!json_text.empty())
    {
        j = io::parse_json_bounded<json>(json_text, "spec");
        if (!j.is_object())
        {
            bad("the file must hold a JSON object");
        }
    }
    apply_overrides(j, overrides);
    check_keys(j);
    spec s;
    if (!j.contains("data") || !j["data"].is_string() || j["data"].get<std::string>().empty())
    {
        bad("no \"data\" (the text file every run trains on; or --data)");
    }
    s.data = j["data"].get<std::string>();
    const json fixed = j.value("fixed", json::object());
    if (!fixed.is_object())
    {
        bad("\"fixed\" must be an object of flag: value");
    }
    for (const auto& [key, value] : fixed.items())
    {
        apply_flag(s.fixed, flag_name(key, "fixed"), value, "fixed");
    }
    if (j.contains("axes"))
    {
        s.variants = product_of_axes(j["axes"], s.fixed);
    }
    const json listed = j.value("variants", json::array());
    if (!listed.is_array())
    {
        bad("\"variants\" must be a list of objects");
    }
    if (listed.size() > max_variants - s.variants.size())
    {
        bad("\"variants\" and \"axes\" make more than " + std::to_string(max_variants) +
            " variants (the limit)");
    }
    for (const json& entry : listed)
    {
        s.variants.push_back(listed_variant(entry, s.fixed));
    }
    if (s.variants.empty())
    {
        s.variants.push_back({"default", s.fixed});
    }
    std::set<std::string> names, folders;
    for (const variant& v : s.variants)
    {
        const std::string folder = folder_name(v.name);
        if (folder == "." || folder == "..")
        {
            bad("the variant " + named(v.name) + " would be a folder outside --out");
        }
        if (folder[0] == '.')
        {
            bad("the variant " + named(v.name) + " would be a hidden folder in --out, where the runner keeps "
                "its own (" + grid_files::check + ", " + grid_files::lock + ")");
        }
        for (const std::string own : grid_files::all)
        {
            if (folder == own || folder.rfind(own + ".", 0) == 0)  // NAME itself, or its temporaries
            {
                bad("the variant " + named(v.name) + " would take the name of the runner's own " + own +
                    " in --out");
            }
        }
        if (!names.insert(v.name).second || !folders.insert(folder).second)
        {
            bad("two variants are named " + named(v.name) + " (or the same as folders)");
        }
    }
    if (!j.contains("seeds"))
    {
        bad("no \"seeds\" (a count or a list; or --seeds)");
    }
    s.seeds = seeds_of(j["seeds"]);
    std::uint64_t runs = 0;
    if (__builtin_mul_overflow(std::uint64_t(s.variants.size()), std::uint64_t(s.seeds.size()), &runs) ||
        runs > max_runs)
    {
        bad(std::to_string(s.variants.size()) + " variants x " + std::to_string(s.seeds.size()) +
            " seeds is more than " + std::to_string(max_runs) + " runs (the limit)");
    }
    if (j.contains("baseline") && !j["baseline"].is_string())
    {
        bad("\"baseline\" must be a variant's name (a string), got " + shown(j["baseline"]));
    }
    s.baseline = j.value("baseline", s.variants.front().name);
    if (!names.count(s.baseline))
    {
        bad("the baseline " + named(s.baseline) + " is not one of the variants");
    }
    if (!j.contains("budget"))
    {
        bad("no \"budget\" ({\"steps\": N}, {\"tokens\": N} or {\"seconds\": S}; or --steps, --tokens, --seconds)");
    }
    s.per_run = budget_of(j["budget"]);
    return s;
}

namespace
{
json flag_json(const flag& f)
{
    if (f.is_switch)
    {
        return true;
    }
    const json number = json::parse(f.value, nullptr, false);
    return !number.is_discarded() && number.is_number() && number.dump() == f.value ? number : json(f.value);
}
}  // namespace

std::string spec_to_json(const spec& s)
{
    json j;
    j["data"] = s.data;
    j["fixed"] = json::object();
    for (const flag& f : s.fixed)
    {
        j["fixed"][f.name] = flag_json(f);
    }
    j["variants"] = json::array();
    for (const variant& v : s.variants)
    {
        json entry = {{"name", v.name}};
        for (const flag& f : v.flags)
        {
            entry[f.name] = flag_json(f);
        }
        for (const flag& f : s.fixed)
        {
            const bool kept = std::any_of(v.flags.begin(), v.flags.end(), [&](const flag& g) { return g.name == f.name; });
            if (!kept)
            {
                entry[f.name] = false;
            }
        }
        j["variants"].push_back(entry);
    }
    j["seeds"] = s.seeds;
    j["baseline"] = s.baseline;
    const char* units[] = {"steps", "tokens", "seconds"};
    j["budget"] = {{units[static_cast<int>(s.per_run.kind)], s.per_run.amount}};
    return j.dump(2) + "\n";
}

std::string flag_value(const variant& v, const std::string& name)
{
    for (const flag& f : v.flags)
    {
        if (f.name == name)
        {
            return f.is_switch ? "true" : f.value;
        }
    }
    return "";
}

std::string folder_name(const std::string& variant_name)
{
    std::string out = variant_name;
    for (char& c : out)
    {
        const bool kept = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                          c == '.' || c == '=' || c == '+' || c == '-';
        c = kept ? c : '_';
    }
    return out;
}

std::vector<std::string> run_arguments(const spec& s, const variant& v, std::uint64_t seed, std::int64_t steps,
                                       const std::string& dir, const std::vector<flag>& replaced)
{
    std::vector<std::string> args{"--data", s.data};
    auto add = [&](const flag& f) {
        args.push_back("--" + f.name);
        if (!f.is_switch)
        {
            args.push_back(f.value);
        }
    };
    for (const flag& f : v.flags)
    {
        const bool overridden =
            std::any_of(replaced.begin(), replaced.end(), [&](const flag& r) { return r.name == f.name; });
        if (!overridden)
        {
            add(f);
        }
    }
    std::for_each(replaced.begin(), replaced.end(), add);
    for (const std::string& a : {std::string("--steps"), std::to_string(steps), std::string("--seed"),
                                 std::to_string(seed), std::string("--out"), dir, std::string("--quiet")})
    {
        args.push_back(a);
    }
    return args;
}

std::vector<run> plan_runs(const spec& s, const std::map<std::string, std::int64_t>& steps, const std::string& out)
{
    std::vector<run> runs;
    for (std::uint64_t seed : s.seeds)
    {
        for (const variant& v : s.variants)
        {
            run r;
            r.variant = v.name;
            r.seed = seed;
            r.dir = (fs::path(out) / folder_name(v.name) / ("seed-" + std::to_string(seed))).string();
            const auto planned = steps.find(v.name);
            if (planned == steps.end())
            {
                throw std::invalid_argument("the steps of the grid in " + out + " name no variant " +
                                            named(v.name) + " (steps.json does not match grid.json)");
            }
            r.steps = planned->second;
            r.args = run_arguments(s, v, seed, r.steps, r.dir);
            runs.push_back(r);
        }
    }
    return runs;
}

}  // namespace xgrad::train::grid
