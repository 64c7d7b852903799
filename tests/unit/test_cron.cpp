// Quiet and honest for cron: the fallback notice's stamp, the report's wall-time limit, an
// initramfs root recognised.
#include <doctest/doctest.h>

#include "error.hpp"
#include "hostroot.hpp"
#include "limits.hpp"
#include "notice.hpp"
#include "policy.hpp"
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

    CHECK(utc_day(1764595640) == "2025-12-01");
    const std::string why = "no cgroup2 file system is mounted";
    CHECK(daily_notice_due("", "2025-12-01", why));
    std::string stamp = notice_stamp_text("2025-12-01", why);
    CHECK(stamp == "2025-12-01 no cgroup2 file system is mounted\n");
    CHECK_FALSE(daily_notice_due(stamp, "2025-12-01", why));
    CHECK(daily_notice_due(stamp, "2025-12-02", why));         // a new day
    CHECK(daily_notice_due(stamp, "2025-12-01", "--cgroup off"));  // a new reason
    CHECK(daily_notice_due("garbage", "2025-12-01", why));
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
