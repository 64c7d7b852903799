// Whether the rlimit fallback notice is said on this run (notice.hpp), recording it when it is.
#pragma once

#include <string>

#include "policy.hpp"

namespace pyjail::supervisor {

// Off: never; Always: yes; Daily: yes unless the stamp says `reason` was said today (then the
// stamp is left alone). Never fails.
bool notice_wanted(NoticeMode mode, const std::string& reason);

}  // namespace pyjail::supervisor
