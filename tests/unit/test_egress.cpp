#include <doctest/doctest.h>

#include <string>

#include "dns_wire.hpp"
#include "egress_plan.hpp"
#include "error.hpp"
#include "policy.hpp"
#include "profile.hpp"
#include "sniff.hpp"

using namespace pyjail;

namespace {

std::string be16(unsigned v) { return std::string{static_cast<char>(v >> 8), static_cast<char>(v & 0xff)}; }
std::string be24(unsigned v) { return std::string{static_cast<char>(v >> 16)} + be16(v & 0xffff); }

// A ClientHello with the given extensions (each: type, body).
std::string client_hello(const std::vector<std::pair<unsigned, std::string>>& exts) {
    std::string body = be16(0x0303) + std::string(32, 'r') + std::string(1, '\0') + be16(2) + be16(0x1301) +
                       std::string("\x01\x00", 2);
    std::string e;
    for (const auto& [type, data] : exts) e += be16(type) + be16(static_cast<unsigned>(data.size())) + data;
    body += be16(static_cast<unsigned>(e.size())) + e;
    return std::string(1, '\x01') + be24(static_cast<unsigned>(body.size())) + body;
}

std::string sni_ext(const std::string& name) {
    std::string entry = std::string(1, '\0') + be16(static_cast<unsigned>(name.size())) + name;
    return be16(static_cast<unsigned>(entry.size())) + entry;
}

std::string record(const std::string& handshake) {
    return std::string("\x16\x03\x01", 3) + be16(static_cast<unsigned>(handshake.size())) + handshake;
}

}  // namespace

TEST_CASE("dns: a jail's query is parsed, answered with the fake address, or refused") {
    std::string q = dns::build_query(0x1234, "Api.Example.com", dns::kTypeA);
    auto parsed = dns::parse_query(q);
    REQUIRE(parsed);
    CHECK(parsed->id == 0x1234);
    CHECK(parsed->name == "api.example.com");
    CHECK(parsed->qtype == dns::kTypeA);
    CHECK(parsed->recursion_desired);
    std::string a = dns::build_answer(*parsed, dns::Rcode::NoError, dns::Ipv4{127, 100, 0, 1});
    // The answer parses as a response to the question, with the address.
    auto r = dns::parse_response(a, 0x1234, "api.example.com");
    REQUIRE(r);
    CHECK(r->rcode == dns::Rcode::NoError);
    REQUIRE(r->addresses.size() == 1);
    CHECK(dns::format_ipv4(r->addresses[0]) == "127.100.0.1");
    auto nx = dns::parse_response(dns::build_answer(*parsed, dns::Rcode::NxDomain, std::nullopt), 0x1234,
                                  "api.example.com");
    REQUIRE(nx);
    CHECK(nx->rcode == dns::Rcode::NxDomain);
    CHECK(nx->addresses.empty());
    // Another id or name is not the answer.
    CHECK_FALSE(dns::parse_response(a, 0x1235, "api.example.com"));
    CHECK_FALSE(dns::parse_response(a, 0x1234, "other.example.com"));
}

TEST_CASE("dns: malformed or unusual queries are not answered as names") {
    std::string q = dns::build_query(7, "example.com");
    std::optional<std::uint16_t> id;
    CHECK_FALSE(dns::parse_query(q.substr(0, 11), &id));
    CHECK_FALSE(id);
    CHECK_FALSE(dns::parse_query(q.substr(0, q.size() - 1), &id));  // the question cut short
    CHECK(id == 7);                                                  // a FORMERR can go back
    std::string response = q;
    response[2] = static_cast<char>(0x81);
    CHECK_FALSE(dns::parse_query(response, &id));
    CHECK_FALSE(id);  // a response is never answered
    std::string two = q;
    two[5] = 2;  // two questions
    CHECK_FALSE(dns::parse_query(two));
    // A compression pointer in a query's question.
    std::string ptr = q.substr(0, 12) + std::string("\xc0\x0c", 2) + be16(1) + be16(1);
    CHECK_FALSE(dns::parse_query(ptr));
    // A name with bytes outside letters, digits, '-', '_' matches no name.
    std::string odd = dns::build_query(9, "a b.example.com");
    auto p = dns::parse_query(odd);
    REQUIRE(p);
    CHECK_FALSE(dns::is_plain_name(p->name));
    // Longer than a name may be.
    std::string longname;
    for (int i = 0; i < 5; ++i) longname += std::string(60, 'a') + ".";
    longname += "com";
    CHECK_FALSE(dns::parse_query(dns::build_query(1, longname)));
    CHECK(dns::build_formerr(7).size() == 12);
}

