#include "environment.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace pyjail {

namespace {

void set(std::vector<std::pair<std::string, std::string>>& env, const std::string& key, const std::string& value) {
    for (auto& have : env)
        if (have.first == key) {
            have.second = value;
            return;
        }
    env.emplace_back(key, value);
}

}  // namespace

std::vector<std::string> jail_environment(const Policy& policy, const std::vector<std::string>& host_env) {
    std::vector<std::pair<std::string, std::string>> env = {
        {"PATH", std::string(kJailPath)},
        {"HOME", "/tmp"},
        {"USER", "jail"},
        {"LOGNAME", "jail"},
        {"LANG", "C.UTF-8"},
        {"PWD", "/work"},
    };
    for (const auto& name : policy.env_pass)
        for (const auto& kv : host_env)
            if (kv.size() > name.size() && kv.compare(0, name.size(), name) == 0 && kv[name.size()] == '=') {
                set(env, name, kv.substr(name.size() + 1));
                break;  // the first, as getenv(3) takes it
            }
    for (const auto& [k, v] : policy.env) set(env, k, v);
    std::vector<std::string> out;
    for (const auto& [k, v] : env) out.push_back(k + "=" + v);
    return out;
}

bool env_notice_ignores(std::string_view name) {
    // What a login session, a shell, sudo or cron sets for every process: no program is
    // meant to read these as its settings. The locale and PATH the jail sets its own.
    static constexpr std::string_view exact[] = {
        "PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "SHLVL", "_", "TERM",
        "COLORTERM", "LANG", "LANGUAGE", "MAIL", "MAILTO", "MAILFROM", "CRON_TZ", "RANDOM_DELAY",
        "HOSTNAME", "LS_COLORS", "LESSOPEN", "LESSCLOSE", "DISPLAY", "WAYLAND_DISPLAY",
        "DBUS_SESSION_BUS_ADDRESS", "INVOCATION_ID", "JOURNAL_STREAM", "MOTD_SHOWN", "EDITOR",
        "VISUAL", "PAGER", "HISTFILE", "HISTSIZE", "HISTCONTROL", "PS1", "PS2", "TMUX", "TMUX_PANE",
        "STY", "WINDOW", "SSH_AUTH_SOCK", "SSH_AGENT_PID", "GPG_AGENT_INFO"};
    static constexpr std::string_view prefixes[] = {"LC_", "XDG_", "SSH_", "SUDO_", "TERM_", "VTE_",
                                                    "GNOME_", "KDE_", "DESKTOP_", "PYJAIL_"};
    for (auto e : exact)
        if (name == e) return true;
    for (auto p : prefixes)
        if (name.substr(0, p.size()) == p) return true;
    return false;
}

std::vector<std::string> unpassed_variables(const std::vector<std::string>& host_env) {
    std::vector<std::string> names;
    for (const auto& kv : host_env) {
        auto eq = kv.find('=');
        if (eq == 0 || eq == std::string::npos) continue;
        std::string name = kv.substr(0, eq);
        // Only plain names are printed: a name is the invoker's, but a terminal would act on
        // an escape sequence in one.
        bool plain = true;
        for (char c : name)
            if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) plain = false;
        if (plain && !env_notice_ignores(name)) names.push_back(name);
    }
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    return names;
}

std::string env_notice(const Policy& policy, const std::vector<std::string>& host_env, NoticeCadence when) {
    if (policy.quiet || !policy.env.empty() || !policy.env_pass.empty()) return {};
    auto names = unpassed_variables(host_env);
    if (names.empty()) return {};
    constexpr std::size_t kShown = 5;
    std::string shown;
    for (std::size_t i = 0; i < names.size() && i < kShown; ++i)
        shown += (i == 0 ? "" : ", ") + names[i];
    if (names.size() > kShown) shown += fmt::format(" and {} more", names.size() - kShown);
    return fmt::format("pyjail: the jail does not get your environment ({}); pass a variable with "
                       "--env-pass NAME or set one with --env NAME=VALUE (said {}; --quiet silences it)",
                       shown, when == NoticeCadence::Daily ? "once a day" : "on every run under cron");
}

}  // namespace pyjail
