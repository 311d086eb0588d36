// Reading and writing NumPy .npy files (format 1.0-3.0, C order, little-endian), with every field of
// the header validated: a truncated, oversized, Fortran-order or wrongly typed file is an error that
// names the file and the problem, never a crash or garbage.
#pragma once

#include <stdexcept>
#include <string>

#include "autodiff/xtensor.hpp"

namespace xgrad::npy
{
// Thrown for any unreadable or invalid file; what() is one line naming the file.
struct error : std::runtime_error
{
    using std::runtime_error::runtime_error;
};

// A float64 or float32 file, converted to T.
template <class T>
array<T> load_float(const std::string& path);

// A bool ('|b1') file.
mask_t load_bool(const std::string& path);

// An int64 ('<i8') or int32 ('<i4') file: token ids, targets.
ids_t load_ids(const std::string& path);

// Writes `a` as '<f8' or '<f4' (by T). Throws npy::error if the file cannot be written.
template <class T>
void save(const std::string& path, const array<T>& a);

// Writes a bool mask as '|b1'.
void save_bool(const std::string& path, const mask_t& m);

// Writes ids as '<i8', or as '<i4' (a value outside int32 is then an npy::error).
enum class int_width
{
    int64,
    int32,
};
void save_ids(const std::string& path, const ids_t& ids, int_width width = int_width::int64);
}  // namespace xgrad::npy
