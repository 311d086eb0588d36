// How processes of a data-parallel run talk: a rank, a size, a sum across processes. One process is a
// communicator of size 1 that does nothing; Open MPI's is in train/mpi_communicator.cpp (built when
// MPI is found).
#pragma once

#include <cstddef>
#include <memory>

namespace xgrad::train
{
class communicator
{
public:
    virtual ~communicator() = default;
    virtual int rank() const { return 0; }
    virtual int size() const { return 1; }
    // In place: every process ends with the element-wise sum over all processes.
    virtual void allreduce_sum(float* /*data*/, std::size_t /*count*/) {}
    virtual void allreduce_sum(double* /*data*/, std::size_t /*count*/) {}
    // allreduce_sum for waits that may last minutes (a process done with its share of a grid waiting for
    // the others): one that arrives early sleeps between polls instead of spinning on a core the others'
    // work needs. Not counted in allreduce_seconds.
    virtual void allreduce_sum_sleeping(double* /*data*/, std::size_t /*count*/) {}
    // Seconds spent inside allreduce so far.
    virtual double allreduce_seconds() const { return 0; }
};

// The MPI communicator when this process was started by mpirun (and xgrad was built with MPI);
// otherwise the single-process one. Initialises MPI on first use and finalises it at exit.
std::unique_ptr<communicator> make_communicator();
// True when xgrad was built with MPI.
bool built_with_mpi();
}  // namespace xgrad::train
