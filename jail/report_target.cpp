// Opening and writing the report (report.hpp): the pyjail process, before and after a run.
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
        // truncate, or hang it in open() (hostopen.hpp).
        t.owned_ = setup::open_report(path);
        t.fd_ = t.owned_.get();
        t.name_ = path;
    } else if (fd >= 0) {
        if (::fcntl(fd, F_GETFD) < 0)
            throw JailError("report", fmt::format("--report-fd {} is not open", fd), errno);
        t.fd_ = fd;
        t.name_ = fmt::format("fd {}", fd);
    }
    return t;
}

void ReportTarget::write(const RunFacts& facts) const {
    if (fd_ < 0) return;
    std::string text = report_json(facts);
    std::size_t done = 0;
    while (done < text.size()) {
        ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            std::fprintf(stderr, "pyjail: report: cannot write %s: %s\n", name_.c_str(),
                         std::strerror(errno));
            return;
        }
        done += static_cast<std::size_t>(n);
    }
}

}  // namespace pyjail
