#include "compiled_filter.hpp"

#include <fmt/format.h>
#include <seccomp.h>

#include <cstdint>
#include <cstring>
#include <string_view>

namespace pyjail {

namespace {

constexpr std::string_view kFilterFileMagic = "pyjail-seccomp-filter 1\n";

// What else the program depends on: this pyjail (how sets become rules, also between
// releases: kSeccompRulesRevision), libseccomp (how rules become BPF) and the architecture
// the BPF checks for.
std::string header() {
    const scmp_version* v = seccomp_version();
    return fmt::format("{}pyjail {} rules {}\nlibseccomp {}.{}.{}\narch {:#x}\n", kFilterFileMagic,
                       PYJAIL_VERSION, kSeccompRulesRevision, v->major, v->minor, v->micro,
                       seccomp_arch_native());
}

void put_blob(std::string& out, std::string_view tag, std::string_view data) {
    out += fmt::format("{} {}\n", tag, data.size());
    out += data;
    out += '\n';
}

void put_names(std::string& out, std::string_view tag, const std::vector<std::string>& names) {
    out += fmt::format("{} {}\n", tag, names.size());
    for (const auto& n : names) out += n + '\n';
}

// A cursor over the file that fails (and stays failed) on the first surprise.
class FilterFileReader {
public:
    explicit FilterFileReader(std::string_view s) : s_(s) {}
    bool ok() const { return ok_; }
    bool at_end() const { return ok_ && s_.empty(); }

    bool literal(std::string_view want) {
        if (!ok_ || s_.substr(0, want.size()) != want) return ok_ = false;
        s_.remove_prefix(want.size());
        return true;
    }
    std::string_view line() {
        auto nl = s_.find('\n');
        if (!ok_ || nl == std::string_view::npos) {
            ok_ = false;
            return {};
        }
        std::string_view l = s_.substr(0, nl);
        s_.remove_prefix(nl + 1);
        return l;
    }
    // "TAG COUNT\n"
    std::size_t count(std::string_view tag) {
        std::string_view l = line();
        if (!ok_ || l.size() <= tag.size() + 1 || l.substr(0, tag.size()) != tag || l[tag.size()] != ' ')
            return fail();
        std::size_t n = 0;
        for (char c : l.substr(tag.size() + 1)) {
            if (c < '0' || c > '9' || n > (std::size_t{1} << 32)) return fail();
            n = n * 10 + static_cast<std::size_t>(c - '0');
        }
        return n;
    }
    std::string_view bytes(std::size_t n) {
        if (!ok_ || s_.size() < n) {
            ok_ = false;
            return {};
        }
        std::string_view b = s_.substr(0, n);
        s_.remove_prefix(n);
        return b;
    }
    bool blob_equals(std::string_view tag, std::string_view want) {
        std::size_t n = count(tag);
        return ok_ && bytes(n) == want && literal("\n");
    }
    std::vector<std::string> names(std::string_view tag) {
        std::vector<std::string> out;
        std::size_t n = count(tag);
        if (n > s_.size()) return fail(), out;
        for (std::size_t i = 0; i < n && ok_; ++i) out.emplace_back(line());
        return out;
    }

private:
    std::size_t fail() {
        ok_ = false;
        return 0;
    }
    std::string_view s_;
    bool ok_ = true;
};

}  // namespace

const char* net_mode_name(NetMode net) {
    return net == NetMode::Loopback ? "loopback" : net == NetMode::Allow ? "allow" : "none";
}

namespace {
// The mode a filter file is named and checked by: the filter's own, so that --net allow
// loads loopback's file, and never none's (which refuses internet sockets).
const char* filter_file_net(const FilterInputs& in) { return net_mode_name(filter_net_mode(in.net)); }
}  // namespace

std::string compiled_filter_file_name(const FilterInputs& in) {
    // FNV-1a over 8-byte words (it runs on every run): only a file name, since the file
    // itself holds the inputs, and they are compared whole.
    std::uint64_t h = 0xcbf29ce484222325ULL;
    auto mix = [&](std::string_view s) {
        std::size_t i = 0;
        for (; i + 8 <= s.size(); i += 8) {
            std::uint64_t word;
            std::memcpy(&word, s.data() + i, 8);
            h = (h ^ word) * 0x100000001b3ULL;
        }
        for (; i < s.size(); ++i) h = (h ^ static_cast<unsigned char>(s[i])) * 0x100000001b3ULL;
        h = (h ^ (s.size() | 0xff00000000000000ULL)) * 0x100000001b3ULL;
    };
    mix(in.set_text);
    mix(in.groups_text);
    mix(filter_file_net(in));
    return fmt::format("{:016x}.bpf", h);
}

std::string encode_compiled_filter(const FilterInputs& in, const CompiledFilter& out) {
    std::string s = header();
    s += fmt::format("net {}\n", filter_file_net(in));
    put_blob(s, "set", in.set_text);
    put_blob(s, "groups", in.groups_text);
    put_names(s, "allow", out.allow);
    put_names(s, "deny", out.deny);
    put_blob(s, "bpf", std::string_view(reinterpret_cast<const char*>(out.program.data()),
                                        out.program.size() * sizeof(sock_filter)));
    return s;
}

std::optional<CompiledFilter> decode_compiled_filter(const std::string& file, const FilterInputs& in) {
    FilterFileReader r(file);
    if (!r.literal(header()) || !r.literal(fmt::format("net {}\n", filter_file_net(in))) ||
        !r.blob_equals("set", in.set_text) || !r.blob_equals("groups", in.groups_text))
        return std::nullopt;
    CompiledFilter out;
    out.allow = r.names("allow");
    out.deny = r.names("deny");
    std::size_t size = r.count("bpf");
    std::string_view raw = r.bytes(size);
    // A program the kernel would refuse: empty, ragged, or over BPF_MAXINSNS (4096).
    if (!r.literal("\n") || !r.at_end() || size == 0 || size % sizeof(sock_filter) != 0 ||
        size / sizeof(sock_filter) > 4096)
        return std::nullopt;
    out.program.resize(size / sizeof(sock_filter));
    std::memcpy(out.program.data(), raw.data(), size);
    return out;
}

}  // namespace pyjail
