/* The least a jail with the strict profile's isolation costs here: the kernel work alone, in
   straight-line C, linked statically with glibc as pyjail is. No policy, no checks, no report,
   no signal relay, no seccomp listener, no rlimits or cgroup, no error messages beyond the
   failing call: what is left is the floor any such jail pays on this kernel, so pyjail's
   overhead over this probe's is what pyjail itself adds.

   usage: minimal_jail ROOTFS FILTER -- PROGRAM [ARGS...]
     ROOTFS  a directory with /proc, /dev, /tmp and /work in it (pyjail's rootfs)
     FILTER  a raw classic-BPF seccomp program (struct sock_filter[]), or "-" for none

   Steps, as pyjail's strict jail takes them: new user, mount, pid, net, ipc, uts and cgroup
   namespaces; uid and gid 1000 inside, mapped to the caller's ids (written by the jail itself)
   or, when root runs it, to 65534 (written by the parent, the only one allowed to); mounts
   private; the rootfs bound, with proc, a /dev tmpfs holding five device binds and the fd,
   stdio and ptmx links, /dev/shm, /dev/pts, and tmpfs on /tmp and /work; pivot_root and
   detach the host's tree; root and /dev read-only; hostname; new session; every capability
   dropped; no_new_privs; the filter; pid 1 forks the program and reaps it.
   Built by bench/startup.py with -O2 -static. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *rootfs;
static char **program;
static struct sock_fprog filter;
static uid_t outer_uid;  /* the ids the jail's 1000 maps to */
static gid_t outer_gid;
static int run_by_root;
static int go_pipe[2];    /* root: the parent says the maps are written */
enum { kJailId = 1000, kNobody = 65534 };

static void die(const char *what) {
    perror(what);
    _exit(125);
}

static void write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) die(path);
    close(fd);
}

static void mount_or_die(const char *src, const char *dst, const char *type, unsigned long flags,
                         const char *data) {
    if (mount(src, dst, type, flags, data) != 0) die(dst);
}

static void bind_device(const char *name) {
    char host[64], inside[64];
    snprintf(host, sizeof host, "/dev/%s", name);
    snprintf(inside, sizeof inside, "dev/%s", name);
    int fd = open(inside, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) die(inside);
    close(fd);
    mount_or_die(host, inside, NULL, MS_BIND, NULL);
}

static void write_maps(const char *proc_dir) {
    char path[64], map[64];
    snprintf(path, sizeof path, "%s/setgroups", proc_dir);
    write_file(path, "deny");
    snprintf(path, sizeof path, "%s/uid_map", proc_dir);
    snprintf(map, sizeof map, "%d %u 1\n", kJailId, outer_uid);
    write_file(path, map);
    snprintf(path, sizeof path, "%s/gid_map", proc_dir);
    snprintf(map, sizeof map, "%d %u 1\n", kJailId, outer_gid);
    write_file(path, map);
}