TEST_CASE("dns: a response's pointers may only go backwards") {
    std::string q = dns::build_query(5, "a.com");
    std::string resp = q;
    resp[2] = static_cast<char>(0x81);
    resp[3] = static_cast<char>(0x80);
    resp[7] = 1;  // one answer
    // An answer whose name points at itself.
    std::size_t at = resp.size();
    resp += be16(0xc000 | static_cast<unsigned>(at)) + be16(1) + be16(1) + be16(0) + be16(60) + be16(4) + "\x01\x02\x03\x04";
    CHECK_FALSE(dns::parse_response(resp, 5, "a.com"));
    // Pointing at the question works.
    resp.replace(at, 2, be16(0xc00c));
    auto r = dns::parse_response(resp, 5, "a.com");
    REQUIRE(r);
    REQUIRE(r->addresses.size() == 1);
    CHECK(dns::format_ipv4(r->addresses[0]) == "1.2.3.4");
}

TEST_CASE("dns: resolv.conf nameservers") {
    auto ns = dns::parse_resolv_conf("# x\nsearch lan\nnameserver 10.0.0.1\nnameserver  ::1\n"
                                     "nameserver\t8.8.8.8 # google\nnameserver 1.1.1.1\nnameserver 9.9.9.9\n");
    REQUIRE(ns.size() == 3);
    CHECK(dns::format_ipv4(ns[0]) == "10.0.0.1");
    CHECK(dns::format_ipv4(ns[1]) == "8.8.8.8");
    CHECK(dns::format_ipv4(ns[2]) == "1.1.1.1");
    CHECK_FALSE(dns::parse_ipv4("1.2.3"));
    CHECK_FALSE(dns::parse_ipv4("1.2.3.256"));
    CHECK_FALSE(dns::parse_ipv4("1.2.3.4.5"));
    CHECK_FALSE(dns::parse_ipv4("01234.1.1.1"));
}

TEST_CASE("sniff: a ClientHello's SNI") {
    auto s = sniff(record(client_hello({{0x0a, "\x00\x02\x00\x17"}, {0, sni_ext("Files.Example.COM")}})));
    CHECK(s.kind == Sniffed::Kind::Tls);
    CHECK(s.host == "files.example.com");
    // No SNI: TLS, no host (the relay refuses it).
    auto none = sniff(record(client_hello({})));
    CHECK(none.kind == Sniffed::Kind::Tls);
    CHECK(none.host.empty());
    // Cut anywhere: wait for more.
    std::string full = record(client_hello({{0, sni_ext("a.com")}}));
    for (std::size_t n = 1; n < full.size(); ++n) CHECK(sniff(full.substr(0, n)).kind == Sniffed::Kind::NeedMore);
    // Split over two records.
    std::string hs = client_hello({{0, sni_ext("split.example.com")}});
    auto split = sniff(record(hs.substr(0, 10)) + record(hs.substr(10)));
    CHECK(split.kind == Sniffed::Kind::Tls);
    CHECK(split.host == "split.example.com");
}

TEST_CASE("sniff: ClientHellos pyjail refuses") {
    using K = Sniffed::Kind;
    CHECK(sniff(record(client_hello({{0, sni_ext("a.com")}, {0, sni_ext("b.com")}}))).kind == K::Refused);
    CHECK(sniff(record(client_hello({{0, sni_ext("a.com")}, {0xfe0d, "x"}}))).why.find("Encrypted") !=
          std::string::npos);
    CHECK(sniff(record(client_hello({{0, sni_ext(std::string("a.com\0b.com", 11))}}))).kind == K::Refused);
    CHECK(sniff(record(client_hello({{0, "\x00\x01"}}))).kind == K::Refused);
    // Two names in one list.
    std::string two = std::string(1, '\0') + be16(5) + "a.com" + std::string(1, '\0') + be16(5) + "b.com";
    CHECK(sniff(record(client_hello({{0, be16(static_cast<unsigned>(two.size())) + two}}))).kind == K::Refused);
    // Not a ClientHello; a record of another type after the first; a huge length.
    CHECK(sniff(record(std::string("\x02\x00\x00\x00", 4))).kind == K::Refused);
    CHECK(sniff(std::string("\x16\x03\x01\xff\xff", 5)).kind == K::Refused);
    std::string hs = client_hello({{0, sni_ext("a.com")}});
    CHECK(sniff(record(hs.substr(0, 10)) + std::string("\x17\x03\x03\x00\x01x", 6)).kind == K::Refused);
}

