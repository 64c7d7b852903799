#include "stdio.hpp"

namespace pyjail {

namespace {

bool passes_as_is(StdioKind kind) {
    switch (kind) {
        case StdioKind::Closed:   // nothing to reach
        case StdioKind::Pipe:     // reopening a pipe reaches only the same pipe
        case StdioKind::Socket:   // no path to reopen, nothing to truncate
        case StdioKind::Tty:      // interactive Python needs its terminal (TIOCSTI is filtered)
        case StdioKind::DevNull:  // nothing to read or rewrite
            return true;
        default: return false;
    }
}

}  // namespace

WriteMethod write_method_for(StdioKind kind) {
    switch (kind) {
        case StdioKind::Pipe:
        case StdioKind::Socket: return WriteMethod::NoWait;
        case StdioKind::Tty:  // a stopped terminal (^S) blocks its writers
        case StdioKind::DevNull:
        case StdioKind::CharDevice: return WriteMethod::Private;
        default: return WriteMethod::Plain;  // files, block devices; the rest fails at once
    }
}

StdioPlan plan_stdio(const std::array<StdioKind, 3>& kinds, bool output_limit,
                     bool stdout_is_stderr) {
    StdioPlan plan;
    for (std::size_t i = 0; i < 3; ++i) {
        plan.fd[i].relay = !passes_as_is(kinds[i]) || (i > 0 && output_limit);
        plan.fd[i].method = write_method_for(kinds[i]);
    }
    plan.stderr_joins_stdout = stdout_is_stderr && plan.fd[1].relay && plan.fd[2].relay;
    return plan;
}

const char* stdio_kind_name(StdioKind kind) {
    switch (kind) {
        case StdioKind::Closed: return "closed";
        case StdioKind::Pipe: return "pipe";
        case StdioKind::Socket: return "socket";
        case StdioKind::Tty: return "terminal";
        case StdioKind::DevNull: return "/dev/null";
        case StdioKind::Regular: return "regular file";
        case StdioKind::Directory: return "directory";
        case StdioKind::CharDevice: return "character device";
        case StdioKind::BlockDevice: return "block device";
        case StdioKind::Other: return "other";
    }
    return "other";
}

}  // namespace pyjail
