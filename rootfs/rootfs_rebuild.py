"""Rebuilding a rootfs in place, while jails run in it.

A build or rebuild makes the new tree beside the old one (DIR.pyjail-tmp-XXXXXXXX) and swaps the two
with one rename, so DIR is always a whole tree. The old tree is then deleted -- unless a running
jail still has it mounted: deleting it would pull the files out from under that jail (a module it
has not imported yet would be gone). Such a tree is kept as DIR.pyjail-old-XXXXXXXX, and every
later build or rebuild of DIR deletes the kept trees that no jail uses any more.

A build also has staging directories beside DIR (DIR.pyjail-pip-XXXXXXXX: what pip's jail writes,
the relay's socket), and removes them and its DIR.pyjail-tmp- when it ends. A builder that is killed
(SIGKILL, the OOM killer) cannot: each build holds a flock on each of its own directories for
its whole life (lock_sibling), and a later build or rebuild of DIR removes those whose lock it
can take (sweep). Everything is removed by descriptor, iteratively (remove_tree): a jail chose
the depth, width and modes of what it wrote. Only names with the token .pyjail- are ever taken:
earlier versions named these directories DIR.tmp-, DIR.pip-, DIR.old- and eight characters, as
people name a backup of their own (data.old-20240101), which sweep() removed; a build now only
names such directories, once, for the user to remove by hand (LEGACY_SIBLING_RE).

Whether a jail uses a tree is read from /proc/PID/mountinfo, which every user may read: a jail's
mount namespace holds a bind mount of its rootfs (or of its top-level directories), whose root
field is the tree's path on its file system -- after a rename, the new path.

What a rebuild repeats is recorded by the build (inputs()) in the sources record
(rootfs_sources.py).

Only the standard library of any python3 >= 3.9 is used.
"""

import errno
import fcntl
import os
import re
import stat
import tempfile

# What a build leaves beside DIR while it runs (tmp, pip) or keeps for running jails (old),
# and sweep() removes: never a rootfs of its own (pyjail rootfs list skips them, a build refuses
# such a name). The token .pyjail- is what keeps a user's own directory out of the sweep: no one
# names a backup so by accident (jail/plan/rootfs_name.cpp matches the same names).
SIBLING_RE = re.compile(r"\.pyjail-(tmp|pip|old)-[A-Za-z0-9_]{8}(\.old)?$")
# What earlier versions of pyjail named them, and what people name backups (data.old-20240101):
# never removed, only pointed out by a build; still skipped by list and refused as a name (an
# earlier pyjail still installed would sweep such a rootfs, and its half-built trees are no
# rootfs for `rebuild --all`).
LEGACY_SIBLING_RE = re.compile(r"\.(tmp|pip|old)-[A-Za-z0-9_]{8}(\.old)?$")


def is_sibling_name(name):
    """Whether `name` is one a build makes beside a rootfs, or earlier versions made: not the
    name of a rootfs of its own."""
    return bool(SIBLING_RE.search(name) or LEGACY_SIBLING_RE.search(name))

# A directory of a tree, opened without following a symlink.
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

# Build options that say where the tree goes or how loudly, or which pyjail binary builds it:
# not inputs of the tree.
NOT_INPUTS = ("out", "name", "named_dir", "quiet", "requirements", "pyjail_binary")


def inputs(args, epoch):
    """The build options a rebuild repeats, as recorded (JSON). Paths are made absolute. The
    requirement files are not recorded: a rebuild installs the locked versions (the lock has
    them, with their wheels' hashes)."""
    out = {}
    for key, value in sorted(vars(args).items()):
        if key in NOT_INPUTS:
            continue
        if key == "find_links":
            value = [v if "://" in v else os.path.abspath(v) for v in value]
        elif key == "wheel_cache" and value:
            value = os.path.abspath(value)
        elif key == "ca_certificates" and value:
            value = os.path.abspath(value)
        elif key in ("from_venv", "python") and value and "/" in value:
            value = os.path.abspath(value)
        out[key] = value
    out["source_date_epoch"] = epoch
    return out