TEST_CASE("sniff: an HTTP request head's Host") {
    using K = Sniffed::Kind;
    std::string head = "GET /simple/ HTTP/1.1\r\nHost: PyPI.org:443\r\nAccept: */*\r\n\r\n";
    auto s = sniff(head + "body");
    CHECK(s.kind == K::Http);
    CHECK(s.host == "pypi.org");
    CHECK(s.head_size == head.size());
    for (std::size_t n = 1; n < head.size(); ++n) CHECK(sniff(head.substr(0, n)).kind == K::NeedMore);
    CHECK(sniff("GET http://pypi.org/x HTTP/1.1\r\nHost: pypi.org\r\n\r\n").kind == K::Http);
    CHECK(sniff("GET http://evil.com/x HTTP/1.1\r\nHost: pypi.org\r\n\r\n").kind == K::Refused);
    CHECK(sniff("CONNECT evil.com:443 HTTP/1.1\r\nHost: pypi.org\r\n\r\n").kind == K::Refused);
    CHECK(sniff("GET / HTTP/1.1\r\nHost: a.com\r\nHost: b.com\r\n\r\n").kind == K::Refused);
    CHECK(sniff("GET / HTTP/1.1\r\nHost: a.com\r\n X: folded\r\n\r\n").kind == K::Refused);
    CHECK(sniff("GET / HTTP/1.1\r\nX: a\nHost: b.com\r\nHost: a.com\r\n\r\n").kind == K::Refused);
    CHECK(sniff("GET / HTTP/1.1\r\nAccept: */*\r\n\r\n").kind == K::Refused);
    CHECK(sniff("GET / HTTP/1.1\r\nHost: a.com\r\n\r\n").host == "a.com");
    CHECK(sniff("GET / HTTP/1.1\r\nhOsT:\ta.com \r\n\r\n").host == "a.com");
    CHECK(sniff("GET / HTTP/1.1\r\nHost: a.com@b.com\r\n\r\n").kind == K::Refused);
    CHECK(sniff("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").kind == K::Refused);
    std::string big = "GET / HTTP/1.1\r\nX: " + std::string(kMaxSniff, 'x');
    CHECK(sniff(big).kind == K::Refused);
}

TEST_CASE("sniff: what lenient HTTP servers accept is read strictly") {
    using K = Sniffed::Kind;
    // Empty lines first: skipped, as servers do.
    auto lead = sniff("\r\nGET / HTTP/1.1\r\nHost: other.test\r\n\r\n");
    CHECK(lead.kind == K::Http);
    CHECK(lead.host == "other.test");
    CHECK(lead.head_size == 2 + 36);
    CHECK(sniff(std::string(17, '\n') + "GET / HTTP/1.1\r\n").kind == K::Refused);
    // A tab for a space, bare line feeds, a lower-case method: refused, not opaque.
    CHECK(sniff("GET\t/ HTTP/1.1\r\nHost: other.test\r\n\r\n").kind == K::Refused);
    CHECK(sniff("GET / HTTP/1.1\nHost: other.test\n\n").kind == K::Refused);
    CHECK(sniff("get / http/1.1\r\nHost: other.test\r\n\r\n").kind == K::Refused);
    CHECK(sniff("GET / HTTP/1.1\r\nHost: other.test\n\r\n").kind == K::Refused);
    // HTTP/0.9 has no headers: nothing to front with.
    CHECK(sniff("GET /\r\n").kind == K::Opaque);
}

TEST_CASE("sniff: an HTTP connection carries one request") {
    std::string in = "\r\nGET / HTTP/1.1\r\nHost: a.com\r\nConnection: keep-alive\r\nKeep-Alive: 5\r\n"
                     "Accept: */*\r\n\r\nGET / HTTP/1.1\r\nHost: b.com\r\n\r\n";
    auto s = sniff(in);
    REQUIRE(s.kind == Sniffed::Kind::Http);
    CHECK(one_request_only(in, s) == "GET / HTTP/1.1\r\nHost: a.com\r\nAccept: */*\r\nConnection: close\r\n\r\n");
}

