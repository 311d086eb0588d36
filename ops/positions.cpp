// Positional encodings: the rotary embedding (docs/spec.md, "Architecture variants"), one node with a
// hand-derived backward rule, checked against its composed twin (ops/composed.hpp). Its table and row
// loop are in kernels/rope.hpp.
#include <cmath>

#include "autodiff/instantiate.hpp"
#include "autodiff/record.hpp"
#include "kernels/rope.hpp"
#include "ops/checks.hpp"
#include "ops/composed.hpp"
#include "ops/ops.hpp"

namespace xgrad::ops
{
namespace
{
using checks::number_str;
using kernels::rope::rope_table;
using kernels::rope::rotate_pairs;

void check_rope(const shape_t& x, double base)
{
    if (x.size() != 4 || x[3] % 2 != 0)
    {
        fail("rope", "input must be (B, H, T, dh) with dh even, got shape " + shape_str(x));
    }
    if (!(base > 0) || !std::isfinite(base))
    {
        fail("rope", "base must be a finite number > 0, got " + number_str(base) + " (input of shape " +
                         shape_str(x) + ")");
    }
}
}  // namespace

// Row t of (B, H, T, dh), pair (2i, 2i+1), angle a = (offset + t) base^(-2i/dh):
//   y_2i = x_2i cos a - x_2i+1 sin a,   y_2i+1 = x_2i sin a + x_2i+1 cos a   (a rotation R(a)).
// dL/dx = R(a)^T g = R(-a) g:  dx_2i = g_2i cos a + g_2i+1 sin a,  dx_2i+1 = -g_2i sin a + g_2i+1 cos a.
// Saves only the (T, dh/2) table of cos and sin.
template <class T>
var<T> rope(const var<T>& x, double base, std::size_t position_offset)
{
    check_rope(x.shape(), base);
    const shape_t shape = x.shape();
    rope_table<T> table(shape[2], shape[3], base, position_offset);
    array<T> y = rotate_pairs(x.value(), table, false);
    const std::size_t table_bytes = (table.cos.size() + table.sin.size()) * sizeof(T);
    return detail::record(
        "rope", {x}, std::move(y), saves_nothing,
        detail::with_twin<T>([table = std::move(table)](backward_context<T>& ctx) {
            ctx.accumulate(0, rotate_pairs(ctx.grad(), table, true));
        }, [base, position_offset](const std::vector<var<T>>& in) { return composed::rope(in[0], base, position_offset); }),
        0, table_bytes);
}

#define XGRAD_POSITIONS(T) template var<T> rope(const var<T>&, double, std::size_t);
XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(XGRAD_POSITIONS)
}  // namespace xgrad::ops
