// sum_to: sums a gradient over the axes that broadcasting added or stretched.
#include "autodiff/sum_to.hpp"

#include <xtensor/xreducer.hpp>

namespace xgrad
{
template <class T>
array<T> sum_to(array<T>&& g, const shape_t& shape)
{
    const shape_t gshape = to_shape(g.shape());
    if (gshape == shape)
    {
        return std::move(g);
    }
    if (!broadcasts_to(shape, gshape))
    {
        throw std::logic_error("sum_to: gradient of shape " + shape_str(gshape) +
                               " cannot be reduced to shape " + shape_str(shape));
    }
    // Axes to sum: the leading ones `shape` lacks, and those where `shape` has size 1.
    const std::size_t lead = gshape.size() - shape.size();
    std::vector<std::size_t> axes;
    for (std::size_t i = 0; i < gshape.size(); ++i)
    {
        if (i < lead || (shape[i - lead] == 1 && gshape[i] != 1))
        {
            axes.push_back(i);
        }
    }
    array<T> reduced = xt::sum(g, axes, xt::evaluation_strategy::immediate);
    reduced.reshape(shape);
    return reduced;
}

template array<float> sum_to(array<float>&&, const shape_t&);
template array<double> sum_to(array<double>&&, const shape_t&);
}  // namespace xgrad
