// The single-process communicator, and Open MPI's when xgrad is built with it (XGRAD_WITH_MPI): a
// process started by mpirun joins MPI_COMM_WORLD; sums are MPI_Allreduce in place.
#include "train/communicator.hpp"

#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#if XGRAD_WITH_MPI
#include <mpi.h>
#endif

namespace xgrad::train
{
#if XGRAD_WITH_MPI
namespace
{
// Open MPI's launcher sets these for every process it starts; a plain run has none.
bool started_by_mpirun()
{
    return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
}

class mpi_communicator final : public communicator
{
public:
    mpi_communicator()
    {
        int initialised = 0;
        MPI_Initialized(&initialised);
        if (!initialised)
        {
            MPI_Init(nullptr, nullptr);
            std::atexit([] {
                int finalised = 0;
                MPI_Finalized(&finalised);
                if (!finalised)
                {
                    MPI_Finalize();
                }
            });
        }
        MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
        MPI_Comm_size(MPI_COMM_WORLD, &size_);
    }
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    void allreduce_sum(float* data, std::size_t count) override { sum(data, count, MPI_FLOAT); }
    void allreduce_sum(double* data, std::size_t count) override { sum(data, count, MPI_DOUBLE); }
    double allreduce_seconds() const override { return seconds_; }
    void allreduce_sum_sleeping(double* data, std::size_t count) override
    {
        MPI_Request request;
        int done = 0;
        if (MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD,
                           &request) != MPI_SUCCESS)
        {
            throw std::runtime_error("MPI_Iallreduce failed");
        }
        while (MPI_Test(&request, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done)
        {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        if (!done)
        {
            throw std::runtime_error("MPI_Iallreduce failed");
        }
    }

private:
    void sum(void* data, std::size_t count, MPI_Datatype type)
    {
        const auto start = std::chrono::steady_clock::now();
        if (MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), type, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
        {
            throw std::runtime_error("MPI_Allreduce failed");
        }
        seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    int rank_ = 0;
    int size_ = 1;
    double seconds_ = 0;
};
}  // namespace

bool built_with_mpi() { return true; }

std::unique_ptr<communicator> make_communicator()
{
    if (started_by_mpirun())
    {
        return std::make_unique<mpi_communicator>();
    }
    return std::make_unique<communicator>();
}
#else
bool built_with_mpi() { return false; }

std::unique_ptr<communicator> make_communicator() { return std::make_unique<communicator>(); }
#endif
}  // namespace xgrad::train