def unescape(field):
    """mountinfo escapes space, tab, newline and backslash as \\ooo."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mountinfo(pid="self"):
    """[(major:minor, root, mount point, super options)] of a process's mount namespace."""
    rows = []
    with open("/proc/%s/mountinfo" % pid, encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            fields = line.split()
            if len(fields) < 10 or "-" not in fields:
                continue
            dash = fields.index("-")
            rows.append((fields[2], unescape(fields[3]), unescape(fields[4]),
                         fields[dash + 3] if len(fields) > dash + 3 else ""))
    return rows


def fs_key(path):
    """(major:minor, path of `path` on its file system), as other namespaces' mountinfo name
    it: from the mount of this namespace that holds it."""
    real = os.path.realpath(path)
    st = os.stat(real)
    dev = "%d:%d" % (os.major(st.st_dev), os.minor(st.st_dev))
    best = None
    for mdev, root, point, _ in mountinfo():
        under = real == point or real.startswith(point.rstrip("/") + "/")
        if not under:
            continue
        # The longest mount point that holds it; one of its device first (btrfs subvolumes
        # report another device in stat than in mountinfo).
        rank = (mdev == dev, len(point))
        if best is None or rank > best[0]:
            best = (rank, mdev, root, point)
    if best is None:
        return None
    _, mdev, root, point = best
    rest = real[len(point.rstrip("/")):]
    return mdev, (root.rstrip("/") + rest) or "/"


def user(path):
    """Why `path` may be in use by a jail ("" when nothing uses it, as far as this process can
    see)."""
    try:
        key = fs_key(path)
    except OSError as e:
        return "cannot tell (%s)" % e.strerror
    if key is None:
        return "cannot tell (no mount holds it)"
    dev, rel = key
    # Other users' mount namespaces are read too (a jail of theirs may run in a tree of ours).
    # A mount they make to look like ours can only make us keep a tree, never delete one in use.
    if os.geteuid() != 0 and any(p == "/proc" and "hidepid=" in opts and not re.search(
            r"hidepid=(0|off)\b", opts) for _, _, p, opts in mountinfo()):
        return "cannot tell (/proc hides other users' processes)"
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            rows = mountinfo(pid)
        except (FileNotFoundError, ProcessLookupError):
            continue        # it has exited
        except OSError as e:
            if e.errno == errno.EINVAL:
                continue    # a zombie, or exiting: it has no mount namespace any more
            return "cannot tell (/proc/%s/mountinfo: %s)" % (pid, e.strerror)
        for mdev, root, _, _ in rows:
            if mdev == dev and (root == rel or root.startswith(rel.rstrip("/") + "/")):
                return "process %s has it mounted" % pid
    return ""


class DirCursor:
    """A walk of the directory open at `fd` (taken over, closed by close()) that holds one
    directory open at a time: down() enters a subdirectory by name, up() goes back through
    "..", which must be the directory recorded on the way down ((st_dev, st_ino)), or the walk
    stops (a directory moved meanwhile would lead it out of the tree). Each level's names are
    listed once, when it is entered, and handed out by next(). No recursion and no descriptor
    per level: a tree's owner chooses its depth (a chain 3000 deep exhausts Python's recursion
    limit, and the 1024 descriptors a process may have). Never follows a symlink.
    `open_up`: a directory its owner closed (mode 000, or without write) is given mode 0700
    first, as the builder needs to empty it."""

    def __init__(self, fd, open_up=False):
        self.fd, self.open_up = fd, open_up
        try:
            # [(name, (st_dev, st_ino), [names still to hand out, the next one last])]
            self.levels = [self._level(fd, None)]
        except BaseException:
            os.close(fd)
            raise

    @property
    def depth(self):
        return len(self.levels) - 1

    def rel(self, name):
        """`name` of the current directory, relative to the top."""
        return "/".join([lv[0] for lv in self.levels[1:]] + [name])

    def next(self):
        """The next name of the current directory, or None once all were handed out."""
        names = self.levels[-1][2]
        return names.pop() if names else None

    def down(self, name):
        fd = open_dir(self.fd, name, self.open_up)
        try:
            level = self._level(fd, name)
        except BaseException:
            os.close(fd)
            raise
        os.close(self.fd)
        self.fd = fd
        self.levels.append(level)

    def up(self):
        """Back to the parent directory; returns the name of the one left."""
        fd = os.open("..", DIR_FLAGS, dir_fd=self.fd)
        st = os.fstat(fd)
        if len(self.levels) < 2 or (st.st_dev, st.st_ino) != self.levels[-2][1]:
            os.close(fd)
            raise OSError(errno.ESTALE, "a directory was moved during the walk",
                          self.rel(""))
        os.close(self.fd)
        self.fd = fd
        return self.levels.pop()[0]

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    @staticmethod
    def _level(fd, name):
        st = os.fstat(fd)
        return name, (st.st_dev, st.st_ino), sorted(os.listdir(fd), reverse=True)


def open_dir(dir_fd, name, open_up=False):
    """Directory `name` of `dir_fd`, never through a symlink. `open_up`: one its owner left
    without permissions (mode 000: nothing in it can be listed or removed, even by its owner)
    is given mode 0700 first."""
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        if not open_up:
            raise
        # Opened without permissions (O_PATH), never through a link the jail planted, and
        # changed through /proc: fchmod does not take an O_PATH descriptor.
        handle = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                         dir_fd=dir_fd)
        try:
            os.chmod("/proc/self/fd/%d" % handle, 0o700)
        finally:
            os.close(handle)
        fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    if open_up and stat.S_IMODE(os.fstat(fd).st_mode) & 0o700 != 0o700:
        try:
            os.fchmod(fd, 0o700)    # to list, enter and empty it
        except BaseException:
            os.close(fd)
            raise
    return fd