static int jail_pid1(void *unused) {
    (void)unused;
    if (run_by_root) {
        char go;
        close(go_pipe[1]);
        if (read(go_pipe[0], &go, 1) != 1) _exit(125);
    } else {
        write_maps("/proc/self");
    }
    if (setresgid(kJailId, kJailId, kJailId) != 0 || setresuid(kJailId, kJailId, kJailId) != 0)
        die("set ids");

    mount_or_die(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
    mount_or_die(rootfs, rootfs, NULL, MS_BIND, NULL);
    if (chdir(rootfs) != 0) die("chdir rootfs");
    const unsigned long hard = MS_NOSUID | MS_NODEV;
    mount_or_die("proc", "proc", "proc", hard | MS_NOEXEC, NULL);
    mount_or_die("tmpfs", "dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=755");
    bind_device("null");
    bind_device("zero");
    bind_device("full");
    bind_device("random");
    bind_device("urandom");
    if (symlink("/proc/self/fd", "dev/fd") != 0 || symlink("/proc/self/fd/0", "dev/stdin") != 0 ||
        symlink("/proc/self/fd/1", "dev/stdout") != 0 ||
        symlink("/proc/self/fd/2", "dev/stderr") != 0 || symlink("pts/ptmx", "dev/ptmx") != 0)
        die("symlink dev");
    if (mkdir("dev/shm", 01777) != 0 || mkdir("dev/pts", 0755) != 0) die("mkdir dev");
    mount_or_die("tmpfs", "dev/shm", "tmpfs", hard, "size=64m");
    mount_or_die("devpts", "dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
                 "newinstance,ptmxmode=0666,mode=0620");
    mount_or_die("tmpfs", "tmp", "tmpfs", hard, "size=64m");
    mount_or_die("tmpfs", "work", "tmpfs", hard, "size=64m,mode=755");
    mount_or_die(NULL, "dev", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NOEXEC, NULL);

    if (syscall(SYS_pivot_root, ".", ".") != 0) die("pivot_root");
    if (umount2(".", MNT_DETACH) != 0) die("detach old root");
    if (chdir("/") != 0) die("chdir /");
    mount_or_die(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | hard, NULL);
    if (chdir("/work") != 0) die("chdir /work");
    if (sethostname("jail", 4) != 0) die("sethostname");

    if (setsid() < 0) die("setsid");
    for (int cap = 0; cap <= 63; ++cap)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) die("capbset");
    struct __user_cap_header_struct head = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct none[2];
    memset(none, 0, sizeof none);
    if (syscall(SYS_capset, &head, none) != 0) die("capset");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die("no_new_privs");
    if (filter.len > 0 && syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &filter) != 0)
        die("seccomp");

    pid_t child = fork();
    if (child < 0) die("fork");
    if (child == 0) {
        static char *const env[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "USER=jail",
                                    "LOGNAME=jail", "LANG=C.UTF-8", "PWD=/work", NULL};
        execve(program[0], program, env);
        die(program[0]);
    }
    int status;
    while (waitpid(child, &status, 0) < 0)
        if (errno != EINTR) die("waitpid");
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
}

static void read_filter(const char *path) {
    if (strcmp(path, "-") == 0) return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) die(path);
    size_t n = (size_t)st.st_size / sizeof(struct sock_filter);
    if (st.st_size <= 0 || (size_t)st.st_size % sizeof(struct sock_filter) != 0 || n > BPF_MAXINSNS) {
        fprintf(stderr, "%s: not a BPF program (%lld bytes)\n", path, (long long)st.st_size);
        _exit(125);
    }
    struct sock_filter *prog = malloc((size_t)st.st_size);
    if (prog == NULL || read(fd, prog, (size_t)st.st_size) != st.st_size) die(path);
    close(fd);
    filter.len = (unsigned short)n;
    filter.filter = prog;
}

int main(int argc, char **argv) {
    if (argc < 5 || strcmp(argv[3], "--") != 0) {
        fprintf(stderr, "usage: %s ROOTFS FILTER -- PROGRAM [ARGS...]\n", argv[0]);
        return 2;
    }
    rootfs = argv[1];
    read_filter(argv[2]);
    program = argv + 4;
    run_by_root = geteuid() == 0;
    outer_uid = run_by_root ? kNobody : geteuid();
    outer_gid = run_by_root ? kNobody : getegid();
    if (run_by_root && pipe2(go_pipe, O_CLOEXEC) != 0) die("pipe");

    static char stack[64 * 1024] __attribute__((aligned(16)));
    pid_t pid1 = clone(jail_pid1, stack + sizeof stack,
                       CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
                           CLONE_NEWUTS | CLONE_NEWCGROUP | SIGCHLD,
                       NULL);
    if (pid1 < 0) die("clone");
    if (run_by_root) {  /* mapping other ids than one's own takes CAP_SETUID here, in the parent */
        char proc_dir[32];
        snprintf(proc_dir, sizeof proc_dir, "/proc/%d", (int)pid1);
        write_maps(proc_dir);
        if (write(go_pipe[1], "", 1) != 1) die("release the jail");
        close(go_pipe[1]);
    }
    int status;
    while (waitpid(pid1, &status, 0) < 0)
        if (errno != EINTR) die("waitpid");
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
