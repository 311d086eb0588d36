#include "train/folder_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace xgrad::train
{
folder_lock::folder_lock(const std::string& dir)
{
    const std::string path = (std::filesystem::path(dir) / file_name).string();
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0)
    {
        throw std::runtime_error(dir + ": cannot create the lock file " + file_name + " (" +
                                 std::strerror(errno) + ")");
    }
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0)
    {
        const int error = errno;
        ::close(fd_);
        fd_ = -1;
        throw std::runtime_error(dir + ": another training run is writing to this folder (it holds " +
                                 file_name +
                                 (error == EWOULDBLOCK ? "" : std::string(": ") + std::strerror(error)) +
                                 "); wait for it to end or choose another output folder");
    }
}

folder_lock::~folder_lock()
{
    if (fd_ >= 0)
    {
        ::close(fd_); // releases the lock
    }
}
} // namespace xgrad::train
