// The fused linear ops: linear (y = x W + b) and linear + GELU (an MLP's first layer), each one node with a
// hand-derived backward rule (the composed twins in ops/composed.hpp check them). The row loops are in
// kernels/rows.hpp and kernels/gelu.hpp; rows are split across threads when there are many.
#include <algorithm>

#include "autodiff/instantiate.hpp"
#include "autodiff/record.hpp"
#include "kernels/gelu.hpp"
#include "kernels/kernels.hpp"
#include "kernels/parallel.hpp"
#include "kernels/rows.hpp"
#include "ops/bf16_operands.hpp"
#include "ops/composed.hpp"
#include "ops/ops.hpp"

namespace xgrad::ops
{
namespace
{
// y = x W + b: x (..., d) with at least two axes, W (d, n), b (n), broadcast over every row.
void check_linear_shapes(const char* op, const shape_t& xs, const shape_t& ws, const shape_t& bs)
{
    if (xs.size() < 2 || ws.size() != 2 || bs.size() != 1 || xs.back() != ws[0] || bs[0] != ws[1])
    {
        fail(op, "need x (..., d) with at least 2 axes, weight (d, n) and bias (n), got x " + shape_str(xs) +
                     ", weight " + shape_str(ws) + ", bias " + shape_str(bs));
    }
}

std::uint64_t linear_multiply_adds(const shape_t& xs, const shape_t& ws)
{
    const shape_t batch(xs.begin(), xs.end() - 2);
    return kernels::matmul_multiply_adds(batch, xs[xs.size() - 2], ws[1], ws[0]);
}

// x W into a new array of shape (..., n), from the bf16 copies when the node rounded its operands once
// (ops/bf16_operands.hpp).
template <class T>
array<T> linear_product(const array<T>& x, const array<T>& w, const bf16_operands& copies)
{
    shape_t ys = to_shape(x.shape());
    ys.back() = w.shape()[1];
    array<T> y = array<T>::from_shape(ys);
    multiply_into(x, copies.a16.get(), false, w, copies.b16.get(), false, y);
    return y;
}

// The product's gradients given dh = dL/d(x W): dL/dx = dh W^T, dL/dW = x^T dh (inputs 0 and 1). When the
// forward rounded x and W once (`copies`: W's kept while x needs a gradient, x's while W needs one), dh
// is rounded once for both products.
template <class T>
void linear_backward_products(backward_context<T>& ctx, const array<T>& dh, const bf16_operands& copies)
{
    const kernels::bf16::bf16_copy dh16 = copies.rounded_gradient(dh);
    if (ctx.needs_grad(0))
    {
        array<T> dx = array<T>::from_shape(ctx.input(0).shape());
        multiply_into(dh, &dh16, false, ctx.input(1), copies.b16.get(), true, dx);  // dh W^T
        ctx.accumulate(0, std::move(dx));
    }
    if (ctx.needs_grad(1))
    {
        array<T> dw = array<T>::from_shape(ctx.input(1).shape());
        multiply_into(ctx.input(0), copies.a16.get(), true, dh, &dh16, false, dw);  // x^T dh
        ctx.accumulate(1, std::move(dw));
    }
}

}  // namespace

// y = x W + b, one node: the bias is added into the product's own buffer (no second array, no second
// pass over a new one). With g = dL/dy:
//   dL/dx = g W^T,  dL/dW = x^T g (summed over x's leading axes),  dL/db_j = sum over rows of g_j.
// Saves x and W (the product's operands), as matmul does; the bias's gradient needs only g.
template <class T>
var<T> linear(const var<T>& x, const var<T>& weight, const var<T>& bias)
{
    check_linear_shapes("linear", x.shape(), weight.shape(), bias.shape());
    const std::uint64_t macs = linear_multiply_adds(x.shape(), weight.shape());
    const bf16_operands rounded = bf16_operands::for_product(x, false, weight, false);
    array<T> y = linear_product(x.value(), weight.value(), rounded);
    kernels::add_bias_rows(y, bias.value());
    const bf16_operands copies = rounded.for_backward(x.requires_grad(), weight.requires_grad());
    const std::size_t kept = copies.bytes();
    auto rule = [n = bias.shape()[0], copies](backward_context<T>& ctx) {
        const array<T>& g = ctx.grad();
        linear_backward_products(ctx, g, copies);
        if (ctx.needs_grad(2))
        {
            ctx.accumulate(2, kernels::column_sums(g, n));
        }
    };
    auto twin = [](const std::vector<var<T>>& in) { return composed::linear(in[0], in[1], in[2]); };
    return detail::record("linear", {x, weight, bias}, std::move(y), saves_input0 | saves_input1,
                          detail::with_twin<T>(std::move(rule), twin), macs, kept);
}

namespace
{
// y = gelu(h), h = x W + b, in one node (Form: kernels/gelu.hpp's tanh_form or exact_form). The bias and
// the GELU go in one pass over the product's buffer, which then holds gelu'(h) for the backward in
// place of h (so the node keeps what linear + gelu kept, and the backward computes no tanh or erf). The
// rule holds that array (its bytes are declared to the tape); when no backward will run (no_grad, or no
// input wants a gradient) the slope is not computed. With g = dL/dy:
//   dL/dh = g gelu'(h);  dL/dx = dL/dh W^T,  dL/dW = x^T dL/dh,  dL/db_j = sum over rows of dL/dh_j.
// dL/dh (in g's own buffer when the tape frees g next) and dL/db come out of one pass over g.
template <class Form, class T>
var<T> linear_then_gelu(const char* op, const var<T>& x, const var<T>& weight, const var<T>& bias)
{
    check_linear_shapes(op, x.shape(), weight.shape(), bias.shape());
    const std::uint64_t macs = linear_multiply_adds(x.shape(), weight.shape());
    const bf16_operands rounded = bf16_operands::for_product(x, false, weight, false);
    array<T> slope = linear_product(x.value(), weight.value(), rounded);  // x W, then gelu'(x W + b)
    array<T> y = array<T>::from_shape(slope.shape());
    const std::size_t n = bias.shape()[0], rows = slope.size() / std::max<std::size_t>(n, 1);
    const T* b = bias.value().data();
    const bool backward = detail::records_backward({x, weight, bias});
    kernels::for_rows(rows, n, [&](std::size_t r) {
        T* row = slope.data() + r * n;
        kernels::gelu::bias_gelu_row<Form>(row, b, y.data() + r * n, backward ? row : nullptr, n);
    });
    const bf16_operands copies = rounded.for_backward(x.requires_grad(), weight.requires_grad());
    const std::size_t kept = backward ? slope.size() * sizeof(T) + copies.bytes() : 0;
    auto rule = [n, rows, slope = std::move(slope), copies](backward_context<T>& ctx) {
        array<T> dh = ctx.take_grad();  // g, turned into dL/dh in place
        const std::size_t blocks = kernels::row_block_count(rows, n);
        kernels::block_sums<T> bias_sums(blocks, n);
        kernels::for_row_blocks(rows, blocks, [&](std::size_t block, std::size_t begin, std::size_t end) {
            for (std::size_t r = begin; r < end; ++r)
            {
                T* dh_row = dh.data() + r * n;
                kernels::gelu::scale_by_slope_row(dh_row, slope.data() + r * n, bias_sums.of(block), n);
            }
        });
        linear_backward_products(ctx, dh, copies);
        if (ctx.needs_grad(2))
        {
            array<T> db = xt::zeros<T>(shape_t{n});
            bias_sums.add_to(db.data());
            ctx.accumulate(2, std::move(db));
        }
    };
    auto twin = [](const std::vector<var<T>>& in) {
        const var<T> h = composed::linear(in[0], in[1], in[2]);
        return std::is_same_v<Form, kernels::gelu::tanh_form> ? composed::gelu(h) : composed::gelu_exact(h);
    };
    return detail::record(op, {x, weight, bias}, std::move(y), saves_input0 | saves_input1,
                          detail::with_twin<T>(std::move(rule), twin), macs, kept);
}
}  // namespace

// gelu(x W + b), tanh form, in one node.
template <class T>
var<T> linear_gelu(const var<T>& x, const var<T>& weight, const var<T>& bias)
{
    return linear_then_gelu<kernels::gelu::tanh_form>("linear_gelu", x, weight, bias);
}

// gelu_exact(x W + b) in one node.
template <class T>
var<T> linear_gelu_exact(const var<T>& x, const var<T>& weight, const var<T>& bias)
{
    return linear_then_gelu<kernels::gelu::exact_form>("linear_gelu_exact", x, weight, bias);
}

#define XGRAD_LINEAR(T)                                                                    \
    template var<T> linear(const var<T>&, const var<T>&, const var<T>&);                   \
    template var<T> linear_gelu(const var<T>&, const var<T>&, const var<T>&);              \
    template var<T> linear_gelu_exact(const var<T>&, const var<T>&, const var<T>&);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_LINEAR)
}  // namespace xgrad::ops
