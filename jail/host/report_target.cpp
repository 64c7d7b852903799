// Checking and writing the report (report.hpp): the pyjail process, before and after a run.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "error.hpp"
#include "hostopen.hpp"
#include "report.hpp"

namespace pyjail {

ReportTarget ReportTarget::open(const std::string& path, int fd) {
    ReportTarget t;
    if (!path.empty()) {
        // Not through a symlink, a FIFO or another user's file: a report path in a shared
        // directory must not let another user point pyjail (perhaps root) at a file to
        // replace, or hang it in open() (hostopen.hpp).
        setup::check_report(path);
        t.path_ = path;
    } else if (fd >= 0) {
        if (::fcntl(fd, F_GETFD) < 0)
            throw JailError("report", fmt::format("--report-fd {} is not open", fd), errno);
        t.fd_ = fd;
    }
    return t;
}

void ReportTarget::keep_out_of(const std::vector<WritablePlace>& places) {
    if (path_.empty()) return;
    // A report the jail could reach is one it could unlink and forge: the caller would read
    // the jail's "ok" (the real report going to the unlinked file).
    setup::check_report_place(path_, places);
    places_ = places;
}

bool ReportTarget::write(const RunFacts& facts) const {
    // No report asked for: nothing to build (its JSON cost every run about 0.1 ms).
    if (path_.empty() && fd_ < 0) return true;
    std::string text = report_json(facts);
    if (!path_.empty()) {
        try {
            setup::write_report(path_, text, places_);
            return true;
        } catch (const JailError& e) {
            std::fprintf(stderr, "pyjail: %s\n", e.one_line().c_str());
            return false;
        }
    }
    if (fd_ < 0) return true;
    std::size_t done = 0;
    while (done < text.size()) {
        ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            std::fprintf(stderr, "pyjail: report: cannot write fd %d: %s\n", fd_,
                         n < 0 ? std::strerror(errno) : "short write (disk full?)");
            return false;
        }
        done += static_cast<std::size_t>(n);
    }
    return true;
}

}  // namespace pyjail
