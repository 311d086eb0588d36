// What every binding file shares: NumPy arrays in and out (always copies), the tape box that lets Python
// hold a tape, and the per-dtype class suffix. The Python package (python/xgrad/) is the API users see;
// this layer only moves data across the boundary and turns C++ exceptions into Python ones.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "autodiff/tape.hpp"

namespace xgrad::python
{
namespace py = pybind11;

// NumPy arrays accepted from Python: C order, the exact dtype (NumPy converts anything else, copying).
template <class T>
using numpy_in = py::array_t<T, py::array::c_style | py::array::forcecast>;

// "f64" or "f32": the suffix of every per-dtype class and function ("Tape_f64", "Var_f32", ...).
template <class T>
std::string dtype_suffix()
{
    return sizeof(T) == 8 ? "f64" : "f32";
}

inline shape_t shape_of(const py::array& a)
{
    return shape_t(a.shape(), a.shape() + a.ndim());
}

// A copy of a NumPy array as an xgrad array (or mask, or ids): A and B share no memory.
template <class Array, class T>
Array copy_in(const py::array_t<T, py::array::c_style | py::array::forcecast>& a)
{
    Array out = Array::from_shape(shape_of(a));
    std::copy(a.data(), a.data() + a.size(), out.data());
    return out;
}

template <class T>
array<T> to_array(const numpy_in<T>& a)
{
    return copy_in<array<T>>(a);
}

inline ids_t to_ids(const numpy_in<std::int64_t>& a)
{
    return copy_in<ids_t>(a);
}

inline mask_t to_mask(const numpy_in<bool>& a)
{
    return copy_in<mask_t>(a);
}

// A fresh NumPy array holding a copy of `a` (Python owns it; nothing in xgrad points into it).
template <class E>
py::array_t<typename E::value_type> to_numpy(const E& a)
{
    using T = typename E::value_type;
    std::vector<py::ssize_t> shape(a.shape().begin(), a.shape().end());
    py::array_t<T> out(shape);
    std::copy(a.data(), a.data() + a.size(), out.mutable_data());
    return out;
}

// What Python holds for a tape: its own tape, or one lent for the duration of a call (gradcheck's
// evaluations), which expires when the call returns so that a kept reference raises instead of dangling.
template <class T>
class tape_box
{
public:
    tape_box() : owned_(std::make_unique<tape<T>>()), tape_(owned_.get()) {}
    explicit tape_box(tape<T>& lent) : tape_(&lent) {}

    tape<T>& get()
    {
        if (!tape_)
        {
            throw std::runtime_error("Tape: this tape was lent to a gradcheck evaluation, which has finished");
        }
        return *tape_;
    }
    void expire()
    {
        guards_.clear();
        tape_ = nullptr;
    }

    // no_grad as a Python context manager: enter pushes a guard, exit pops the newest.
    void enter_no_grad() { guards_.push_back(std::make_unique<typename tape<T>::no_grad_guard>(get())); }
    void exit_no_grad()
    {
        if (guards_.empty())
        {
            throw std::runtime_error("Tape.no_grad: exit without a matching enter");
        }
        guards_.pop_back();
    }

private:
    std::unique_ptr<tape<T>> owned_;
    tape<T>* tape_;
    std::vector<std::unique_ptr<typename tape<T>::no_grad_guard>> guards_;  // destroyed before owned_
};

// The binding files, each for float and double.
template <class T>
void bind_tape_and_ops(py::module_& m);
template <class T>
void bind_models(py::module_& m);
template <class T>
void bind_training(py::module_& m);
template <class T>
void bind_muon(py::module_& m);  // after bind_training (its optimiser base)
void bind_dtype_free(py::module_& m);
void bind_tokenizer(py::module_& m);  // python/bind_tokenizer.cpp
void bind_grad(py::module_& m);  // python/bind_grad.cpp
void bind_function(py::module_& m);  // python/bind_function.cpp: xgrad.Function's nodes
void bind_numpy_ops(py::module_& m);  // python/bind_numpy_ops.cpp: abs sin cos where take ...
}  // namespace xgrad::python
