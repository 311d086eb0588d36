// A run's log.csv (written by the training loop) read back by column name, one row per step: a row
// logged again after a resume replaces the older one.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace xgrad::train
{
struct run_log
{
    std::vector<std::string> header;
    std::map<std::int64_t, std::vector<std::string>> rows;  // by step

    // An empty log when the file is missing or has no header.
    static run_log read(const std::string& path);

    bool has(const std::string& column) const;
    // The column's numbers by step; empty cells left out.
    std::map<std::int64_t, double> numbers(const std::string& column) const;
    std::int64_t last_step() const { return rows.empty() ? 0 : rows.rbegin()->first; }
};
}  // namespace xgrad::train
