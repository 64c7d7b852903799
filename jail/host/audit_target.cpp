// Writing the audit log (audit.hpp): the pyjail process, before the run (is the log usable?)
// and after it (the line). The descriptor exists only while no process of the jail does:
// checked and closed before the jail is created, opened again to append once the jail is
// gone, so no jailed process can inherit it, however the child's set-up goes.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "audit_target.hpp"
#include "error.hpp"
#include "host_users.hpp"
#include "hostopen.hpp"
#include "sha256.hpp"
#include "sys.hpp"

namespace pyjail {

void check_audit_log(const std::string& path) {
    // Opened (created if missing) and closed: an unusable log fails the run before it starts.
    UniqueFd fd = setup::open_audit_log(path, {});
}

void append_audit_line(const std::string& path, const std::string& line,
                       const std::vector<WritablePlace>& places) {
    // Checked again now that the jail is gone: it may have changed a link on the way.
    UniqueFd fd = setup::open_audit_log(path, places);
    // One write of the whole line to an O_APPEND descriptor: the kernel places it at the end
    // of the file at once, so concurrent runs' lines never interleave.
    ssize_t n;
    do {
        n = ::write(fd.get(), line.data(), line.size());
    } while (n < 0 && errno == EINTR);
    if (n != static_cast<ssize_t>(line.size()))
        throw JailError("audit log",
                        fmt::format("cannot write {}: {}", path,
                                    n < 0 ? std::strerror(errno) : "short write (disk full?)"));
}

AuditIdentity audit_identity(const std::optional<std::string>& program_sha256) {
    AuditIdentity who;
    who.time = ::time(nullptr);
    who.uid = ::getuid();
    std::string passwd;
    if (try_read_file("/etc/passwd", passwd))
        if (auto pw = passwd_entry_of(passwd, who.uid)) who.user = pw->name;
    who.program_sha256 = program_sha256;
    return who;
}

std::optional<std::string> sha256_of_fd(int fd) {
    Sha256 h;
    char buf[65536];
    off_t at = 0;
    for (;;) {
        // pread: the descriptor's offset stays where the jail expects it.
        ssize_t n = ::pread(fd, buf, sizeof buf, at);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return std::nullopt;
        if (n == 0) break;
        h.update(buf, static_cast<std::size_t>(n));
        at += n;
    }
    return h.hex();
}

}  // namespace pyjail
