// SPDX-License-Identifier: MIT
// AtomicFile: a file written under a temporary name beside its target and renamed over it once
// complete, so that a save that fails leaves the previous file as it was.
#pragma once

#include <algorithm>     // std::min
#include <cerrno>        // errno, EINTR, EEXIST, EIO
#include <chrono>        // std::chrono::steady_clock
#include <cstddef>       // std::size_t, std::ptrdiff_t
#include <cstdint>       // std::uint64_t
#include <filesystem>    // std::filesystem::path, rename, is_directory, is_symlink, canonical
#include <stdexcept>     // std::runtime_error
#include <string>        // std::string, std::to_string
#include <system_error>  // std::error_code, std::generic_category
#include <utility>       // std::move
#include <vector>        // std::vector

#if defined(_WIN32)
#include <fcntl.h>     // _O_WRONLY, _O_CREAT, _O_EXCL, _O_BINARY
#include <io.h>        // _open, _write, _commit, _close
#include <process.h>   // _getpid
#include <sys/stat.h>  // _S_IREAD, _S_IWRITE
#else
#include <fcntl.h>     // open, O_WRONLY, O_CREAT, O_EXCL, O_RDONLY
#include <sys/stat.h>  // stat, fchmod
#include <unistd.h>    // write, fsync, close, getpid
#endif

#include "file_kind.hpp"

namespace headwise::detail {

/// The savers' way of putting bytes into a file descriptor: POSIX write(2) (_write on Windows).
/// Returns the number of bytes written, which may be fewer than asked, or -1 with errno set.
/// AtomicFile takes the writer as a parameter so that a test can substitute one that fails part
/// way through a save; nothing a user can reach changes it.
struct SystemWrite {
    std::ptrdiff_t operator()(int fd, const void* data, std::size_t size) const {
#if defined(_WIN32)
        return _write(fd, data, static_cast<unsigned>(std::min<std::size_t>(size, 1u << 30)));
#else
        return ::write(fd, data, size);
#endif
    }
};

/// A file that appears at `path` complete or not at all. The constructor creates a new file
/// "<path>.tmp.<hex>" in the target's directory (same file system, so the rename cannot copy);
/// write() buffers and writes to it; commit() writes what is buffered, flushes it to the disk
/// (fsync), closes it and renames it over `path` (atomic on POSIX file systems), then flushes the
/// directory entry (best effort). Any failure removes the temporary file and throws
/// std::runtime_error "<function>: <path>: <what went wrong>"; so does destruction before
/// commit(), without throwing. An existing file at `path` keeps its permission bits; a symbolic
/// link at `path` is followed, so that the file it names is the one replaced. A `path` that is
/// a directory, a device node, a FIFO or a socket (or a symbolic link to one) is refused before
/// anything is created: "<function>: <path>: is a character device, not a regular file".
template <class Write = SystemWrite>
class AtomicFile {
public:
    AtomicFile(const char* function, std::string path, Write write = Write())
        : function_(function), path_(std::move(path)), write_(std::move(write)) {
        namespace fs = std::filesystem;
        std::error_code ec;
        fs::path target(path_);
        if (fs::is_symlink(target, ec)) {
            const fs::path resolved = fs::canonical(target, ec);
            if (!ec) target = resolved;
        }
        if (fs::is_directory(target, ec)) throw_error("is a directory");
        // Saves write only regular files: renaming over a device node, a FIFO or a socket would
        // replace it (as root, /dev/full itself), which no save means to do. Refused before the
        // temporary file exists, so nothing is created.
        const std::string special = special_file_kind(path_);
        if (!special.empty()) throw_error("is " + special + ", not a regular file");
        target_ = target.string();
        open_temporary();
        buffer_.reserve(kBufferSize);
    }
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;
    ~AtomicFile() { discard(); }

    /// Appends `size` bytes; they reach the temporary file whenever the buffer fills.
    void write(const void* data, std::size_t size) {
        const auto* bytes = static_cast<const unsigned char*>(data);
        while (size > 0) {
            const std::size_t n = std::min(size, kBufferSize - buffer_.size());
            buffer_.insert(buffer_.end(), bytes, bytes + n);
            bytes += n;
            size -= n;
            if (buffer_.size() == kBufferSize) flush_buffer();
        }
    }

    /// Completes the file and puts it in place of `path`.
    void commit() {
        flush_buffer();
#if defined(_WIN32)
        if (_commit(fd_) != 0) fail("cannot flush the data to the disk", errno);
        const int closed = _close(fd_);
#else
        if (::fsync(fd_) != 0) fail("cannot flush the data to the disk", errno);
        const int closed = ::close(fd_);
#endif
        const int close_error = errno;
        fd_ = -1;
        if (closed != 0) fail("cannot close the written file", close_error);
        std::error_code ec;
        std::filesystem::rename(temporary_, target_, ec);
        if (ec) fail("cannot replace the file (" + ec.message() + ")", 0);
        temporary_.clear();  // it is the target now
        sync_directory();
    }

