#include <doctest/doctest.h>

#include "stdio.hpp"

using namespace pyjail;
using Stdio = StdioKind;

namespace {

std::array<bool, 3> relayed(const StdioPlan& p) {
    return {p.fd[0].relay, p.fd[1].relay, p.fd[2].relay};
}

}  // namespace

TEST_CASE("pipes, sockets, terminals and /dev/null pass as they are") {
    for (Stdio k : {Stdio::Pipe, Stdio::Socket, Stdio::Tty, Stdio::DevNull, Stdio::Closed}) {
        CAPTURE(stdio_kind_name(k));
        StdioPlan p = plan_stdio({k, k, k}, false);
        CHECK_FALSE(p.any_relay());
    }
    // The common path: a terminal in, pipes out.
    CHECK_FALSE(plan_stdio({Stdio::Tty, Stdio::Pipe, Stdio::Pipe}, false).any_relay());
}

TEST_CASE("files, directories and devices go through the relay") {
    for (Stdio k : {Stdio::Regular, Stdio::Directory, Stdio::CharDevice, Stdio::BlockDevice, Stdio::Other}) {
        CAPTURE(stdio_kind_name(k));
        CHECK(relayed(plan_stdio({k, Stdio::Tty, Stdio::Tty}, false)) == std::array<bool, 3>{true, false, false});
        CHECK(relayed(plan_stdio({Stdio::Tty, k, Stdio::Tty}, false)) == std::array<bool, 3>{false, true, false});
        CHECK(relayed(plan_stdio({Stdio::Tty, Stdio::Tty, k}, false)) == std::array<bool, 3>{false, false, true});
    }
}

TEST_CASE("an output limit relays stdout and stderr, never stdin that may pass") {
    CHECK(relayed(plan_stdio({Stdio::Tty, Stdio::Tty, Stdio::Tty}, true)) == std::array<bool, 3>{false, true, true});
    CHECK(relayed(plan_stdio({Stdio::Pipe, Stdio::DevNull, Stdio::Socket}, true)) ==
          std::array<bool, 3>{false, true, true});
    CHECK(relayed(plan_stdio({Stdio::Regular, Stdio::Pipe, Stdio::Pipe}, true)) ==
          std::array<bool, 3>{true, true, true});
}

TEST_CASE("how each kind is written without waiting for its reader") {
    CHECK(write_method_for(Stdio::Pipe) == WriteMethod::NoWait);
    CHECK(write_method_for(Stdio::Socket) == WriteMethod::NoWait);
    CHECK(write_method_for(Stdio::Tty) == WriteMethod::Private);
    CHECK(write_method_for(Stdio::CharDevice) == WriteMethod::Private);
    CHECK(write_method_for(Stdio::DevNull) == WriteMethod::Private);
    CHECK(write_method_for(Stdio::Regular) == WriteMethod::Plain);
    CHECK(write_method_for(Stdio::BlockDevice) == WriteMethod::Plain);
    StdioPlan p = plan_stdio({Stdio::Regular, Stdio::Pipe, Stdio::Tty}, true);
    CHECK(p.fd[1].method == WriteMethod::NoWait);
    CHECK(p.fd[2].method == WriteMethod::Private);
}

TEST_CASE("stdout and stderr that are one file share one pipe") {
    StdioPlan p = plan_stdio({Stdio::Tty, Stdio::Regular, Stdio::Regular}, false, true);
    CHECK(p.stderr_joins_stdout);
    CHECK_FALSE(plan_stdio({Stdio::Tty, Stdio::Regular, Stdio::Regular}, false, false).stderr_joins_stdout);
    // Only when both are relayed: a terminal passes as it is without a limit.
    CHECK_FALSE(plan_stdio({Stdio::Tty, Stdio::Tty, Stdio::Tty}, false, true).stderr_joins_stdout);
    CHECK(plan_stdio({Stdio::Tty, Stdio::Tty, Stdio::Tty}, true, true).stderr_joins_stdout);
}
