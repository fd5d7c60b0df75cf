// SPDX-License-Identifier: MIT
// Tests of io/detail/atomic_file.hpp through the savers: a save writes only regular files, so a
// target that is a device node, a FIFO, a socket or a symbolic link to one is refused, naming the
// path and what it is, and nothing is created or replaced. Nodes are made in a temporary
// directory (mknod needs root, as the tests run; without it the device cases are skipped).
#include <headwise/io/detail/atomic_file.hpp>
#include <headwise/io/npy.hpp>
#if __has_include(<nlohmann/json.hpp>)
#include <headwise/io/safetensors.hpp>
#define HEADWISE_TEST_SAFETENSORS 1
#endif

#include <sys/stat.h>       // mknod, mkfifo, lstat, S_IFCHR, S_IFBLK
#include <sys/sysmacros.h>  // makedev

#include <algorithm>   // std::sort
#include <filesystem>  // std::filesystem::directory_iterator, create_symlink
#include <functional>  // std::function
#include <map>         // std::map
#include <stdexcept>   // std::runtime_error
#include <string>      // std::string
#include <vector>      // std::vector

#include "support/catch.hpp"
#include "support/golden.hpp"
#include "support/special_files.hpp"

namespace test_atomic_file {

using headwise::Shape;
using headwise::Tensor;
using headwise::test::make_socket;
using headwise::test::ScratchDir;

namespace {

std::vector<std::string> listing(const std::filesystem::path& dir) {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir))
        names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}

/// What lstat says of `path`: its type and mode bits, and the device it stands for.
struct Node {
    mode_t mode = 0;
    dev_t rdev = 0;
    bool operator==(const Node& o) const { return mode == o.mode && rdev == o.rdev; }
};
Node node(const std::string& path) {
    struct stat st {};
    REQUIRE(::lstat(path.c_str(), &st) == 0);
    return Node{st.st_mode, st.st_rdev};
}

}  // namespace

TEST_CASE("a save onto a device, FIFO, socket or a link to one is refused, nothing changed",
          "[io][atomic][files]") {
    const ScratchDir dir("atomic-special");
    // name -> what the message calls it
    std::map<std::string, std::string> targets;
    // c 1 7 is /dev/full's device; b 7 0 a loop device's. Neither is ever opened here.
    if (::mknod(dir.file("full").c_str(), S_IFCHR | 0600, makedev(1, 7)) == 0 &&
        ::mknod(dir.file("block").c_str(), S_IFBLK | 0600, makedev(7, 0)) == 0) {
        targets["full"] = "a character device";
        targets["block"] = "a block device";
    } else {
        WARN("mknod refused (not root): the device node cases are skipped");
    }
    REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0600) == 0);
    targets["fifo"] = "a FIFO";
    REQUIRE(make_socket(dir.file("socket")));
    targets["socket"] = "a socket";
    for (const auto& [name, kind] : std::map<std::string, std::string>(targets)) {
        std::filesystem::create_symlink(dir.file(name), dir.file("link_to_" + name));
        targets["link_to_" + name] = "a symbolic link to " + kind;
    }
    const std::vector<std::string> before = listing(dir.path());
    const Tensor<float> t(Shape{2, 3}, {1, 2, 3, 4, 5, 6});
    std::vector<std::pair<std::string, std::function<void(const std::string&)>>> savers = {
        {"headwise::save_npy", [&](const std::string& p) { headwise::save_npy(p, t); }}};
#ifdef HEADWISE_TEST_SAFETENSORS
    savers.emplace_back("headwise::io::save_safetensors", [&](const std::string& p) {
        headwise::io::save_safetensors(p, std::map<std::string, Tensor<float>>{{"t", t}});
    });
#endif
    for (const auto& [function, save] : savers) {
        for (const auto& [name, kind] : targets) {
            CAPTURE(function, name);
            const std::string path = dir.file(name);
            const Node was = node(path);
            CHECK_THROWS_MATCHES(
                save(path), std::runtime_error,
                Message(function + ": " + path + ": is " + kind + ", not a regular file"));
            CHECK(node(path) == was);              // neither replaced nor turned into a file
            CHECK(listing(dir.path()) == before);  // no temporary file left
        }
    }
    // A regular file through a symbolic link is still replaced (the link kept).
    headwise::save_npy(dir.file("real.npy"), t);
    std::filesystem::create_symlink(dir.file("real.npy"), dir.file("link.npy"));
    headwise::save_npy(dir.file("link.npy"), Tensor<float>(Shape{1}, {7}));
    CHECK(std::filesystem::is_symlink(dir.file("link.npy")));
    CHECK(headwise::load_npy<float>(dir.file("real.npy")).numel() == 1);
}

TEST_CASE("AtomicFile refuses a special target before creating its temporary file",
          "[io][atomic][files]") {
    const ScratchDir dir("atomic-direct");
    REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0600) == 0);
    CHECK_THROWS_MATCHES(headwise::detail::AtomicFile<>("f", dir.file("fifo")), std::runtime_error,
                         Message("f: " + dir.file("fifo") + ": is a FIFO, not a regular file"));
    CHECK(listing(dir.path()) == std::vector<std::string>{"fifo"});
}

}  // namespace test_atomic_file
