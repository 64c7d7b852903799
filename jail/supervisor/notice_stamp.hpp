// Whether the rlimit fallback notice is said on this run (notice.hpp), recording it when it is.
#pragma once

#include <optional>
#include <string>

#include "environment.hpp"

#include "notice.hpp"
#include "policy.hpp"

namespace pyjail::supervisor {

// Off: never; Always: yes; Daily: yes unless the stamp says `reason` was said today (then the
// stamp is left alone). Never fails.
bool notice_wanted(NoticeMode mode, const std::string& reason, const char* stamp_name = kNoticeStampName);

// Whether the environment notice (environment.hpp, env_notice) is said on this run, and how
// often: under cron (an ancestor process is a cron daemon) on every run, as cron mails each
// run's output and a crontab's variables are what the notice is about; when stderr is a
// terminal, once a day per user (kEnvNoticeStampName, recorded when it is due), as a shell
// always holds variables no program needs; otherwise never (nothing): a program reads stderr
// (the Python package, a pipeline), and it chose the environment. Never fails.
std::optional<NoticeCadence> env_notice_when();

}  // namespace pyjail::supervisor
