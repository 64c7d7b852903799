// Quiet and honest for cron: the fallback notice's stamp, the report's wall-time limit, an
// initramfs root recognised.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "environment.hpp"
#include "error.hpp"
#include "hostroot.hpp"
#include "limits.hpp"
#include "notice.hpp"
#include "policy.hpp"
#include "proc_stat.hpp"
#include "profile.hpp"

using namespace pyjail;

TEST_CASE("fallback notice: where the stamp lives and when the notice is due") {
    auto home = state_dir_plan(nullptr, "/home/a");
    REQUIRE(home);
    CHECK(home->base == "/home/a");
    CHECK(home->below == std::vector<std::string>{".local", "state", "pyjail"});
    auto xdg = state_dir_plan("/x/state", "/home/a");
    REQUIRE(xdg);
    CHECK(xdg->base == "/x/state");
    CHECK(xdg->below == std::vector<std::string>{"pyjail"});
    // A relative XDG_STATE_HOME is invalid (XDG base directory rules); no home: no stamp.
    CHECK(state_dir_plan("rel", "/home/a")->base == "/home/a");
    CHECK(!state_dir_plan(nullptr, nullptr));
    CHECK(!state_dir_plan("", "relative"));

    // Where a stamp may live, in order: the state directory, the runtime directory, then a
    // directory of the user's own in the temporary directory (shared: it must be sticky).
    auto all = state_dir_plans({"/x/state", "/home/a", "/run/user/1000", nullptr}, 1000);
    REQUIRE(all.size() == 3);
    CHECK(all[0].base == "/x/state");
    CHECK_FALSE(all[0].shared);
    CHECK(all[1].base == "/run/user/1000");
    CHECK(all[1].below == std::vector<std::string>{"pyjail"});
    CHECK_FALSE(all[1].shared);
    CHECK(all[2].base == "/tmp");
    CHECK(all[2].below == std::vector<std::string>{"pyjail-state-1000"});
    CHECK(all[2].shared);
    // A cron job of a service account: no home, no session; still somewhere, per user.
    auto cron = state_dir_plans({nullptr, "/nonexistent", nullptr, nullptr}, 65534);
    REQUIRE(cron.size() == 2);
    CHECK(cron[0].base == "/nonexistent");
    CHECK(cron[1].base == "/tmp");
    CHECK(cron[1].below == std::vector<std::string>{"pyjail-state-65534"});
    auto bare = state_dir_plans({}, 0);
    REQUIRE(bare.size() == 1);
    CHECK(bare[0].base == "/tmp");
    CHECK(bare[0].below == std::vector<std::string>{"pyjail-state-0"});
    CHECK(bare[0].shared);
    // Relative or empty names are ignored, as XDG's rules say of its own; an absolute TMPDIR
    // replaces /tmp, shared all the same.
    auto rel = state_dir_plans({"rel", "relative", "run", "tmp"}, 7);
    REQUIRE(rel.size() == 1);
    CHECK(rel[0].base == "/tmp");
    CHECK(state_dir_plans({"", "", "", ""}, 7).size() == 1);
    auto tmpdir = state_dir_plans({nullptr, nullptr, nullptr, "/var/tmp/job"}, 7);
    REQUIRE(tmpdir.size() == 1);
    CHECK(tmpdir[0].base == "/var/tmp/job");
    CHECK(tmpdir[0].below == std::vector<std::string>{"pyjail-state-7"});
    CHECK(tmpdir[0].shared);

    CHECK(utc_day(1764595640) == "2025-12-01");
    const std::string why = "no cgroup2 file system is mounted";
    CHECK(daily_notice_due("", "2025-12-01", why));
    std::string stamp = notice_stamp_text("", "2025-12-01", why);
    CHECK(stamp == "2025-12-01 no cgroup2 file system is mounted\n");
    CHECK_FALSE(daily_notice_due(stamp, "2025-12-01", why));
    CHECK(daily_notice_due(stamp, "2025-12-02", why));         // a new day
    CHECK(daily_notice_due(stamp, "2025-12-01", "--cgroup off"));  // a new reason
    CHECK(daily_notice_due("garbage", "2025-12-01", why));
    // The line says how often it is said and what silences it alone; not when the user
    // asked for every run.
    CHECK(cgroup_notice_tail(NoticeMode::Daily) == " (said once a day; --cgroup-notice off silences it)");
    CHECK(cgroup_notice_tail(NoticeMode::Always) == "");
}

