// The D-Bus wire format (dbus.hpp) and the pure half of asking systemd for a scope
// (systemd_scope.hpp). The client itself is tested against a real dbus-daemon in
// tests/integration/test_systemd_scope.py, and against systemd in the VM (tests/vm).
#include <doctest/doctest.h>

#include "dbus.hpp"
#include "systemd_scope.hpp"

using namespace pyjail;
using namespace pyjail::dbus;

namespace {

// A message as a bus would send it, little-endian: `fields` are (code, type, value) with
// string-like values, plus a reply serial when non-zero.
std::string message(Type type, std::uint32_t serial, std::uint32_t reply_serial,
                    std::vector<std::tuple<std::uint8_t, char, std::string>> fields,
                    const std::string& body) {
    Writer h;
    h.byte('l');
    h.byte(static_cast<std::uint8_t>(type));
    h.byte(0);
    h.byte(1);
    h.u32(static_cast<std::uint32_t>(body.size()));
    h.u32(serial);
    std::size_t a = h.begin_array(8);
    for (const auto& [code, t, value] : fields) {
        h.begin_struct();
        h.byte(code);
        h.signature(std::string(1, t));
        if (t == 'g') h.signature(value);
        else h.string(value);
    }
    if (reply_serial != 0) {
        h.begin_struct();
        h.byte(5);
        h.signature("u");
        h.u32(reply_serial);
    }
    h.end_array(a);
    h.align(8);
    return h.bytes() + body;
}

std::string job_removed(const std::string& sender, const std::string& job, const std::string& result) {
    Writer b;
    b.u32(42);
    b.string(job);
    b.string("pyjail-0000000000000001.scope");
    b.string(result);
    return message(Type::Signal, 7, 0,
                   {{1, 'o', "/org/freedesktop/systemd1"},
                    {2, 's', "org.freedesktop.systemd1.Manager"},
                    {3, 's', "JobRemoved"},
                    {7, 's', sender},
                    {8, 'g', "uoss"}},
                   b.bytes());
}

}  // namespace

TEST_CASE("StartTransientUnit is marshalled as its signature says") {
    Call call = systemd::start_scope_call("pyjail-00000000000000ff.scope", 4321);
    std::string bytes = encode_call(call, 3);
    REQUIRE(message_size(bytes) == bytes.size());
    // parse_message checks the body against the signature: every array length and padding.
    Message m = parse_message(bytes);
    CHECK(m.type == Type::MethodCall);
    CHECK(m.serial == 3);
    CHECK(m.path == "/org/freedesktop/systemd1");
    CHECK(m.interface == "org.freedesktop.systemd1.Manager");
    CHECK(m.member == "StartTransientUnit");
    CHECK(m.signature == "ssa(sv)a(sa(sv))");
    Reader r(m.body, false);
    CHECK(r.string() == "pyjail-00000000000000ff.scope");
    CHECK(r.string() == "fail");
    // The properties, as systemd reads them.
    for (const char* want : {"Description", "PIDs", "Delegate", "CollectMode"})
        CHECK(m.body.find(want) != std::string::npos);
    CHECK(m.body.find("inactive-or-failed") != std::string::npos);
    // The pid, little-endian, right after the "au" array's length (4).
    std::string pid_bytes = std::string("\x04\x00\x00\x00", 4) + std::string("\xe1\x10\x00\x00", 4);
    CHECK(m.body.find(pid_bytes) != std::string::npos);
}

TEST_CASE("Hello and AddMatch") {
    Message hello = parse_message(encode_call(systemd::hello_call(), 1));
    CHECK(hello.member == "Hello");
    CHECK(hello.signature.empty());
    CHECK(hello.body.empty());
    Message match = parse_message(encode_call(systemd::add_match_call(), 2));
    CHECK(match.signature == "s");
    CHECK(Reader(match.body, false).string() ==
          "type='signal',sender='org.freedesktop.systemd1',path='/org/freedesktop/systemd1',"
          "interface='org.freedesktop.systemd1.Manager',member='JobRemoved'");
}

TEST_CASE("a JobRemoved signal names its job, unit, result and sender") {
    Message m = parse_message(job_removed(":1.5", "/org/freedesktop/systemd1/job/77", "done"));
    auto j = systemd::parse_job_removed(m);
    REQUIRE(j);
    CHECK(j->sender == ":1.5");
    CHECK(j->job == "/org/freedesktop/systemd1/job/77");
    CHECK(j->unit == "pyjail-0000000000000001.scope");
    CHECK(j->result == "done");
    // Another signal, or the right member with another signature, is not one.
    Writer b;
    b.string("x");
    CHECK_FALSE(systemd::parse_job_removed(parse_message(message(
        Type::Signal, 8, 0,
        {{1, 'o', "/org/freedesktop/systemd1"}, {2, 's', "org.freedesktop.systemd1.Manager"},
         {3, 's', "JobRemoved"}, {8, 'g', "s"}},
        b.bytes()))));
    CHECK_FALSE(systemd::parse_job_removed(parse_message(encode_call(systemd::hello_call(), 1))));
}

