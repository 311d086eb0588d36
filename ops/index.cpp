// Index ops: slice and concat along one axis, and the embedding row gather. Each moves contiguous
// blocks with memcpy (a row-major array along one axis is `outer` blocks of `length * inner` elements),
// and each backward moves the gradient's blocks back to where the forward took them from.
#include <cstring>

#include <memory>

#include "autodiff/instantiate.hpp"
#include "autodiff/record.hpp"
#include "ops/ops.hpp"

namespace xgrad::ops
{
namespace
{
// Copies `count` elements, skipping the call when there is nothing (memcpy of a null pointer is UB).
template <class T>
void copy_elements(T* to, const T* from, std::size_t count)
{
    if (count > 0)
    {
        std::memcpy(to, from, count * sizeof(T));
    }
}

std::string shapes_str(const std::vector<shape_t>& shapes)
{
    std::string s;
    for (const auto& shape : shapes)
    {
        s += (s.empty() ? "" : ", ") + shape_str(shape);
    }
    return s;
}

template <class T>
void check_concat(const std::vector<var<T>>& parts, std::size_t axis)
{
    if (parts.empty())
    {
        fail("concat", "needs at least one part, got none");
    }
    std::vector<shape_t> shapes;
    for (const auto& p : parts)
    {
        shapes.push_back(p.shape());
        if (p.state() != parts.front().state())  // checked up front: a tree of nodes must not half-record
        {
            fail("concat", "parts were recorded on different tapes");
        }
    }
    const shape_t& first = shapes.front();
    if (axis >= first.size())
    {
        fail("concat", "axis " + std::to_string(axis) + " out of range for parts of shapes " + shapes_str(shapes));
    }
    for (const auto& shape : shapes)
    {
        bool agree = shape.size() == first.size();
        for (std::size_t ax = 0; agree && ax < shape.size(); ++ax)
        {
            agree = ax == axis || shape[ax] == first[ax];
        }
        if (!agree)
        {
            fail("concat", "parts of shapes " + shapes_str(shapes) + " differ outside axis " + std::to_string(axis));
        }
    }
}

// One concat node of 1 to max_inputs parts (already checked).
// y = [x_0 x_1 ... x_k] along `axis`: within each outer block, part i's slices follow part i-1's.
// dL/dx_i = the slices of g at part i's place along the axis.
template <class T>
var<T> concat_node(const std::vector<var<T>>& parts, std::size_t axis)
{
    std::vector<axis_split> splits;
    shape_t out_shape = parts.front().shape();
    out_shape[axis] = 0;
    for (const auto& p : parts)
    {
        splits.push_back(split_at(p.shape(), axis));
        out_shape[axis] += splits.back().length;
    }
    const axis_split out = split_at(out_shape, axis);
    array<T> y = array<T>::from_shape(out_shape);
    for (std::size_t o = 0; o < out.outer; ++o)
    {
        T* to = y.data() + o * out.length * out.inner;
        for (std::size_t k = 0; k < parts.size(); ++k)
        {
            const std::size_t block = splits[k].length * splits[k].inner;
            copy_elements(to, parts[k].value().data() + o * block, block);
            to += block;
        }
    }
    std::vector<shape_t> part_shapes;
    for (const auto& p : parts)
    {
        part_shapes.push_back(p.shape());
    }
    auto on_arrays = [splits, out, part_shapes](backward_context<T>& ctx) {
        const T* g = ctx.grad().data();
        std::size_t offset = 0;  // where part k starts along the axis
        for (std::size_t k = 0; k < splits.size(); ++k)
        {
            const std::size_t block = splits[k].length * splits[k].inner;
            if (ctx.needs_grad(k))
            {
                array<T> dx = array<T>::from_shape(part_shapes[k]);
                for (std::size_t o = 0; o < out.outer; ++o)
                {
                    copy_elements(dx.data() + o * block, g + (o * out.length + offset) * out.inner, block);
                }
                ctx.accumulate(k, std::move(dx));
            }
            offset += splits[k].length;
        }
    };
    // On vars: part k's gradient is g's slice [offset, offset + length) along the axis.
    auto on_vars = [splits, axis](graph_context<T>& ctx) {
        std::size_t offset = 0;
        for (std::size_t k = 0; k < splits.size(); ++k)
        {
            if (ctx.needs_grad(k))
            {
                ctx.accumulate(k, slice(ctx.grad(), axis, offset, offset + splits[k].length));
            }
            offset += splits[k].length;
        }
    };
    return detail::record("concat", parts, std::move(y), saves_nothing, detail::with_var_form<T>(on_arrays, on_vars));
}
}  // namespace

// y = x[..., begin:end, ...] along `axis`.
// dL/dx = g in [begin, end) along the axis, 0 elsewhere.
template <class T>
var<T> slice(const var<T>& x, std::size_t axis, std::size_t begin, std::size_t end)
{
    const shape_t in_shape = x.shape();
    if (axis >= in_shape.size())
    {
        fail("slice", "axis " + std::to_string(axis) + " out of range for input of shape " + shape_str(in_shape));
    }
    if (begin > end || end > in_shape[axis])
    {
        fail("slice", "range [" + std::to_string(begin) + ", " + std::to_string(end) + ") of axis " +
                          std::to_string(axis) + " is not within [0, " + std::to_string(in_shape[axis]) +
                          "] for input of shape " + shape_str(in_shape));
    }
    const axis_split in = split_at(in_shape, axis);
    shape_t out_shape = in_shape;
    out_shape[axis] = end - begin;
    const std::size_t block = (end - begin) * in.inner;  // one outer block of the output
    array<T> y = array<T>::from_shape(out_shape);
    const T* from = x.value().data();
    for (std::size_t o = 0; o < in.outer; ++o)
    {
        copy_elements(y.data() + o * block, from + (o * in.length + begin) * in.inner, block);
    }
    auto on_arrays = [in_shape, in, begin, block](backward_context<T>& ctx) {
        array<T> dx = xt::zeros<T>(in_shape);
        const T* g = ctx.grad().data();
        for (std::size_t o = 0; o < in.outer; ++o)
        {
            copy_elements(dx.data() + (o * in.length + begin) * in.inner, g + o * block, block);
        }
        ctx.accumulate(0, std::move(dx));
    };
    // On vars: g between zeros of the entries before begin and from end on.
    auto on_vars = [in_shape, axis, begin, end](graph_context<T>& ctx) {
        const var<T> g = ctx.grad();
        auto zeros = [&](std::size_t length) {
            shape_t s = in_shape;
            s[axis] = length;
            return constant_like(g, array<T>(xt::zeros<T>(s)));
        };
        std::vector<var<T>> parts;
        if (begin > 0)
        {
            parts.push_back(zeros(begin));
        }
        parts.push_back(g);
        if (end < in_shape[axis])
        {
            parts.push_back(zeros(in_shape[axis] - end));
        }
        ctx.accumulate(0, parts.size() == 1 ? parts[0] : concat(parts, axis));
    };
    return detail::record("slice", {x}, std::move(y), saves_nothing, detail::with_var_form<T>(on_arrays, on_vars));
}

// A node takes at most max_inputs inputs, so many parts are joined as a tree: consecutive groups of up to
// max_inputs parts, level by level (depth log_4 of the count; each level copies the data once).
template <class T>
var<T> concat(const std::vector<var<T>>& parts, std::size_t axis)
{
    check_concat(parts, axis);
    std::vector<var<T>> level = parts;
    while (level.size() > max_inputs)
    {
        std::vector<var<T>> next;
        for (std::size_t i = 0; i < level.size(); i += max_inputs)
        {
            const auto group_end = level.begin() + std::min(level.size(), i + max_inputs);
            const std::vector<var<T>> group(level.begin() + i, group_end);
            next.push_back(group.size() == 1 ? group.front() : concat_node(group, axis));
        }
        level = std::move(next);
    }
    return concat_node(level, axis);
}

// y[i..., :] = W[ids[i...], :] for weight W (V, d); y has shape ids.shape + (d,).
// dL/dW[v, :] = sum of g[i..., :] over the positions i... where ids[i...] = v (repeated ids accumulate);
// rows no id picked get 0. The ids get no gradient.
template <class T>
var<T> embedding(const var<T>& weight, const ids_t& ids)
{
    const shape_t weight_shape = weight.shape();
    const shape_t ids_shape = to_shape(ids.shape());
    if (weight_shape.size() != 2)
    {
        fail("embedding", "weight must be 2-D (V, d), got shape " + shape_str(weight_shape));
    }
    const std::size_t vocab = weight_shape[0], d = weight_shape[1];
    for (std::size_t i = 0; i < ids.size(); ++i)
    {
        const std::int64_t id = ids.flat(i);
        if (id < 0 || static_cast<std::size_t>(id) >= vocab)
        {
            fail("embedding", "id " + std::to_string(id) + " at position " + position_str(i, ids_shape) +
                                  " of ids of shape " + shape_str(ids_shape) + " is outside [0, " +
                                  std::to_string(vocab) + ") for weight of shape " + shape_str(weight_shape));
        }
    }
    shape_t out_shape = ids_shape;
    out_shape.push_back(d);
    array<T> y = array<T>::from_shape(out_shape);
    const T* w = weight.value().data();
    for (std::size_t i = 0; i < ids.size(); ++i)
    {
        copy_elements(y.data() + i * d, w + static_cast<std::size_t>(ids.flat(i)) * d, d);
    }
    const auto shared_ids = std::make_shared<const ids_t>(ids);  // one copy for both forms of the rule
    auto on_arrays = [shared_ids, weight_shape, d](backward_context<T>& ctx) {
        const ids_t& ids = *shared_ids;
        array<T> dw = xt::zeros<T>(weight_shape);
        const T* g = ctx.grad().data();
        for (std::size_t i = 0; i < ids.size(); ++i)
        {
            T* row = dw.data() + static_cast<std::size_t>(ids.flat(i)) * d;  // dW[ids[i], :] += g[i, :]
            const T* g_row = g + i * d;
            for (std::size_t j = 0; j < d; ++j)
            {
                row[j] += g_row[j];
            }
        }
        ctx.accumulate(0, std::move(dw));
    };
    // On vars: dW = onehot(ids)^T g, with onehot (N, V) a constant (N = the number of ids).
    auto on_vars = [shared_ids, vocab, d](graph_context<T>& ctx) {
        const ids_t& ids = *shared_ids;
        const var<T> g = ctx.grad();
        array<T> one_hot = xt::zeros<T>(shape_t{ids.size(), vocab});
        for (std::size_t i = 0; i < ids.size(); ++i)
        {
            one_hot(i, static_cast<std::size_t>(ids.flat(i))) = T(1);
        }
        const var<T> rows = reshape(g, {static_cast<long>(ids.size()), static_cast<long>(d)});
        ctx.accumulate(0, matmul(constant_like(g, std::move(one_hot)), rows, true, false));
    };
    const std::size_t kept_ids_bytes = ids.size() * sizeof(std::int64_t);
    return detail::record("embedding", {weight}, std::move(y), saves_nothing,
                          detail::with_var_form<T>(on_arrays, on_vars), 0, kept_ids_bytes);
}

#define XGRAD_INDEX(T)                                                                \
    template var<T> slice(const var<T>&, std::size_t, std::size_t, std::size_t);      \
    template var<T> concat(const std::vector<var<T>>&, std::size_t);                  \
    template var<T> embedding(const var<T>&, const ids_t&);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_INDEX)
}  // namespace xgrad::ops
