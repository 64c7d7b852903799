#include "targets.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "dbus.hpp"
#include "dns_wire.hpp"
#include "sniff.hpp"
#include "error.hpp"
#include "options.hpp"
#include "policy.hpp"
#include "profile.hpp"
#include "run_request.hpp"
#include "seccomp.hpp"
#include "systemd_scope.hpp"

namespace pyjail::fuzz {

namespace {

[[noreturn]] void broken(const char* what) {
    std::fprintf(stderr, "fuzz: %s\n", what);
    std::abort();
}

void expect(bool ok, const char* what) {
    if (!ok) broken(what);
}

// The jail's settings, validated as a run would: only pure checks, no file is opened.
void validate(const Settings& settings, std::vector<std::string> command) {
    (void)make_policy(settings, std::move(command), "/fuzz/cwd");
}

const std::string& shipped_groups() {
    static const std::string text = [] {
        std::ifstream f(std::string(PYJAIL_SOURCE_DIR) + "/profiles/seccomp/groups.toml");
        std::stringstream ss;
        ss << f.rdbuf();
        if (ss.str().empty()) broken("cannot read profiles/seccomp/groups.toml");
        return ss.str();
    }();
    return text;
}

bool sorted_unique(const std::vector<std::string>& v) {
    return std::adjacent_find(v.begin(), v.end(), std::greater_equal<>()) == v.end();
}

}  // namespace

void profile(std::string_view input) {
    try {
        Profile p = parse_profile(input, "fuzz.toml");
        for (const auto& e : p.entries) {
            expect(e.line >= 1, "an entry without a line number");
            expect(e.is_list || e.values.size() == 1, "a single value that is not one value");
        }
        Settings settings = default_settings();
        apply_profile(settings, p);
        validate(settings, {"python3"});
    } catch (const JailError&) {
        // Refused with a message: what a bad profile should get.
    }
}

void seccomp_set(std::string_view input) {
    std::string_view set = input.substr(0, input.find('\0'));
    std::string groups = set.size() < input.size() ? std::string(input.substr(set.size() + 1))
                                                   : shipped_groups();
    try {
        SeccompSet s = parse_seccomp_set(std::string(set), "fuzz.toml", groups, "groups.toml");
        expect(sorted_unique(s.allow) && sorted_unique(s.deny), "lists not sorted and unique");
        std::vector<std::string> both;
        std::set_intersection(s.allow.begin(), s.allow.end(), s.deny.begin(), s.deny.end(),
                              std::back_inserter(both));
        expect(both.empty(), "a syscall both allowed and denied");
    } catch (const JailError&) {
    }
}

void cli(std::string_view input) {
    std::vector<std::string> args;
    for (std::size_t start = 0; start <= input.size();) {
        std::size_t end = std::min(input.find('\0', start), input.size());
        args.emplace_back(input.substr(start, end - start));
        start = end + 1;
    }
    try {
        CliArgs parsed = parse_cli(args);
        if (parsed.exit_now) return;
        for (const auto& [name, values] : parsed.given)
            expect(find_option(name) != nullptr && !values.empty(), "an unknown option given");
        // The command is a tail of the arguments, unchanged.
        expect(parsed.command.size() <= args.size() &&
                   std::equal(parsed.command.rbegin(), parsed.command.rend(), args.rbegin()),
               "the command is not the arguments' tail");
        Settings settings = default_settings();
        apply_cli(settings, parsed);
        validate(settings, parsed.command);
    } catch (const JailError&) {
    }
}

void run_request(std::string_view input) {
    RunRequest r;
    try {
        r = decode_request(input);
    } catch (const BadRequest&) {
        return;
    }
    // What the template accepts is what it executes: decoding normalizes (a flag's nonzero
    // value, a mode's extra bits), and what it yields survives another round unchanged (no
    // field read twice or skipped); no mount is outside the run's directories.
    std::string again = encode_request(r);
    expect(encode_request(decode_request(again)) == again, "a decoded request changes in another round");
    expect(r.command.args.size() <= 4096, "a request with too many arguments");
    for (const auto& o : r.command.options)
        expect(template_option_refusal(o).empty(), "an interpreter option a run from a template cannot honour");
    for (const auto& op : r.mounts.ops) {
        // Relative, and no component climbs ("ac.." is a name; ".." is not).
        expect(!op.target.empty() && op.target.front() != '/', "a mount target outside the run");
        std::string_view t = op.target;
        for (std::size_t start = 0; start <= t.size();) {
            std::size_t end = std::min(t.find('/', start), t.size());
            std::string_view part = t.substr(start, end - start);
            expect(!part.empty() && part != "." && part != "..", "a mount target with an empty, . or .. part");
            start = end + 1;
        }
    }
}

void dbus(std::string_view input) {
    // The client refuses the first malformed message and closes the connection.
    try {
        while (!input.empty()) {
            std::size_t size = pyjail::dbus::message_size(input);
            if (size == 0 || size > input.size()) return;  // waits for more bytes
            expect(size >= 16 && size <= pyjail::dbus::kMaxMessage, "a message size out of bounds");
            pyjail::dbus::Message m = pyjail::dbus::parse_message(input.substr(0, size));
            input.remove_prefix(size);
            if (m.type == pyjail::dbus::Type::Error) (void)pyjail::dbus::error_text(m);
            if (auto j = pyjail::systemd::parse_job_removed(m)) expect(j->job.find('\0') == std::string::npos, "a NUL in a job path");
            if (m.signature == "o") (void)pyjail::dbus::Reader(m.body, m.big_endian).string();
        }
    } catch (const pyjail::dbus::DbusError&) {
    }
}

void egress(std::string_view input) {
    if (input.empty()) return;
    char which = input[0];
    input.remove_prefix(1);
    if (which == 0) {
        std::optional<std::uint16_t> id;
        auto q = pyjail::dns::parse_query(input, &id);
        if (!q) return;
        expect(id && *id == q->id, "a parsed query without its id");
        expect(q->name.size() <= pyjail::dns::kMaxName + 1, "a query name longer than a name");
        std::string a = pyjail::dns::build_answer(*q, pyjail::dns::Rcode::NoError, pyjail::dns::Ipv4{127, 100, 0, 1});
        expect(a.size() <= input.size() + 16, "an answer much larger than its query");
        if (pyjail::dns::is_plain_name(q->name) && q->qtype == pyjail::dns::kTypeA && q->qclass == pyjail::dns::kClassIn) {
            auto r = pyjail::dns::parse_response(a, q->id, q->name);
            expect(r && r->addresses.size() == 1, "an answer that does not parse back");
        }
    } else if (which == 1) {
        auto r = pyjail::dns::parse_response(input, 0x4242, "example.com");
        if (r) expect(r->addresses.size() <= pyjail::dns::kMaxAddresses, "too many addresses kept");
    } else {
        auto s = pyjail::sniff(input);
        if (s.kind == pyjail::Sniffed::Kind::Tls || s.kind == pyjail::Sniffed::Kind::Http)
            expect(s.host.empty() || pyjail::dns::is_plain_name(s.host) ||
                       s.host.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-_.") == std::string::npos,
                   "a stated host with bytes outside a name");
        if (s.kind == pyjail::Sniffed::Kind::Http)
            expect(s.head_size >= 16 && s.head_size <= input.size(), "an HTTP head outside the input");
    }
}

}  // namespace pyjail::fuzz
