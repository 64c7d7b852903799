#include "exposure.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>

#include "host_users.hpp"
#include "policy.hpp"
#include "sys.hpp"

namespace pyjail::setup {

namespace {
void add_home(std::vector<std::string>& out, const char* path) {
    if (path == nullptr || path[0] != '/') return;
    char real[PATH_MAX];
    std::string p = ::realpath(path, real) != nullptr ? std::string(real) : normalize_path(path);
    for (const auto& have : out)
        if (have == p) return;
    out.push_back(p);
}
}  // namespace

std::vector<std::string> home_dirs() {
    std::vector<std::string> homes;
    // $HOME is what cron and shells set; the passwd entry covers a caller that changed it.
    add_home(homes, std::getenv("HOME"));
    std::string passwd;
    if (try_read_file("/etc/passwd", passwd))
        if (auto pw = passwd_entry_of(passwd, ::getuid())) add_home(homes, pw->home.c_str());
    return homes;
}

std::vector<std::string> credentials_in(int dir_fd) {
    std::vector<std::string> found;
    struct stat st {};
    for (const char* const* n = kCredentialNames; *n != nullptr; ++n)
        if (::fstatat(dir_fd, *n, &st, AT_SYMLINK_NOFOLLOW) == 0) found.emplace_back(*n);
    return found;
}

}  // namespace pyjail::setup
