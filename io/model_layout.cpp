// Layouts from metadata, the tensors each variant declares, and staged output folders.
#include "io/model_layout.hpp"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <stdexcept>
#include <vector>

#include "models/gpt.hpp"

namespace xgrad::io
{
namespace
{
namespace fs = std::filesystem;
} // namespace

std::string shape_text(const shape_t& shape)
{
    std::string s = "(";
    for (std::size_t i = 0; i < shape.size(); ++i)
    {
        s += (i ? ", " : "") + std::to_string(shape[i]);
    }
    return s + (shape.size() == 1 ? ",)" : ")");
}

model_layout model_layout::from_metadata(const std::map<std::string, std::string>& m,
                                         const std::string& source)
{
    model_layout l;
    try
    {
        static_cast<models::gpt_config&>(l) = models::config_from_metadata(m);
    }
    catch (const models::variant_error& e)
    {
        fail(source, "metadata \"" + e.key + "\" is " + printable(e.value) + "; allowed: " + e.allowed);
    }
    catch (const models::missing_size_error& e)
    {
        fail(source, e.what());
    }
    try
    {
        l.validate("metadata");
    }
    catch (const std::invalid_argument& e)
    {
        fail(source, e.what());
    }
    return l;
}

void model_layout::to_metadata(std::map<std::string, std::string>& m) const
{
    const std::map<std::string, std::string> own = models::config_metadata(*this);
    for (auto it = m.begin(); it != m.end();)
    {
        bool keep = !models::is_config_key(it->first);
        if (!keep && it->first != "model_keys" && !own.count(it->first))
        {
            try
            {
                keep = models::config_metadata(models::config_with_values(*this, {*it})) == own;
            }
            catch (const models::variant_error&)
            {
            }
        }
        it = keep ? std::next(it) : m.erase(it);
    }
    for (const auto& [key, value] : own)
    {
        m[key] = value;
    }
}

std::map<std::string, shape_t> model_layout::tensor_shapes() const { return models::gpt_tensor_shapes(*this); }

void check_tensors(safetensors_file& file, const model_layout& layout, const std::string& source)
{
    for (auto it = file.tensors.begin(); it != file.tensors.end();)
    {
        it = it->first.rfind("optim.", 0) == 0 ? file.tensors.erase(it) : std::next(it);
    }
    const auto expected = layout.tensor_shapes();
    for (const auto& [name, shape] : expected)
    {
        const auto it = file.tensors.find(name);
        if (it == file.tensors.end())
        {
            fail(source,
                 "tensor " + name + " is missing (the metadata's variant declares it, shape " +
                   shape_text(shape) + ")");
        }
        const shape_t got(it->second.values.shape().begin(), it->second.values.shape().end());
        if (got != shape)
        {
            fail(source,
                 "tensor " + name + " has shape " + shape_text(got) + ", the metadata implies " +
                   shape_text(shape));
        }
    }
    for (const auto& [name, tensor] : file.tensors)
    {
        if (!expected.count(name))
        {
            fail(source,
                 "tensor " + printable(name) + " is not a parameter of the model its metadata describes");
        }
    }
}

safetensors_file read_model_checkpoint(const std::string& path, model_layout& layout)
{
    safetensors_file file = read_safetensors(path);
    layout = model_layout::from_metadata(file.metadata, path);
    check_tensors(file, layout, path);
    return file;
}

// ---- staged folders -------------------------------------------------------------------------------

namespace
{
void sync_path(const std::string& path, int flags)
{
    const int fd = ::open(path.c_str(), flags);
    if (fd >= 0)
    {
        ::fsync(fd);
        ::close(fd);
    }
}
} // namespace

staged_folder::staged_folder(const std::string& final_path)
  : final_(final_path)
{
    if (final_.empty())
    {
        throw std::runtime_error("output path is empty");
    }
    std::error_code ec;
    if (fs::exists(final_, ec) && !(fs::is_directory(final_, ec) && fs::is_empty(final_, ec)))
    {
        throw std::runtime_error(final_ +
                                 " exists and is not an empty folder; remove it or choose another name");
    }
    const fs::path parent = fs::absolute(final_).parent_path();
    std::string pattern =
      (parent / ("." + fs::path(final_).filename().string() + ".partial-XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr)
    {
        throw std::runtime_error("cannot create a folder beside " + final_ + " (" + std::strerror(errno) +
                                 ")");
    }
    staging_ = pattern;
}

staged_folder::~staged_folder()
{
    if (!committed_)
    {
        std::error_code ec;
        fs::remove_all(staging_, ec);
    }
}

std::string staged_folder::path(const std::string& name) const
{
    return (fs::path(staging_) / name).string();
}

void staged_folder::write_file(const std::string& name, const std::string& bytes) const
{
    const std::string p = path(name);
    {
        std::ofstream out(p, std::ios::binary | std::ios::trunc);
        out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        out.flush();
        if (!out)
        {
            throw std::runtime_error("cannot write " + p);
        }
    }
    sync_path(p, O_RDONLY);
}

void staged_folder::commit()
{
    sync_path(staging_, O_RDONLY | O_DIRECTORY);
    std::error_code ec;
    fs::rename(staging_, final_, ec);
    if (ec)
    {
        throw std::runtime_error("cannot move the output into place at " + final_ + " (" + ec.message() +
                                 ")");
    }
    committed_ = true;
    sync_path(fs::absolute(final_).parent_path().string(), O_RDONLY | O_DIRECTORY);
}
} // namespace xgrad::io