TEST_CASE("sniff: other protocols are opaque") {
    using K = Sniffed::Kind;
    CHECK(sniff(std::string("\x00\x00\x00\x08\x04\xd2\x16\x2f", 8)).kind == K::Opaque);  // PostgreSQL
    CHECK(sniff("SSH-2.0-OpenSSH\r\n").kind == K::Opaque);
    CHECK(sniff("EHLO me\r\n").kind == K::Opaque);
    CHECK(sniff("PING\r\n").kind == K::Opaque);
    CHECK(sniff("PIN").kind == K::NeedMore);
    CHECK(sniff("\r\n").kind == K::NeedMore);
    CHECK(sniff("").kind == K::NeedMore);
}

TEST_CASE("egress: --allow-host and --net-resolve") {
    auto h = parse_allow_host("PyPI.org", "--allow-host");
    CHECK(h.name == "pypi.org");
    CHECK(h.ports == std::vector<std::uint16_t>{80, 443});
    auto w = parse_allow_host("*.example.com:8443", "--allow-host");
    CHECK(w.wildcard());
    CHECK(w.ports == std::vector<std::uint16_t>{8443});
    CHECK_THROWS_WITH_AS(parse_allow_host("1.2.3.4", "--allow-host"),
                         "--allow-host: '1.2.3.4' is not a host name with a domain", UsageError);
    CHECK_THROWS_WITH_AS(parse_allow_host("a.com:0", "--allow-host"), "--allow-host: 'a.com:0' has no valid port after ':'",
                         UsageError);
    CHECK_THROWS_AS(parse_allow_host("*", "--allow-host"), UsageError);
    CHECK_THROWS_AS(parse_allow_host("a..com", "--allow-host"), UsageError);
    CHECK_THROWS_AS(parse_allow_host("*.*.com", "--allow-host"), UsageError);
    auto p = parse_net_resolve("db.test:127.0.0.1", "--net-resolve");
    CHECK(p.name == "db.test");
    CHECK(dns::format_ipv4(p.address) == "127.0.0.1");
    CHECK_THROWS_WITH_AS(parse_net_resolve("db.test", "--net-resolve"), "--net-resolve: 'db.test' is not HOST:ADDRESS",
                         UsageError);
}

TEST_CASE("egress: the plan gives each name its address and listeners") {
    EgressPolicy e;
    e.hosts.push_back(parse_allow_host("a.com", "x"));
    e.hosts.push_back(parse_allow_host("a.com:5432", "x"));
    e.hosts.push_back(parse_allow_host("*.b.com:443", "x"));
    check_egress_policy(e);
    REQUIRE(e.hosts.size() == 2);
    CHECK(e.hosts[0].ports == std::vector<std::uint16_t>{80, 443, 5432});
    EgressPlan plan = plan_egress(e);
    CHECK(plan.slots.size() == 1 + kWildcardSlots);
    CHECK(plan.listeners.size() == 3 + kWildcardSlots);
    CHECK(dns::format_ipv4(plan.slots[0].address) == "127.100.0.1");
    CHECK(dns::format_ipv4(plan.slots.back().address) == "127.100.0.9");
    CHECK(find_allowed_host(e, "a.com") == 0u);
    CHECK(find_allowed_host(e, "x.b.com") == 1u);
    CHECK(find_allowed_host(e, "x.y.b.com") == 1u);
    CHECK_FALSE(find_allowed_host(e, "b.com"));
    CHECK_FALSE(find_allowed_host(e, "xb.com"));
    CHECK_FALSE(find_allowed_host(e, "a.com.evil.net"));
    // Too many listeners.
    EgressPolicy big;
    for (int i = 0; i < 31; ++i) big.hosts.push_back(parse_allow_host("*.d" + std::to_string(i) + ".com", "x"));
    CHECK_THROWS_AS(check_egress_policy(big), UsageError);
}

TEST_CASE("egress: addresses pyjail does not relay to unless pinned") {
    auto why = [](const char* a) { return refused_address_reason(*dns::parse_ipv4(a)); };
    CHECK(why("127.0.0.1"));
    CHECK(why("10.1.2.3"));
    CHECK(why("172.20.0.1"));
    CHECK_FALSE(why("172.32.0.1"));
    CHECK(why("192.168.1.1"));
    CHECK(why("169.254.169.254")->find("metadata") != std::string::npos);
    CHECK(why("100.100.0.1"));
    CHECK(why("0.0.0.0"));
    CHECK(why("224.0.0.1"));
    CHECK(why("255.255.255.255"));
    CHECK_FALSE(why("151.101.0.223"));
    CHECK_FALSE(why("8.8.8.8"));
}

