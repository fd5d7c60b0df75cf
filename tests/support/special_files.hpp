// SPDX-License-Identifier: MIT
// Files that are not regular files, made in a test's scratch directory: a unix socket.
#pragma once

#include <sys/socket.h>  // socket, bind, AF_UNIX
#include <sys/un.h>      // sockaddr_un
#include <unistd.h>      // close

#include <cstring>  // std::strncpy
#include <string>   // std::string

namespace headwise::test {

/// A unix socket bound at `path` and closed again (the directory entry stays); false when the
/// path is too long for a socket address or bind fails.
inline bool make_socket(const std::string& path) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0) return false;
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (path.size() >= sizeof address.sun_path) {
        ::close(fd);
        return false;
    }
    std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
    const bool bound = ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
    ::close(fd);
    return bound;
}

}  // namespace headwise::test