    /// The temporary file's name while it exists (empty once committed or removed).
    const std::string& temporary_path() const { return temporary_; }

private:
    static constexpr std::size_t kBufferSize = std::size_t{1} << 16;

    [[noreturn]] void throw_error(const std::string& what) const {
        throw std::runtime_error(std::string(function_) + ": " + path_ + ": " + what);
    }

    /// Removes the temporary file and throws; `error` is an errno value (0: none to add).
    [[noreturn]] void fail(const std::string& what, int error) {
        discard();
        throw_error(error ? what + " (" + std::generic_category().message(error) + ")" : what);
    }

    /// Closes and removes the temporary file, if there is one; never throws.
    void discard() noexcept {
        if (fd_ >= 0) {
#if defined(_WIN32)
            _close(fd_);
#else
            ::close(fd_);
#endif
            fd_ = -1;
        }
        if (!temporary_.empty()) {
            std::error_code ec;
            std::filesystem::remove(temporary_, ec);
            temporary_.clear();
        }
    }

    /// A name no other file has, made from the process id and the clock, tried again on a clash.
    void open_temporary() {
#if defined(_WIN32)
        const auto pid = static_cast<std::uint64_t>(_getpid());
#else
        const auto pid = static_cast<std::uint64_t>(::getpid());
#endif
        const auto ticks =
            static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
        int error = 0;
        for (std::uint64_t attempt = 0; attempt < 100; ++attempt) {
            std::uint64_t mix = (pid * 0x9E3779B97F4A7C15ull) ^ ticks ^ (attempt << 48);
            std::string suffix;
            for (int i = 0; i < 8; ++i, mix >>= 4) suffix += "0123456789abcdef"[mix & 0xF];
            const std::string name = target_ + ".tmp." + suffix;
#if defined(_WIN32)
            fd_ = _open(name.c_str(), _O_WRONLY | _O_CREAT | _O_EXCL | _O_BINARY,
                        _S_IREAD | _S_IWRITE);
#else
            // Mode 0666 less the umask, as a file created by std::ofstream gets.
            fd_ = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
#endif
            if (fd_ >= 0) {
                temporary_ = name;
                keep_permissions();
                return;
            }
            error = errno;
            if (error != EEXIST) break;
        }
        throw_error("cannot open for writing (creating a temporary file beside it: " +
                    std::generic_category().message(error) + ")");
    }

    /// The replaced file's permission bits carry over to its replacement (best effort).
    void keep_permissions() noexcept {
#if !defined(_WIN32)
        struct stat existing;
        if (::stat(target_.c_str(), &existing) == 0)
            static_cast<void>(::fchmod(fd_, existing.st_mode & 07777));
#endif
    }

    void flush_buffer() {
        std::size_t done = 0;
        while (done < buffer_.size()) {
            const std::ptrdiff_t n = write_(fd_, buffer_.data() + done, buffer_.size() - done);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                // write(2) returning 0 for a non-empty request makes no progress: treat it as
                // the device refusing more data.
                const int error = n < 0 ? errno : EIO;
                fail("write failed after " + std::to_string(written_ + done) + " bytes (" +
                         std::generic_category().message(error) + "); the file is unchanged",
                     0);
            }
            done += static_cast<std::size_t>(n);
        }
        written_ += done;
        buffer_.clear();
    }

    /// A rename is durable once the directory holding it is flushed too. Failing here changes
    /// nothing for the caller: the new file is complete and in place either way.
    /// Building the directory's name may allocate; a bad_alloc there is swallowed like any other
    /// failure of this step, which is why the function can stay noexcept.
    void sync_directory() noexcept {
#if !defined(_WIN32)
        try {
            std::filesystem::path dir = std::filesystem::path(target_).parent_path();
            if (dir.empty()) dir = ".";
            const int fd = ::open(dir.c_str(), O_RDONLY | O_CLOEXEC);
            if (fd >= 0) {
                static_cast<void>(::fsync(fd));
                ::close(fd);
            }
        } catch (...) {
        }
#endif
    }

    const char* function_;
    std::string path_;    // as the caller gave it, for messages
    std::string target_;  // the file replaced: path_ with a symbolic link resolved
    std::string temporary_;
    Write write_;
    int fd_ = -1;
    std::uint64_t written_ = 0;  // bytes already in the temporary file
    std::vector<unsigned char> buffer_;
};

}  // namespace headwise::detail
