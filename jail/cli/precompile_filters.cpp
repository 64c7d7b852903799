// Build-time tool: compiles every seccomp set under PROFILES/seccomp for every network mode
// into OUT (see compiled_filter.hpp). Not installed; the build runs it, and its output is
// installed with the profiles.
//
//   pyjail-precompile-filters PROFILES_DIR OUT_DIR
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "compiled_filter.hpp"
#include "error.hpp"
#include "seccomp.hpp"
#include "sys.hpp"

using namespace pyjail;

namespace {

std::vector<std::string> list(const std::string& dir, const std::string& suffix) {
    std::vector<std::string> names;
    if (!list_dir(dir, suffix, names))
        throw std::runtime_error("cannot list " + dir + ": " + std::strerror(errno));
    return names;
}

// Written whole under a temporary name and renamed: a run never reads half a file.
void write_atomically(const std::string& path, const std::string& bytes) {
    std::string tmp = path + ".tmp";
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        if (!f) throw std::runtime_error("cannot write " + tmp);
    }
    ::chmod(tmp.c_str(), 0644);
    if (::rename(tmp.c_str(), path.c_str()) != 0)
        throw std::runtime_error("cannot rename " + tmp + ": " + std::strerror(errno));
}

int precompile(const std::string& profiles, const std::string& out) {
    std::string seccomp_dir = profiles + "/seccomp";
    std::string groups_path = seccomp_dir + "/groups.toml";
    std::string groups_text = read_file(groups_path, "seccomp groups");
    if (::mkdir(out.c_str(), 0755) != 0 && errno != EEXIST)
        throw std::runtime_error("cannot create " + out + ": " + std::strerror(errno));

    std::set<std::string> written;
    for (const auto& file : list(seccomp_dir, ".toml")) {
        if (file == "groups.toml") continue;
        std::string set_path = seccomp_dir + "/" + file;
        FilterInputs in{read_file(set_path, "seccomp set"), groups_text, NetMode::None};
        SeccompSet set = parse_seccomp_set(in.set_text, set_path, in.groups_text, groups_path);
        for (NetMode net : {NetMode::None, NetMode::Loopback}) {  // allow's is loopback's (filter_net_mode)
            in.net = net;
            CompiledFilter c{set.allow, set.deny, compile_seccomp(set, net)};
            std::string name = compiled_filter_file_name(in);
            write_atomically(out + "/" + name, encode_compiled_filter(in, c));
            written.insert(name);
            std::printf("%s (net %s): %zu instructions -> %s\n", file.c_str(), net_mode_name(net),
                        c.program.size(), name.c_str());
        }
    }
    // Files of sets that changed or went away can never match again: do not ship them.
    for (const auto& name : list(out, ".bpf"))
        if (written.count(name) == 0) ::unlink((out + "/" + name).c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s PROFILES_DIR OUT_DIR\n", argv[0]);
        return 2;
    }
    try {
        return precompile(argv[1], argv[2]);
    } catch (const JailError& e) {
        std::fprintf(stderr, "pyjail-precompile-filters: %s\n", e.one_line().c_str());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "pyjail-precompile-filters: %s\n", e.what());
    }
    return 1;
}