TEST_CASE("fallback notice: each reason's day is kept, so runs taking turns hear each once") {
    const std::string why = "no cgroup2 file system is mounted";
    std::string stamp = notice_stamp_text("", "2025-12-01", why);
    stamp = notice_stamp_text(stamp, "2025-12-01", "--cgroup off");
    CHECK(stamp == "2025-12-01 no cgroup2 file system is mounted\n2025-12-01 --cgroup off\n");
    CHECK_FALSE(daily_notice_due(stamp, "2025-12-01", why));
    CHECK_FALSE(daily_notice_due(stamp, "2025-12-01", "--cgroup off"));
    CHECK(daily_notice_due(stamp, "2025-12-01", "a third reason"));
    // Said again: one line per reason, the newest last.
    CHECK(notice_stamp_text(stamp, "2025-12-01", why) ==
          "2025-12-01 --cgroup off\n2025-12-01 no cgroup2 file system is mounted\n");
    // A new day: yesterday's lines say nothing of today, and go.
    CHECK(daily_notice_due(stamp, "2025-12-02", why));
    CHECK(notice_stamp_text(stamp, "2025-12-02", why) == "2025-12-02 no cgroup2 file system is mounted\n");
    // A reason with a newline is one line, and found again as said.
    std::string two = notice_stamp_text("", "2025-12-01", "a\nb");
    CHECK(two == "2025-12-01 a b\n");
    CHECK_FALSE(daily_notice_due(two, "2025-12-01", "a\nb"));
}

TEST_CASE("fallback notice: a corrupt or hostile stamp is bounded and never fails") {
    const std::string day = "2025-12-01";
    // Lines that do not parse, and a last line cut without its newline, are not reasons said.
    CHECK(daily_notice_due("2025-12-01 --cgroup off", day, "--cgroup off"));
    CHECK(daily_notice_due("2025-12-01--cgroup off\n", day, "--cgroup off"));
    using namespace std::string_literals;
    CHECK(daily_notice_due("\0\0\n"s, day, "x"));
    CHECK(notice_stamp_text("junk\n\0\nshort\n2025-12-01\n2025-12-01  \n"s, day, "x") == "2025-12-01  \n2025-12-01 x\n");
    CHECK(notice_stamp_text(std::string(100000, 'x'), day, "x") == "2025-12-01 x\n");
    // Many reasons today: at most kMaxStampReasons lines, the newest kept.
    std::string stamp;
    for (int i = 0; i < 40; ++i) stamp = notice_stamp_text(stamp, day, "reason " + std::to_string(i));
    CHECK(std::count(stamp.begin(), stamp.end(), '\n') == static_cast<long>(kMaxStampReasons));
    CHECK_FALSE(daily_notice_due(stamp, day, "reason 39"));
    CHECK(daily_notice_due(stamp, day, "reason 0"));
    // Long reasons: at most kMaxStampBytes, the newest kept whole.
    stamp.clear();
    for (char c = 'a'; c <= 'j'; ++c) stamp = notice_stamp_text(stamp, day, std::string(1000, c));
    CHECK(stamp.size() <= kMaxStampBytes);
    CHECK_FALSE(daily_notice_due(stamp, day, std::string(1000, 'j')));
    CHECK(daily_notice_due(stamp, day, std::string(1000, 'a')));
    // One reason longer than the bound is still written alone (then read cut, so said again).
    CHECK(notice_stamp_text(stamp, day, std::string(5000, 'z')) == day + " " + std::string(5000, 'z') + "\n");
}

TEST_CASE("policy: cgroup-notice") {
    Settings s = default_settings();
    apply_profile(s, parse_profile("cgroup-notice = \"off\"\n", "p.toml"));
    CHECK(make_policy(s, {"python3"}, "/srv/job").cgroup_notice == NoticeMode::Off);
    CHECK(make_policy(default_settings(), {"python3"}, "/").cgroup_notice == NoticeMode::Daily);
    Settings bad = default_settings();
    apply_profile(bad, parse_profile("cgroup-notice = \"weekly\"\n", "p.toml"));
    CHECK_THROWS_WITH_AS(make_policy(bad, {"python3"}, "/"),
                         "p.toml:1: key 'cgroup-notice': 'weekly' is not a notice mode", UsageError);
}

TEST_CASE("report: the wall-time limit and who enforces it") {
    LimitEntry e = wall_time_entry(10);
    CHECK(e.name == "wall-time");
    CHECK(e.value == "10");
    CHECK(e.mechanism == Mechanism::Supervisor);
    CHECK(wall_time_entry(0.5).value == "0.5");
}

TEST_CASE("host root: an initramfs root (rootfs) is recognised") {
    const char* initramfs = "1 1 0:2 / / rw - rootfs rootfs rw,size=1000k\n"
                            "20 1 0:5 / /proc rw,nosuid - proc proc rw\n";
    CHECK(root_is_initramfs(initramfs));
    const char* switched = "1 1 0:2 / / rw - rootfs rootfs rw\n"
                           "25 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n";
    CHECK_FALSE(root_is_initramfs(switched));
    const char* normal = "25 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
                         "26 25 0:30 / /tmp rw - rootfs x rw\n";
    CHECK_FALSE(root_is_initramfs(normal));
    // A bind of the initramfs moved onto / and chrooted into (pivot_root works from there).
    const char* bound = "30 1 0:2 / / rw - rootfs rootfs rw\n"
                        "31 30 0:5 / /proc rw,nosuid - proc proc rw\n";
    CHECK_FALSE(root_is_initramfs(bound));
    CHECK_FALSE(root_is_initramfs(""));
}

