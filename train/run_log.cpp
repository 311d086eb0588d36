#include "train/run_log.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace xgrad::train
{
namespace
{
std::vector<std::string> cells_of(const std::string& line)
{
    std::vector<std::string> cells;
    std::stringstream in(line);
    for (std::string cell; std::getline(in, cell, ',');)
    {
        cells.push_back(cell);
    }
    return cells;
}

std::optional<double> number(const std::string& text)
{
    try
    {
        std::size_t used = 0;
        const double v = std::stod(text, &used);
        return used == text.size() ? std::optional<double>(v) : std::nullopt;
    }
    catch (const std::exception&)
    {
        return std::nullopt;
    }
}
}  // namespace

run_log run_log::read(const std::string& path)
{
    run_log log;
    std::ifstream in(path);
    std::string line;
    if (!std::getline(in, line))
    {
        return log;
    }
    log.header = cells_of(line);
    while (std::getline(in, line))
    {
        std::vector<std::string> cells = cells_of(line);
        const auto step = cells.empty() ? std::nullopt : number(cells[0]);
        if (step && cells.size() <= log.header.size())  // a trailing empty cell has no comma after it
        {
            cells.resize(log.header.size());
            log.rows[static_cast<std::int64_t>(*step)] = cells;
        }
    }
    return log;
}

bool run_log::has(const std::string& column) const
{
    return std::find(header.begin(), header.end(), column) != header.end();
}

std::map<std::int64_t, double> run_log::numbers(const std::string& column) const
{
    std::map<std::int64_t, double> out;
    const auto at = std::find(header.begin(), header.end(), column);
    if (at == header.end())
    {
        return out;
    }
    const std::size_t index = static_cast<std::size_t>(at - header.begin());
    for (const auto& [step, cells] : rows)
    {
        if (const auto v = number(cells[index]))
        {
            out[step] = *v;
        }
    }
    return out;
}
}  // namespace xgrad::train
