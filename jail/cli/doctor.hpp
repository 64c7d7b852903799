// `pyjail doctor`: can this host run jails, and if not, exactly how to fix it. Each check
// tries the real operation where it can (a user namespace, a cgroup leaf, a whole strict
// jail) rather than guessing from version numbers.
#pragma once

#include <string>
#include <vector>

namespace pyjail {

struct Check {
    std::string name;
    enum class Verdict { Ok, Warn, Fail } verdict;
    std::string detail;
    std::string fix;  // empty when there is nothing to do
    // What a failure here rules out when it is not the host itself: the option it checked
    // (e.g. "--rootfs /srv/r"); empty for the host's checks, which decide whether strict runs.
    std::string scope{};
};

// Text (one line per check) or JSON. Pure.
std::string format_checks(const std::vector<Check>& checks, bool json);

// Exit status: 0 when --profile strict can run here and every rootfs asked about can be
// used, 1 otherwise. Pure.
int doctor_exit_code(const std::vector<Check>& checks);

// Runs the checks. `self` is pyjail's own path (to run a real jail). `rootfses`: names or
// paths of more rootfses whose manifests to verify, as the default one's is.
std::vector<Check> run_doctor_checks(const std::string& self,
                                     const std::vector<std::string>& rootfses = {});

}  // namespace pyjail
