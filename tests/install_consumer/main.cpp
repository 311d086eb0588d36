// Builds against the installed headers and xgrad::core: d(sum(x * x))/dx = 2x.
#include <cstdio>

#include "ops/ops.hpp"

int main()
{
    xgrad::tape<double> t;
    xgrad::array<double> values = {1.0, 2.0, 3.0};
    auto x = t.input(values);
    t.backward(xgrad::ops::sum(x * x));
    const bool ok = x.grad()(0) == 2.0 && x.grad()(1) == 4.0 && x.grad()(2) == 6.0;
    std::printf("installed xgrad: gradient %s\n", ok ? "correct" : "WRONG");
    return ok ? 0 : 1;
}
