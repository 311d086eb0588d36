// The GPT's one description (models/gpt_config.hpp, models/gpt.hpp's declarations) and everything that
// walks it: docs/spec.md's variant table, the four parameter counters, metadata and its "model_keys".
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <type_traits>

#include "io/checkpoint.hpp"
#include "io/checkpoint_limits.hpp"
#include "io/model_layout.hpp"
#include "models/gpt.hpp"
#include "source_dir.hpp"
#include "test_util.hpp"
#include "train/memory_estimate.hpp"

namespace test_gpt_config
{
using namespace xgrad;
using namespace xgrad::models;

namespace
{
// What f's exception says; fails the test if f throws nothing.
template <class F>
std::string exception_message(F&& f)
{
    try
    {
        f();
    }
    catch (const std::exception& e)
    {
        return e.what();
    }
    FAIL("did not throw");
    return "";
}

std::size_t field_count()
{
    std::size_t n = 0;
    gpt_config c;
    visit_config(c, [&n](const config_field&, const auto&) { ++n; });
    return n;
}

// Every combination of the enum and bool fields' values on top of `base` (the other fields as in base).
std::vector<gpt_config> every_variant(const gpt_config& base)
{
    std::vector<gpt_config> all{base};
    for (std::size_t k = 0; k < field_count(); ++k)
    {
        std::vector<gpt_config> next;
        for (gpt_config c : all)
        {
            std::size_t i = 0;
            visit_config(c, [&](const config_field&, auto& member) {
                using V = std::decay_t<decltype(member)>;
                if (i++ != k)
                {
                    return;
                }
                if constexpr (std::is_enum_v<V>)
                {
                    for (std::size_t v = 0; v < std::size(enum_names<V>::names); ++v)
                    {
                        member = static_cast<V>(v);
                        next.push_back(c);
                    }
                }
                else if constexpr (std::is_same_v<V, bool>)
                {
                    for (const bool v : {true, false})
                    {
                        member = v;
                        next.push_back(c);
                    }
                }
                else
                {
                    next.push_back(c);
                }
            });
        }
        all = next;
    }
    return all;
}

// docs/spec.md's rows "| `key` | values | default | what changes |" of its variant tables.
std::map<std::string, std::vector<std::string>> spec_variant_rows()
{
    std::ifstream in(xgrad::test::source_dir() + "/docs/spec.md");
    std::map<std::string, std::vector<std::string>> rows;
    std::string line;
    bool in_table = false;
    while (std::getline(in, line))
    {
        if (line.rfind("| key | values | default |", 0) == 0)
        {
            in_table = true;
            continue;
        }
        if (in_table && line.rfind("|", 0) != 0)
        {
            in_table = false;
        }
        if (!in_table || line.rfind("|---", 0) == 0)
        {
            continue;
        }
        std::vector<std::string> cells;
        std::stringstream cut(line.substr(1));
        std::string cell;
        while (std::getline(cut, cell, '|'))
        {
            cells.push_back(cell);
        }
        const std::string key = cells.at(0).substr(cells.at(0).find('`') + 1);
        rows[key.substr(0, key.find('`'))] = cells;
    }
    return rows;
}
}  // namespace

// The quoted names of the Python tuple `name = (...)` in tools/nanogpt_convert.py.
std::vector<std::string> nanogpt_script_tuple(const std::string& name)
{
    std::ifstream in(xgrad::test::source_dir() + "/tools/nanogpt_convert.py");
    std::string line;
    while (std::getline(in, line))
    {
        if (line.rfind(name + " = (", 0) == 0)
        {
            std::vector<std::string> keys;
            for (std::size_t at = line.find('"'); at != std::string::npos; at = line.find('"', line.find('"', at + 1) + 1))
            {
                keys.push_back(line.substr(at + 1, line.find('"', at + 1) - at - 1));
            }
            return keys;
        }
    }
    return {};
}

TEST_CASE("tools/nanogpt_convert.py knows exactly the model's sizes and first variant keys; later ones via model_keys")
{
    std::vector<std::string> sizes, variants;
    models::gpt_config c;
    models::visit_config(c, [&](const models::config_field& f, auto&) {
        if (f.is_size)
        {
            sizes.push_back(f.key);
        }
        else if (!f.listed)
        {
            variants.push_back(f.key);
        }
    });
    CHECK(nanogpt_script_tuple("SIZE_KEYS") == sizes);
    CHECK(nanogpt_script_tuple("VARIANT_KEYS") == variants);
}

TEST_CASE("docs/spec.md's variant tables say what the config says: every key, its values, its default")
{
    const auto rows = spec_variant_rows();
    REQUIRE(!rows.empty());
    std::size_t variants = 0;
    gpt_config defaults;
    visit_config(defaults, [&](const config_field& f, const auto& member) {
        if (f.is_size)
        {
            return;
        }
        ++variants;
        CAPTURE(f.key);
        const auto row = rows.find(f.key);
        REQUIRE(row != rows.end());
        const std::string& values = row->second.at(1);
        const std::string& default_cell = row->second.at(2);
        if constexpr (std::is_enum_v<std::decay_t<decltype(member)>>)
        {
            for (const char* name : enum_names<std::decay_t<decltype(member)>>::names)
            {
                CHECK(test::contains(values, std::string("`") + name + "`"));
            }
            CHECK(test::contains(default_cell, "`" + field_text(member) + "`"));
        }
        else if constexpr (std::is_same_v<std::decay_t<decltype(member)>, bool>)
        {
            CHECK(test::contains(values, "`true`, `false`"));
            CHECK(test::contains(default_cell, "`" + field_text(member) + "`"));
        }
        else if constexpr (std::is_same_v<std::decay_t<decltype(member)>, double> ||
                           std::is_same_v<std::decay_t<decltype(member)>, off_when_zero<double>>)
        {
            CHECK(test::contains(values, "decimal number"));
            CHECK(test::contains(default_cell, "`" + field_text(member) + "`"));
        }
        else
        {
            CHECK(test::contains(values, "decimal integer"));
        }
    });
    CHECK(rows.size() == variants);  // and no row the config lacks
}

TEST_CASE("every variant: the memory estimate, gpt_parameter_count, the checkpoint limits and the model agree")
{
    std::size_t checked = 0;
    for (const std::size_t hidden : {std::size_t(0), std::size_t(12)})
    {
        for (const std::size_t kv : {std::size_t(0), std::size_t(1)})
        {
            gpt_config base{7, 5, 2, 8, 2, kv};
            base.mlp_hidden = hidden;
            for (const gpt_config& c : every_variant(base))
            {
                CAPTURE(describe(c));
                const auto model = gpt_parameters<float>::init(c, 1);
                std::uint64_t values = 0, tensors = 0;
                for (const auto& p : model.named_parameters())
                {
                    values += p.value().size();
                    ++tensors;
                }
                CHECK(gpt_parameter_count(c) == values);
                CHECK(train::sizes_of(c).parameters == values);
                io::checkpoint_demand demand;
                REQUIRE(io::checkpoint_demand_of(config_metadata(c), demand));
                CHECK(demand.values == values);
                CHECK(demand.tensors == tensors);
                io::model_layout layout;
                static_cast<gpt_config&>(layout) = c;
                CHECK(layout.tensor_shapes().size() == tensors);
                ++checked;
            }
        }
    }
    CHECK(checked == 4 * 2 * 3 * 4 * 3 * 2 * 2);  // kv x hidden, then norm, position, mlp, bias, tied_head, qk_norm
}

TEST_CASE("metadata: a key named in model_keys that this build does not know is refused by every reader")
{
    test::temp_dir dir;
    const gpt_config c{7, 5, 1, 8, 2, 0};
    const std::string path = dir / "model.safetensors";
    io::save_checkpoint(path, gpt_parameters<float>::init(c, 1));
    io::safetensors_file file = io::read_safetensors(path);
    CHECK(file.metadata.count("model_keys") == 0);  // a default model's metadata: the six sizes, as always

    file.metadata["model_keys"] = "norm,flash_norm";
    file.metadata["flash_norm"] = "yes";
    const std::string newer = dir / "newer.safetensors";
    io::write_safetensors(newer, file);
    const std::string message = exception_message([&] { io::load_checkpoint<float>(newer); });
    CHECK(test::contains(message, "'model_keys' = 'flash_norm'"));
    io::model_layout layout;
    const std::string converter = exception_message([&] { io::read_model_checkpoint(newer, layout); });
    CHECK(test::contains(converter, "flash_norm"));

    // Without model_keys an unknown metadata key is no model key: kept and ignored.
    file.metadata.erase("model_keys");
    const std::string older = dir / "older.safetensors";
    io::write_safetensors(older, file);
    CHECK(io::load_checkpoint<float>(older).metadata.at("flash_norm") == "yes");
}

TEST_CASE("config_with_values: Python's and the tools' keywords, each a field; unknown keys refused")
{
    const gpt_config c = config_with_values({}, {{"vocab_size", "7"}, {"block_size", "5"}, {"layers", "1"},
                                                 {"d_model", "8"}, {"heads", "2"}, {"norm", "rmsnorm"},
                                                 {"tied_head", "false"}});
    CHECK(c.norm == norm_kind::rmsnorm);
    CHECK_FALSE(c.tied_head);
    CHECK(c.kv_heads == 2);  // normalised: G = H
    const std::string message =
        exception_message([] { config_with_values({}, {{"qk_normm", "rms"}}); });
    CHECK(test::contains(message, "'key' = 'qk_normm' is not one of vocab_size, block_size,"));
    CHECK(test::contains(message, "qk_norm"));  // the fields listed
    CHECK_THROWS_AS(config_with_values({}, {{"model_keys", "norm"}}), variant_error);
}

TEST_CASE("converters refuse by name what their format cannot express")
{
    io::model_layout gqa;
    static_cast<gpt_config&>(gqa) = gpt_config{7, 5, 1, 8, 2, 1};
    std::string value;
    gpt_config expressible = with_default_variant(gqa);
    expressible.kv_heads = gqa.heads;
    CHECK(first_difference(gqa, expressible, &value) == "kv_heads");
    CHECK(value == "1");
    CHECK(first_difference(gqa, gqa).empty());
}
}  // namespace test_gpt_config
