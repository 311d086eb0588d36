// JSON as xgrad reads it from files (experiment specs, config.json, steps.json): parsed with bounded
// nesting, so that a deeply nested text can neither exhaust the stack (nlohmann-json's dump and
// destruction recurse) nor make an error message huge; every error starts with the file's name.
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace xgrad::io
{
// Deeper than any file of the project needs (a spec nests 3 levels, a config.json 2).
constexpr int max_json_nesting = 64;

// `text` parsed as JSON (nlohmann::json or nlohmann::ordered_json). Throws std::invalid_argument starting
// with `source`: not valid JSON (nlohmann-json's own words without its "[json.exception...]" tag, which
// say where; at most 300 bytes of them), or nested more than max_json_nesting levels deep.
template<class Json>
Json parse_json_bounded(const std::string& text, const std::string& source)
{
    const typename Json::parser_callback_t bounded = [&](int depth, typename Json::parse_event_t, Json&)
    {
        if (depth > max_json_nesting)
        {
            throw std::invalid_argument(source + ": JSON nested more than " +
                                        std::to_string(max_json_nesting) + " levels deep (the limit)");
        }
        return true;
    };
    try
    {
        return Json::parse(text, bounded);
    }
    catch (const nlohmann::json::exception& e)
    {
        std::string what = e.what(); // "[json.exception.parse_error.101] parse error at line 1, ..."
        const std::size_t tag_end = what.find("] ");
        if (what.rfind("[json.exception.", 0) == 0 && tag_end != std::string::npos)
        {
            what = what.substr(tag_end + 2);
        }
        // Its "last read: '...'" quotes the token it stopped in, which may be the whole input: keep a message
        // short, cut before a UTF-8 continuation byte.
        constexpr std::size_t longest = 300;
        if (what.size() > longest)
        {
            std::size_t cut = longest;
            while (cut > 0 && (static_cast<unsigned char>(what[cut]) & 0xC0) == 0x80)
            {
                --cut;
            }
            what = what.substr(0, cut) + "...";
        }
        throw std::invalid_argument(source + ": not valid JSON (" + what + ")");
    }
}

// The bytes of the regular file `path`, at most `limit` of them. Throws std::invalid_argument starting
// with `path`: it does not exist or cannot be read, it is not a regular file (a directory, a FIFO, a
// device such as /dev/zero), or it holds more than `limit` bytes (the limit named).
std::string read_small_file(const std::string& path, std::size_t limit);
} // namespace xgrad::io
