#include <doctest/doctest.h>

#include "stdio.hpp"

using namespace pyjail;
using K = StdioKind;

namespace {

std::array<bool, 3> relayed(const StdioPlan& p) {
    return {p.fd[0].relay, p.fd[1].relay, p.fd[2].relay};
}

}  // namespace

TEST_CASE("pipes, sockets, terminals and /dev/null pass as they are") {
    for (K k : {K::Pipe, K::Socket, K::Tty, K::DevNull, K::Closed}) {
        CAPTURE(stdio_kind_name(k));
        StdioPlan p = plan_stdio({k, k, k}, false);
        CHECK_FALSE(p.any_relay());
    }
    // The common path: a terminal in, pipes out.
    CHECK_FALSE(plan_stdio({K::Tty, K::Pipe, K::Pipe}, false).any_relay());
}

TEST_CASE("files, directories and devices go through the relay") {
    for (K k : {K::Regular, K::Directory, K::CharDevice, K::BlockDevice, K::Other}) {
        CAPTURE(stdio_kind_name(k));
        CHECK(relayed(plan_stdio({k, K::Tty, K::Tty}, false)) == std::array<bool, 3>{true, false, false});
        CHECK(relayed(plan_stdio({K::Tty, k, K::Tty}, false)) == std::array<bool, 3>{false, true, false});
        CHECK(relayed(plan_stdio({K::Tty, K::Tty, k}, false)) == std::array<bool, 3>{false, false, true});
    }
}

TEST_CASE("an output limit relays stdout and stderr, never stdin that may pass") {
    CHECK(relayed(plan_stdio({K::Tty, K::Tty, K::Tty}, true)) == std::array<bool, 3>{false, true, true});
    CHECK(relayed(plan_stdio({K::Pipe, K::DevNull, K::Socket}, true)) ==
          std::array<bool, 3>{false, true, true});
    CHECK(relayed(plan_stdio({K::Regular, K::Pipe, K::Pipe}, true)) ==
          std::array<bool, 3>{true, true, true});
}

TEST_CASE("how each kind is written without waiting for its reader") {
    CHECK(write_method_for(K::Pipe) == WriteMethod::NoWait);
    CHECK(write_method_for(K::Socket) == WriteMethod::NoWait);
    CHECK(write_method_for(K::Tty) == WriteMethod::Private);
    CHECK(write_method_for(K::CharDevice) == WriteMethod::Private);
    CHECK(write_method_for(K::DevNull) == WriteMethod::Private);
    CHECK(write_method_for(K::Regular) == WriteMethod::Plain);
    CHECK(write_method_for(K::BlockDevice) == WriteMethod::Plain);
    StdioPlan p = plan_stdio({K::Regular, K::Pipe, K::Tty}, true);
    CHECK(p.fd[1].method == WriteMethod::NoWait);
    CHECK(p.fd[2].method == WriteMethod::Private);
}

TEST_CASE("stdout and stderr that are one file share one pipe") {
    StdioPlan p = plan_stdio({K::Tty, K::Regular, K::Regular}, false, true);
    CHECK(p.stderr_joins_stdout);
    CHECK_FALSE(plan_stdio({K::Tty, K::Regular, K::Regular}, false, false).stderr_joins_stdout);
    // Only when both are relayed: a terminal passes as it is without a limit.
    CHECK_FALSE(plan_stdio({K::Tty, K::Tty, K::Tty}, false, true).stderr_joins_stdout);
    CHECK(plan_stdio({K::Tty, K::Tty, K::Tty}, true, true).stderr_joins_stdout);
}