TEST_CASE("an error reply's text, and replies must name what they answer") {
    Writer b;
    b.string("Unit pyjail-1.scope already exists.");
    Message m = parse_message(message(Type::Error, 9, 3,
                                      {{4, 's', "org.freedesktop.systemd1.UnitExists"}, {8, 'g', "s"}},
                                      b.bytes()));
    CHECK(m.reply_serial == 3u);
    CHECK(m.error_name == "org.freedesktop.systemd1.UnitExists");
    CHECK(error_text(m) == "Unit pyjail-1.scope already exists.");
    CHECK_THROWS_AS(parse_message(message(Type::Error, 9, 0, {{4, 's', "x.Y"}}, "")), DbusError);
    CHECK_THROWS_AS(parse_message(message(Type::Error, 9, 3, {}, "")), DbusError);
    CHECK_THROWS_AS(parse_message(message(Type::MethodReturn, 9, 0, {}, "")), DbusError);
}

TEST_CASE("a big-endian reply is read as such") {
    // A method return (serial 2, reply to 3) with one object path "/j/1", big-endian.
    std::string bytes("B\x02\x00\x01"
                      "\x00\x00\x00\x09"   // body length
                      "\x00\x00\x00\x02"   // serial
                      "\x00\x00\x00\x0f",  // header fields' length (15)
                      16);
    bytes += std::string("\x05\x01u\x00\x00\x00\x00\x03", 8);        // REPLY_SERIAL 3
    bytes += std::string("\x08\x01g\x00\x01o\x00", 7);               // SIGNATURE "o"
    bytes += std::string(1, '\0');                                    // to 8
    bytes += std::string("\x00\x00\x00\x04/j/1\x00", 9);             // the body
    REQUIRE(message_size(bytes) == bytes.size());
    Message m = parse_message(bytes);
    CHECK(m.big_endian);
    CHECK(m.reply_serial == 3u);
    CHECK(m.signature == "o");
    CHECK(Reader(m.body, true).string() == "/j/1");
}

TEST_CASE("malformed messages are refused, never read past their end") {
    std::string good = job_removed(":1.5", "/org/freedesktop/systemd1/job/77", "done");
    // Every truncation: too short to size (0), or refused.
    for (std::size_t n = 0; n < good.size(); ++n) {
        std::string_view cut(good.data(), n);
        if (n < 16) CHECK(message_size(cut) == 0);
        CHECK_THROWS_AS(parse_message(cut), DbusError);
    }
    std::string bad = good;
    bad[0] = 'x';
    CHECK_THROWS_AS(message_size(bad), DbusError);
    bad = good;
    bad[3] = 2;  // protocol version
    CHECK_THROWS_AS(message_size(bad), DbusError);
    bad = good;
    bad[7] = '\x7f';  // a body of 2 GiB
    CHECK_THROWS_AS(message_size(bad), DbusError);
    // A string without its NUL: the last byte of the body.
    bad = good;
    bad.back() = 'x';
    CHECK_THROWS_AS(parse_message(bad), DbusError);
    // The job path's length made longer than the body.
    bad = good;
    bad[good.find("/org/freedesktop/systemd1/job/77") - 4] = '\x70';
    CHECK_THROWS_AS(parse_message(bad), DbusError);
    // A signature that nests beyond the specification's depth.
    CHECK_THROWS_AS(parse_message(message(Type::Signal, 1, 0,
                                          {{8, 'g', std::string(70, 'a') + "y"}}, "")),
                    DbusError);
    CHECK_THROWS_AS(parse_message(message(Type::Signal, 1, 0, {{8, 'g', "(s"}}, "")), DbusError);
    CHECK_THROWS_AS(parse_message(message(Type::Signal, 1, 0, {{8, 'g', "{sss}"}}, "")), DbusError);
    // A header field of the wrong type.
    CHECK_THROWS_AS(parse_message(message(Type::Signal, 1, 0, {{3, 'o', "/x"}}, "")), DbusError);
    // An unknown header field is skipped, whatever it holds.
    Message m = parse_message(message(Type::Signal, 1, 0, {{42, 's', "later"}, {3, 's', "M"}}, ""));
    CHECK(m.member == "M");
}

TEST_CASE("EXTERNAL authentication lines") {
    CHECK(auth_request(1000) == std::string("\0AUTH EXTERNAL 31303030\r\n", 25));
    CHECK(auth_request(0) == std::string("\0AUTH EXTERNAL 30\r\n", 19));
    CHECK(auth_accepted("OK 1234deadbeef"));
    CHECK_FALSE(auth_accepted("REJECTED EXTERNAL"));
    CHECK_FALSE(auth_accepted("OKAY"));
}

