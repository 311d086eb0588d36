// Where tensor memory comes from. Every xgrad::array allocates through pool_allocator, which keeps
// freed buffers in size classes (64-byte steps below 4 KiB, quarter powers of two above) and hands them
// out again. A training loop records a fresh tape each step and frees it after backward; without the
// pool every step would return its buffers to the kernel and fault them in again (time in the kernel was
// about 20% of a medium MHA step).
#pragma once

#include <cstddef>
#include <new>
#include <utility>
#include <vector>

namespace xgrad
{
namespace detail
{
void* pool_allocate(std::size_t bytes);
void pool_deallocate(void* p, std::size_t bytes) noexcept;
}  // namespace detail

template <class T>
struct pool_allocator
{
    using value_type = T;

    pool_allocator() = default;
    template <class U>
    pool_allocator(const pool_allocator<U>&) noexcept
    {
    }

    T* allocate(std::size_t n)
    {
        if (n > std::size_t(-1) / 4 / sizeof(T))
        {
            throw std::bad_array_new_length();
        }
        return static_cast<T*>(detail::pool_allocate(n * sizeof(T)));
    }
    void deallocate(T* p, std::size_t n) noexcept { detail::pool_deallocate(p, n * sizeof(T)); }

    template <class U>
    bool operator==(const pool_allocator<U>&) const noexcept
    {
        return true;
    }
    template <class U>
    bool operator!=(const pool_allocator<U>&) const noexcept
    {
        return false;
    }
};

// A bump allocator for the tape's nodes: one pooled 64 KiB block holds hundreds of nodes, and reset()
// makes the blocks reusable. Objects placed here are destroyed by their owner, not by the arena.
class arena
{
public:
    arena() = default;
    arena(const arena&) = delete;
    arena& operator=(const arena&) = delete;
    ~arena();

    void* allocate(std::size_t bytes, std::size_t align);
    void reset();

private:
    static constexpr std::size_t block_size = 64 * 1024;
    std::vector<void*> blocks_;
    std::vector<std::pair<void*, std::size_t>> large_;
    std::size_t current_ = 0;
    std::size_t used_ = 0;
};

// Bytes the pool keeps for reuse right now, and the most it will keep (default 2 GiB).
std::size_t cached_buffer_bytes();
void set_buffer_cache_limit(std::size_t bytes);
// Returns every cached buffer to the system.
void release_cached_buffers();
}  // namespace xgrad
