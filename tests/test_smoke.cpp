#include <doctest/doctest.h>
#include "models/mha.hpp"
using namespace xgrad;
TEST_CASE("smoke")
{
    tape<double> t;
    array<double> A = {{1.0, 2.0}, {3.0, 4.0}}, B = {{1.0, 0.0}, {2.0, 0.0}};
    auto a = t.input(A);
    auto b = t.input(B);
    auto y = ops::sum(ops::matmul(a, b) * a);
    t.backward(y);
    CHECK(y.value()() == doctest::Approx(1 * 5 + 3 * 11));
    std::cout << t.trace() << a.grad() << "\n" << b.grad() << "\n";
}
