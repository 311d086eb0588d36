// The GPT's config as command-line flags (CLI11): one flag for each row of models::visit_config that has
// one, with the row's help text, so that a new config field is a new flag of every tool without an edit
// here. Header-only, for the tools and the examples alike.
#pragma once

#include <map>
#include <string>
#include <type_traits>

#include <CLI/CLI.hpp>

#include "models/gpt_config.hpp"
#include "tools/command_line.hpp"

namespace xgrad::tools
{
namespace detail
{
// Reads a flag's text into a field as models::read_field does, its refusal as a CLI11 ValidationError in
// one printable line: "--norm 'x' is not one of layernorm, rmsnorm".
template <class Member>
void read_flag(const std::string& flag, const std::string& text, Member& member)
{
    try
    {
        models::read_field(flag, text, member);
    }
    catch (const models::variant_error& e)
    {
        std::string shown = e.value.substr(0, 40);
        for (char& ch : shown)
        {
            ch = ch >= 32 && ch < 127 ? ch : '?';  // one printable line whatever was typed
        }
        const bool list = e.allowed.find(',') != std::string::npos;
        throw CLI::ValidationError(flag + " '" + shown + "' is not " + (list ? "one of " : "") + e.allowed);
    }
}
}  // namespace detail

// Adds the config's flags to `app`, bound to `config`'s fields (their current values are the defaults
// shown). `with_sizes` false leaves out the sizes (a tool whose sizes come from elsewhere). An enum value
// (or a number off_when_zero) that is not allowed is a CLI11 ValidationError: "--norm 'x' is not one of
// layernorm, rmsnorm", "--attention-window '-1' is not a decimal integer >= 0 (0 off)". A bool
// field's flag sets the opposite of its default (--untied-head).
inline void add_model_flags(CLI::App& app, models::gpt_config& config, bool with_sizes = true)
{
    models::visit_config(config, [&app, with_sizes](const models::config_field& f, auto& member) {
        using value_type = std::decay_t<decltype(member)>;
        if (*f.flag == '\0' || (f.is_size && !with_sizes))
        {
            return;
        }
        if constexpr (std::is_same_v<value_type, bool>)
        {
            const bool flipped = !member;
            app.add_flag_callback(f.flag, [&member, flipped] { member = flipped; }, f.help);
        }
        else if constexpr (std::is_enum_v<value_type> || models::is_off_when_zero<value_type>::value)
        {
            const std::string flag = f.flag;
            app.add_option_function<std::string>(
                   flag, [&member, flag](const std::string& text) { detail::read_flag(flag, text, member); },
                   std::string(f.help) + ": " + models::allowed_text(member))
                ->default_str(models::field_text(member));
        }
        else
        {
            CLI::Option* option = app.add_option(f.flag, member, f.help)->capture_default_str();
            if constexpr (std::is_unsigned_v<value_type>)
            {
                option->check(count_check());  // tools/command_line.hpp: "-1" is not 2^64 - 1
            }
        }
    });
}

// The flags of a tool that runs a checkpoint's tensors as another variant (xgrad-sample, xgrad-gpt-npy:
// docs/spec.md, "More architecture variants"): the later variants' and those of a field with later values
// (models::has_later_values). Each value is checked as add_model_flags checks it and kept as text in
// `chosen` under its key, for models::run_as.
inline void add_run_as_flags(CLI::App& app, std::map<std::string, std::string>& chosen)
{
    models::gpt_config defaults;
    models::visit_config(defaults, [&app, &chosen](const models::config_field& f, auto& member) {
        using value_type = std::decay_t<decltype(member)>;
        if (!f.listed && !models::has_later_values(member))
        {
            return;
        }
        const std::string flag = f.flag, key = f.key;
        app.add_option_function<std::string>(
            flag,
            [&chosen, flag, key](const std::string& text) {
                value_type checked{};
                detail::read_flag(flag, text, checked);
                chosen[key] = text;
            },
            std::string(f.help) + ": " + models::allowed_text(member) + " (default: the checkpoint's)");
    });
}

// The flag of a config field's key (kv_heads -> --kv-heads), or "" when it has none.
inline std::string flag_of_config_key(const std::string& key)
{
    std::string flag;
    models::gpt_config c;
    models::visit_config(c, [&](const models::config_field& f, const auto&) {
        if (key == f.key)
        {
            flag = f.flag;
        }
    });
    return flag;
}
}  // namespace xgrad::tools
