// One writer per output folder: a training run (xgrad-train, xgrad.train.run, each run of
// xgrad-experiment) holds an exclusive lock on DIR/.xgrad.lock while it writes DIR, so that a second run
// on the same folder stops at once with a clear message instead of interleaving log.csv and checkpoints.
// The lock is flock(2)'s: the kernel drops it when the process ends, however it ends, so no stale lock
// is ever left behind (the empty file itself stays).
#pragma once

#include <string>

namespace xgrad::train
{
class folder_lock
{
public:
    // Locks `dir` (which must exist). Throws std::runtime_error naming the folder when another process
    // holds the lock, or when the lock file cannot be created.
    explicit folder_lock(const std::string& dir);
    ~folder_lock();
    folder_lock(const folder_lock&) = delete;
    folder_lock& operator=(const folder_lock&) = delete;

    static constexpr const char* file_name = ".xgrad.lock";

private:
    int fd_ = -1;
};
} // namespace xgrad::train