TEST_CASE("egress: --allow-host @pypi is the index and its file host, on 443") {
    auto hosts = expand_allow_host("@pypi", "--allow-host");
    REQUIRE(hosts.size() == 2);
    CHECK(hosts[0].name == "pypi.org");
    CHECK(hosts[1].name == "files.pythonhosted.org");
    for (const auto& h : hosts) {
        CHECK(h.ports == std::vector<std::uint16_t>{443});
        CHECK(h.origin == "--allow-host (@pypi)");
    }
    // Not a preset: what parse_allow_host gives.
    auto plain = expand_allow_host("example.com:8080", "--allow-host");
    REQUIRE(plain.size() == 1);
    CHECK(plain[0].ports == std::vector<std::uint16_t>{8080});
    CHECK_THROWS_WITH_AS(expand_allow_host("@npm", "--allow-host"), "--allow-host: '@npm' is not a preset of hosts",
                         UsageError);
    CHECK_THROWS_AS(expand_allow_host("@", "--allow-host"), UsageError);
    // Every preset's hosts are what --allow-host takes, each a name with one port.
    for (const auto& p : allow_host_presets()) {
        INFO(p.name);
        CHECK(expand_allow_host("@" + std::string(p.name), "x").size() == p.hosts.size());
    }
    // A preset merges with the same host given again.
    EgressPolicy e;
    e.hosts = expand_allow_host("@pypi", "a");
    e.hosts.push_back(parse_allow_host("pypi.org:80", "b"));
    check_egress_policy(e);
    REQUIRE(e.hosts.size() == 2);
    CHECK(e.hosts[0].ports == std::vector<std::uint16_t>{80, 443});
}

TEST_CASE("egress: an allowlist within another (a template's bounds its runs')") {
    EgressPolicy outer;
    outer.hosts = {parse_allow_host("pypi.org", "o"), parse_allow_host("*.example.com:8443", "o"),
                   parse_allow_host("db.test:5432", "o")};
    auto within = [&](const char* h) { return allowlist_within(parse_allow_host(h, "i"), outer); };
    CHECK(within("pypi.org"));
    CHECK(within("pypi.org:443"));
    CHECK(within("PyPI.org:80"));
    CHECK_FALSE(within("pypi.org:8080"));     // a port it does not allow
    CHECK_FALSE(within("files.pypi.org:443"));  // an exact name allows no subdomain
    CHECK(within("api.example.com:8443"));
    CHECK(within("*.example.com:8443"));
    CHECK(within("*.a.example.com:8443"));
    CHECK_FALSE(within("example.com:8443"));  // *.example.com is not example.com
    CHECK_FALSE(within("api.example.com"));   // 80 and 443
    CHECK_FALSE(within("*.b.example.com:80"));
    CHECK_FALSE(within("*.pypi.org"));
    CHECK(within("db.test:5432"));
    CHECK_FALSE(within("*.db.test:5432"));
    CHECK_FALSE(within("other.test"));
}

TEST_CASE("egress: a profile's allow-hosts (and allow-host) with presets") {
    for (const char* key : {"allow-hosts", "allow-host"}) {
        INFO(key);
        Settings s = default_settings();
        apply_profile(s, parse_profile(std::string("net = \"allow\"\n") + key + " = [\"@pypi\", \"api.test:8443\"]\n",
                                       "p.toml"));
        Policy p = make_policy(s, {"python3"}, "/home/u");
        REQUIRE(p.egress.hosts.size() == 3);
        CHECK(p.egress.hosts[0].name == "pypi.org");
        CHECK(p.egress.hosts[0].origin == "p.toml:2: key 'allow-host' (@pypi)");
        CHECK(p.egress.hosts[1].name == "files.pythonhosted.org");
        CHECK(p.egress.hosts[2].name == "api.test");
    }
    Settings s = default_settings();
    CHECK_THROWS_WITH_AS(apply_profile(s, parse_profile("allow-hosts = \"pypi.org\"\n", "p.toml")),
                         "p.toml:1: key 'allow-hosts' takes a list, e.g. allow-hosts = [\"pypi.org\"]", UsageError);
}