TEST_CASE("--env-pass: a host variable by name; --env wins; an unset one stays unset") {
    Settings s = default_settings();
    apply_profile(s, parse_profile("env-pass = [\"THRESHOLD\", \"MISSING\", \"HOME\"]\nenv = [\"MODE=x\"]\n", "p.toml"));
    Policy p = make_policy(s, {"python3"}, "/");
    CHECK(p.env_pass == std::vector<std::string>{"THRESHOLD", "MISSING", "HOME"});
    const std::vector<std::string> host = {"THRESHOLD=3", "THRESHOLD_X=9", "HOME=/root", "MODE=host",
                                           "SECRET=s"};
    auto env = jail_environment(p, host);
    CHECK(env == std::vector<std::string>{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/root",
                                          "USER=jail", "LOGNAME=jail", "LANG=C.UTF-8", "PWD=/work",
                                          "THRESHOLD=3", "MODE=x"});
    // Without it, nothing of the host's.
    CHECK(jail_environment(make_policy(default_settings(), {"python3"}, "/"), host).size() == 6);
    Settings bad = default_settings();
    apply_profile(bad, parse_profile("env-pass = [\"A=B\"]\n", "p.toml"));
    CHECK_THROWS_WITH_AS(make_policy(bad, {"python3"}, "/"),
                         "p.toml:1: key 'env-pass': 'A=B' is not a variable name", UsageError);
}

TEST_CASE("the environment notice: what the jail does not get, names only") {
    const std::vector<std::string> cron = {"HOME=/root", "LOGNAME=root", "PATH=/usr/bin:/bin",
                                           "SHELL=/bin/sh", "PWD=/srv", "SHLVL=1", "_=/usr/bin/pyjail",
                                           "LANG=C", "MAILTO=ops", "LC_ALL=C", "XDG_RUNTIME_DIR=/run"};
    Policy plain = make_policy(default_settings(), {"python3"}, "/");
    CHECK(env_notice(plain, cron) == "");  // only what every cron job has
    auto with = cron;
    with.push_back("THRESHOLD=3");
    with.push_back("DB_URL=postgres://secret@db");
    with.push_back("BAD\x1b[2J=x");  // never printed: a terminal would act on it
    CHECK(unpassed_variables(with) == std::vector<std::string>{"DB_URL", "THRESHOLD"});
    std::string line = env_notice(plain, with);
    CHECK(line == "pyjail: the jail does not get your environment (DB_URL, THRESHOLD); pass a "
                  "variable with --env-pass NAME or set one with --env NAME=VALUE (said once a day; "
                  "--quiet silences it)");
    CHECK(line.find("secret") == std::string::npos);
    // Under cron it is said on every run, and says so.
    CHECK(env_notice(plain, with, NoticeCadence::EveryRun) ==
          "pyjail: the jail does not get your environment (DB_URL, THRESHOLD); pass a variable with "
          "--env-pass NAME or set one with --env NAME=VALUE (said on every run under cron; --quiet "
          "silences it)");
    for (int i = 0; i < 7; ++i) with.push_back("V" + std::to_string(i) + "=1");
    CHECK(env_notice(plain, with).find("(DB_URL, THRESHOLD, V0, V1, V2 and 4 more)") != std::string::npos);
    // --env, --env-pass or --quiet: not said.
    for (const char* profile : {"env = [\"A=1\"]\n", "env-pass = [\"THRESHOLD\"]\n", "quiet = true\n"}) {
        Settings s = default_settings();
        if (std::string(profile) == "quiet = true\n") s["quiet"] = {{"true", Source::CommandLine, "--quiet"}};
        else apply_profile(s, parse_profile(profile, "p.toml"));
        CHECK_MESSAGE(env_notice(make_policy(s, {"python3"}, "/"), with) == "", profile);
    }
}

TEST_CASE("the environment notice: a cron daemon among the ancestors") {
    auto st = parse_proc_stat("4242 (cron) S 1 4242 4242 0 -1 4194560 ...");
    REQUIRE(st);
    CHECK(st->ppid == 1);
    CHECK(st->comm == "cron");
    CHECK(is_cron_daemon(st->comm));
    // A name with spaces and parentheses ends at the last ')'.
    st = parse_proc_stat("77 (a) (b) c) R 76 77 ...");
    REQUIRE(st);
    CHECK(st->comm == "a) (b) c");
    CHECK(st->ppid == 76);
    CHECK_FALSE(is_cron_daemon("sh"));
    CHECK(is_cron_daemon("crond"));
    CHECK(is_cron_daemon("anacron"));
    CHECK_FALSE(parse_proc_stat("garbage"));
    CHECK_FALSE(parse_proc_stat("1 (x)"));
}
