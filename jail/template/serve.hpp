// `pyjail serve --socket PATH`: holds a template -- a jail whose interpreter has imported the
// profile's `preload` modules and waits (template/pyjail_template.py) -- and starts each run
// that `pyjail --via PATH` (or the Python package's Pool) asks for as a fork of it that becomes
// a jail of its own (forked_run.hpp). The client plans and supervises its run exactly as a
// fresh one (spawn.cpp, run_via); this server holds the request to its own settings
// (serve_bounds.hpp) and connects the two:
//
//   client (pyjail --via)          server (this file)                 template (a jail)
//   connect  ------------------->  peer is the server's user (or
//                                  root)? hello {rootfs, cgroup?}
//   plan; request {argv, env,      ---------------------------------> fork; the fork becomes
//   limits, mounts, filter}        make the run's cgroup leaf;        a jail (forked_run.cpp)
//   + report socket, fds 0-2,      forward + the leaf's cgroup.procs  <- {started, pidfd}
//   script  -------------------->  <- {started, pidfd, leaf}
//   supervise (pidfd, report       the connection is the run's: when it closes, the run is
//   socket), report; close  --->   killed if still there, and its leaf removed
//
// The template is started again when it ends (killed, or out of memory), and the next run
// says so. Runs in flight keep going: each is supervised by its own client.
#pragma once

#include <string>

#include "prepare.hpp"

namespace pyjail::serve {

// The directory bound into a template (read-only) holding its extension module and boot:
// below /tmp, which every run replaces with its own, so no run sees it.
inline constexpr const char* kTemplateDirInJail = "/tmp/.pyjail-template";

// The template's command: the rootfs's interpreter importing `preload`, then serving.
std::vector<std::string> template_command(const std::vector<std::string>& preload);

// Serves until SIGTERM, SIGINT or SIGHUP (exit status 0), until the reader of its stdout (a
// pipe or socket) is gone (kExitServeOwnerGone), or until the first template cannot start
// (JailError). `prepared` is the template's jail (RunPlan::is_template); `runs` the
// settings as given (before the template's own: no time limits), the most a run may have
// (serve_bounds.hpp).
int serve(const PreparedRun& prepared, const Policy& runs, const std::string& socket,
          const std::vector<std::string>& preload, char** host_argv);

}  // namespace pyjail::serve