def remove_tree(dir_fd, name, top=None):
    """Removes directory `name` of `dir_fd` and everything in it, as a jail may have left it
    (any depth, any width, directories without permissions, symlinks anywhere, which are
    removed, never followed): True when it is gone. What cannot be removed is passed over.
    `top`: a descriptor of that directory, opened (and checked) already."""
    try:
        cursor = DirCursor(os.dup(top) if top is not None else
                           open_dir(dir_fd, name, open_up=True), open_up=True)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    whole = True
    try:
        while True:
            entry = cursor.next()
            if entry is None:
                if cursor.depth == 0:
                    break
                left = cursor.up()
                try:
                    os.rmdir(left, dir_fd=cursor.fd)
                except OSError:
                    whole = False
                continue
            try:
                st = os.stat(entry, dir_fd=cursor.fd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    cursor.down(entry)
                else:
                    os.unlink(entry, dir_fd=cursor.fd)
            except FileNotFoundError:
                pass
            except OSError:
                whole = False
    except OSError:
        return False    # up() found the tree changed: go no further
    finally:
        cursor.close()
    try:
        os.rmdir(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return whole


def remove_path(path):
    """remove_tree() for a path, whose parent directory is the builder's."""
    try:
        parent = os.open(os.path.dirname(path) or ".", DIR_FLAGS)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        return remove_tree(parent, os.path.basename(path))
    finally:
        os.close(parent)


def retire(old, out, say):
    """`old`, the tree `out` had before the swap: deleted, or kept for the jails that run in
    it."""
    why = user(old)
    if not why:
        remove_path(old)
        return
    m = re.search(r"\.pyjail-tmp-([A-Za-z0-9_]{8})", os.path.basename(old))
    kept = out + ".pyjail-old-" + (m.group(1) if m else "00000000")
    os.rename(old, kept)
    say("the previous tree is kept as %s for the jails still running in it (%s); the next "
        "build or rebuild of %s deletes it once they have ended" % (kept, why, out))


def lock_sibling(out, kind):
    """A new directory OUT.pyjail-KIND-XXXXXXXX beside `out` ("tmp": the tree being built, "pip": a
    staging directory), with an exclusive flock held while the returned descriptor is open:
    (path, fd). A build holds the lock of each of its own for its whole life, so a later
    build's sweep() takes only those of a build that was killed."""
    parent, base = os.path.split(out)
    for _ in range(8):
        path = tempfile.mkdtemp(prefix="%s.pyjail-%s-" % (base, kind), dir=parent)
        fd = os.open(path, DIR_FLAGS)
        fcntl.flock(fd, fcntl.LOCK_EX)
        # A sweep that took the lock between mkdtemp and flock has removed the directory.
        try:
            st, now = os.fstat(fd), os.lstat(path)
            if (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino):
                return path, fd
        except FileNotFoundError:
            pass
        os.close(fd)
    raise OSError(errno.EAGAIN, "another build of it removed each one made", path)


def sweep(out, say, ours, point_out=True):
    """Removes what earlier builds of `out` left beside it: the build and staging directories
    (.pyjail-tmp-, .pyjail-pip-) of a build that was killed (SIGKILL, the OOM killer: no process
    holds their lock any more, lock_sibling), which may hold hundreds of MB, and the trees kept
    for jails (.pyjail-old-) that no jail uses any more. Only real directories whose owner passes
    `ours(uid)` (the builder, and for root the host ids its pip jails run as), and that no jail
    has mounted: another user's entry of such a name in a shared directory (/tmp) is left alone.
    `point_out`: also say, in one line, which directories of ours beside `out` have the names
    earlier versions gave theirs (LEGACY_SIBLING_RE), which are never removed."""
    parent, base = os.path.split(out)
    try:
        pfd = os.open(parent or ".", DIR_FLAGS)
    except OSError:
        return
    legacy = []
    try:
        for name in sorted(os.listdir(pfd)):
            rest = name[len(base):] if name.startswith(base) else ""
            m = SIBLING_RE.match(rest)
            if not m:
                if point_out and LEGACY_SIBLING_RE.match(rest) and is_ours_dir(pfd, name, ours):
                    legacy.append(os.path.join(parent, name))
                continue
            path = os.path.join(parent, name)
            if sweep_one(pfd, name, path, ours):
                say("removed %s, %s" % (path, "kept for jails that have ended" if
                                         m.group(1) == "old" else
                                         "left by a build of %s that was killed" % base))
    except OSError:
        pass
    finally:
        os.close(pfd)
    if legacy:
        # A backup of the user's (cp -a data data.old-20240101) cannot be told from what an
        # earlier version left: the user decides.
        one = len(legacy) == 1
        shown = legacy[:4] if len(legacy) <= 4 else legacy[:3] + ["%d more" % (len(legacy) - 3)]
        named = shown[0] if one else ", ".join(shown[:-1]) + " and " + shown[-1]
        say("%s: named as earlier versions of pyjail named what a build leaves beside %s, which a "
            "build no longer removes (%s); remove %s by hand if %s" % (
                named, base, "it may be a backup of yours" if one else
                "they may be backups of yours", "it" if one else "them",
                "it is such a leftover" if one else "they are such leftovers"))


def is_ours_dir(pfd, name, ours):
    """Whether entry `name` of `pfd` is a real directory (not a symlink) whose owner passes
    `ours(uid)`."""
    try:
        st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and ours(st.st_uid)


def sweep_one(pfd, name, path, ours):
    """sweep() for entry `name` of `pfd`: True if it was one to remove, and is gone."""
    try:
        # Looked at without permissions or following a link (O_PATH, O_NOFOLLOW): nothing of
        # another user's is opened, let alone opened up.
        look = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                       dir_fd=pfd)
    except OSError:
        return False    # a symlink, not a directory, or gone
    try:
        st = os.fstat(look)
        if not ours(st.st_uid):
            return False
        fd = open_dir(pfd, name, open_up=True)
    except OSError:
        return False
    finally:
        os.close(look)
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False    # a build that runs holds it
        # A tree a jail still has mounted: the old tree of a build killed between its swap
        # and its retire(), or a staging directory whose pip jail has not yet died with it.
        if user(path):
            return False
        return remove_tree(pfd, name, fd)    # what was checked, not what has its name now
    finally:
        os.close(fd)


def targets(paths, all_, default, dirs):
    """The rootfs directories a rebuild names: `paths`, and with --all the default one and
    every named one in `dirs` ([(where, directory)]), as `pyjail rootfs list` shows them."""
    found = []
    if all_:
        found = [default] if default else []
        for _, d in dirs:
            try:
                names = sorted(os.listdir(d))
            except OSError:
                continue
            found += [os.path.join(d, n) for n in names if not is_sibling_name(n)]
        found = [p for p in found if os.path.isfile(os.path.join(p, "etc/pyjail-rootfs"))]
    seen, unique = set(), []
    for p in list(paths) + found:
        real = os.path.realpath(p)
        if real not in seen:
            seen.add(real)
            unique.append(p)
    return unique