TEST_CASE("bus addresses: the first unix socket") {
    CHECK(unix_socket_of("unix:path=/run/user/1000/bus") == "/run/user/1000/bus");
    CHECK(unix_socket_of("tcp:host=localhost,port=1;unix:path=/a%2cb%2C") == "/a,b,");
    CHECK(unix_socket_of("unix:abstract=/tmp/dbus-x,guid=00ff") == std::string("\0/tmp/dbus-x", 12));
    CHECK(unix_socket_of("unix:guid=1,path=/p") == "/p");
    CHECK_FALSE(unix_socket_of("unix:path=/a%zz"));
    CHECK_FALSE(unix_socket_of("unix:path=/a%2"));
    CHECK_FALSE(unix_socket_of("unix:path=/a%00b"));
    CHECK_FALSE(unix_socket_of("unix:tmpdir=/tmp"));
    CHECK_FALSE(unix_socket_of("tcp:host=x"));
    CHECK_FALSE(unix_socket_of(""));
}

TEST_CASE("which manager's bus: root the system's, a user their own") {
    std::string why;
    auto root = setup::choose_bus(0, "unix:path=/run/user/1000/bus", "/run/user/1000", nullptr, why);
    REQUIRE(root);
    CHECK(root->system);
    CHECK(root->socket == "/run/dbus/system_bus_socket");
    root = setup::choose_bus(0, nullptr, nullptr, "unix:path=/other", why);
    CHECK(root->socket == "/other");
    auto user = setup::choose_bus(1000, "unix:path=/s", "/run/user/1000", nullptr, why);
    CHECK_FALSE(user->system);
    CHECK(user->socket == "/s");
    CHECK(user->origin == "$DBUS_SESSION_BUS_ADDRESS");
    CHECK(setup::choose_bus(1000, nullptr, "/run/user/1000", nullptr, why)->socket == "/run/user/1000/bus");
    CHECK(setup::choose_bus(1000, "", "/x", nullptr, why)->socket == "/x/bus");
    // cron: no session variables; a relative runtime directory does not count.
    CHECK(setup::choose_bus(1000, nullptr, nullptr, nullptr, why)->socket == "/run/user/1000/bus");
    CHECK(setup::choose_bus(1000, nullptr, "rel", nullptr, why)->socket == "/run/user/1000/bus");
    CHECK_FALSE(setup::choose_bus(1000, "tcp:host=x", nullptr, nullptr, why));
    CHECK(why == "$DBUS_SESSION_BUS_ADDRESS (tcp:host=x) names no unix socket");
}

TEST_CASE("when to ask systemd for a scope") {
    CgroupSite delegated;
    delegated.ok = true;
    CgroupSite not_delegated;
    not_delegated.why_not = "cgroup /sys/fs/cgroup/user.slice/session-1.scope is not delegated";
    not_delegated.not_delegated = true;
    CgroupSite v1;
    v1.why_not = "the cgroup2 hierarchy at /sys/fs/cgroup lacks the memory controller(s)";
    using M = CgroupManager;
    using C = CgroupMode;
    auto ask = [](M m, C c, bool wants, const CgroupSite& s, bool parent, bool booted) {
        return setup::decide_scope(m, c, wants, s, parent, booted);
    };
    CHECK(ask(M::Auto, C::Auto, true, not_delegated, false, true).ask);
    CHECK(ask(M::Systemd, C::Require, true, not_delegated, false, true).ask);
    // The fast paths: no connection.
    CHECK_FALSE(ask(M::Auto, C::Auto, true, delegated, false, true).ask);
    CHECK_FALSE(ask(M::Systemd, C::Auto, true, delegated, false, true).ask);
    CHECK_FALSE(ask(M::Auto, C::Auto, false, not_delegated, false, true).ask);
    CHECK_FALSE(ask(M::Auto, C::Off, true, not_delegated, false, true).ask);
    CHECK_FALSE(ask(M::None, C::Auto, true, not_delegated, false, true).ask);
    CHECK_FALSE(ask(M::Auto, C::Auto, true, not_delegated, true, true).ask);
    // Where it cannot help: auto says nothing (the fallback notice does), systemd refuses.
    auto d = ask(M::Auto, C::Auto, true, not_delegated, false, false);
    CHECK_FALSE(d.ask);
    CHECK(d.refusal.empty());
    d = ask(M::Systemd, C::Auto, true, not_delegated, false, false);
    CHECK_FALSE(d.ask);
    CHECK(d.refusal == "--cgroup-manager systemd: systemd is not the init here "
                       "(/run/systemd/system does not exist)");
    CHECK(ask(M::Auto, C::Auto, true, v1, false, true).refusal.empty());
    CHECK(ask(M::Systemd, C::Auto, true, v1, false, true).refusal ==
          "--cgroup-manager systemd: a systemd scope cannot help: " + v1.why_not);
}

TEST_CASE("scope names") {
    CHECK(systemd::scope_name(0xff) == "pyjail-00000000000000ff.scope");
    CHECK(systemd::scope_name(~0ULL) == "pyjail-ffffffffffffffff.scope");
}
