#include "autodiff/memory.hpp"

#include <cstdlib>
#include <mutex>
#include <vector>

// Under AddressSanitizer (XGRAD_SANITIZE) the pool tells ASan which bytes are in use, so that a read past
// an array's end (into the size class's slack), or of an array after it went back to the pool, is
// reported as it would be with plain malloc and free. Elsewhere these macros do nothing.
#if defined(__has_include)
#if __has_include(<sanitizer/asan_interface.h>)
#include <sanitizer/asan_interface.h>
#endif
#endif
#ifndef ASAN_POISON_MEMORY_REGION
#define ASAN_POISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#define ASAN_UNPOISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#endif

namespace xgrad
{
namespace
{
constexpr std::size_t alignment = 64;      // a cache line; also what AVX-512 loads like
constexpr std::size_t small_limit = 4096;  // below: classes every 64 bytes

// Size classes: multiples of 64 bytes below 4 KiB; above, 2^k * q / 4 with q = 4..8 (at most 25% waste,
// four classes per power of two).
std::size_t class_of(std::size_t bytes, std::size_t* rounded)
{
    if (bytes < small_limit)
    {
        const std::size_t lines = bytes == 0 ? 1 : (bytes + alignment - 1) / alignment;
        *rounded = lines * alignment;
        return lines - 1;
    }
    const int top = 63 - __builtin_clzll(bytes);  // 2^top <= bytes < 2^(top + 1), top >= 12
    const std::size_t step = std::size_t(1) << (top - 2);
    const std::size_t quarters = (bytes + step - 1) / step;  // 4 .. 8; 8 is class 0 of the next power
    *rounded = quarters * step;
    return small_limit / alignment + static_cast<std::size_t>(top - 12) * 4 + (quarters - 4);
}

// The bytes of every buffer in class c (the inverse of class_of).
std::size_t class_bytes(std::size_t c)
{
    if (c < small_limit / alignment)
    {
        return (c + 1) * alignment;
    }
    const std::size_t k = c - small_limit / alignment;
    return (4 + k % 4) << (12 + k / 4 - 2);
}

class pool
{
public:
    void* allocate(std::size_t bytes)
    {
        if (bytes > std::size_t(-1) / 4)  // rounding up to a class must not wrap
        {
            throw std::bad_alloc();
        }
        std::size_t rounded = 0;
        const std::size_t c = class_of(bytes, &rounded);
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (c < free_.size() && !free_[c].empty())
            {
                void* p = free_[c].back();
                free_[c].pop_back();
                cached_ -= rounded;
                ASAN_UNPOISON_MEMORY_REGION(p, bytes);
                return p;
            }
        }
        void* p = plain_allocate(rounded);
        ASAN_POISON_MEMORY_REGION(static_cast<char*>(p) + bytes, rounded - bytes);  // the class's slack
        return p;
    }

    void deallocate(void* p, std::size_t bytes) noexcept
    {
        if (!p)
        {
            return;
        }
        std::size_t rounded = 0;
        const std::size_t c = class_of(bytes, &rounded);
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (cached_ + rounded <= limit_)
            {
                try
                {
                    if (free_.size() <= c)
                    {
                        free_.resize(c + 1);
                    }
                    free_[c].push_back(p);
                    cached_ += rounded;
                    ASAN_POISON_MEMORY_REGION(p, rounded);
                    return;
                }
                catch (...)
                {
                    // no room to remember it: give it back below
                }
            }
        }
        ASAN_UNPOISON_MEMORY_REGION(p, rounded);
        std::free(p);
    }

    std::size_t cached()
    {
        std::lock_guard<std::mutex> lock(mutex_);
        return cached_;
    }

    void set_limit(std::size_t bytes)
    {
        std::lock_guard<std::mutex> lock(mutex_);
        limit_ = bytes;
    }

    void release()
    {
        std::lock_guard<std::mutex> lock(mutex_);
        for (std::size_t c = 0; c < free_.size(); ++c)
        {
            for (void* p : free_[c])
            {
                ASAN_UNPOISON_MEMORY_REGION(p, class_bytes(c));
                std::free(p);
            }
            free_[c].clear();
        }
        cached_ = 0;
    }

private:
    static void* plain_allocate(std::size_t rounded)
    {
        void* p = std::aligned_alloc(alignment, rounded);
        if (!p)
        {
            throw std::bad_alloc();
        }
        return p;
    }

    std::mutex mutex_;
    std::vector<std::vector<void*>> free_;
    std::size_t cached_ = 0;
    std::size_t limit_ = std::size_t(2) << 30;
};

}  // namespace

arena::~arena()
{
    for (void* b : blocks_)
    {
        detail::pool_deallocate(b, block_size);
    }
    for (auto& [b, size] : large_)
    {
        detail::pool_deallocate(b, size);
    }
}

void* arena::allocate(std::size_t bytes, std::size_t align)
{
    if (bytes > block_size / 4)
    {
        large_.emplace_back(detail::pool_allocate(bytes), bytes);
        return large_.back().first;
    }
    used_ = (used_ + align - 1) / align * align;
    if (blocks_.empty() || used_ + bytes > block_size)
    {
        if (blocks_.empty() || ++current_ == blocks_.size())
        {
            blocks_.push_back(detail::pool_allocate(block_size));
            current_ = blocks_.size() - 1;
        }
        used_ = 0;
    }
    void* p = static_cast<char*>(blocks_[current_]) + used_;
    used_ += bytes;
    return p;
}

void arena::reset()
{
    for (auto& [b, size] : large_)
    {
        detail::pool_deallocate(b, size);
    }
    large_.clear();
    current_ = 0;
    used_ = 0;
}

namespace
{
// Never destroyed: arrays in static storage may be freed after any other static object.
pool& the_pool()
{
    static pool* p = new pool;
    return *p;
}
}  // namespace

namespace detail
{
void* pool_allocate(std::size_t bytes)
{
    return the_pool().allocate(bytes);
}

void pool_deallocate(void* p, std::size_t bytes) noexcept
{
    the_pool().deallocate(p, bytes);
}
}  // namespace detail

std::size_t cached_buffer_bytes()
{
    return the_pool().cached();
}

void set_buffer_cache_limit(std::size_t bytes)
{
    the_pool().set_limit(bytes);
}

void release_cached_buffers()
{
    the_pool().release();
}
}  // namespace xgrad
