#!/usr/bin/env python3
"""Assemble a minimal, read-only root filesystem that can run Python.

pyjail runs untrusted Python with a private root filesystem instead of the
host's. This script builds that root from an interpreter already installed on
the host: the interpreter binary, the ELF libraries it and its extension
modules need (found with ldd), a trimmed standard library with pre-compiled
hash-based bytecode (so nothing is stat'ed or rewritten at import time on the
read-only root), a few files in /etc, and a sha256 manifest.

The build is reproducible (same inputs give a byte-identical tree, mtimes
included) and atomic: it happens in DIR.pyjail-tmp-XXXXXXXX next to DIR, which is
renamed into place only once everything succeeded.

Third-party packages come from wheels, resolved and installed by pip in a jail on
the tree being built, as its own interpreter (--requirements, --pip: no package
code and no pip resolution runs on the host; rootfs_packages.py, rootfs_relay.py),
or from an existing virtualenv of that interpreter (--from-venv, read without
following a symlink out of it); the libraries their extension modules need are
found by reading the ELF files (rootfs_elf.py), and a lock records what went in
(rootfs_packages.py). Installed with pyjail, this script is `pyjail rootfs`:

  build-rootfs.py [build] (--out DIR | --name NAME) [--python /usr/bin/python3]
                  [--requirements FILE] [--pip SPEC ...] [--find-links DIR]
                  [--no-index] [--index-url URL] [--extra-index-url URL]
                  [--wheel-cache DIR] [--download-limit SIZE] [--install-limit SIZE]
                  [--from-venv DIR] [--allow-build] [--with PKG ...] [--shell-tools]
                  [--ca-certificates FILE | --no-ca-certificates]
                  [--jail-uid 1000] [--jail-gid 1000] [--quiet]
  build-rootfs.py rebuild [--if-stale] [--quiet] (ROOTFS ... | --all --dir WHERE=DIR ...)
  build-rootfs.py info ROOTFS
  build-rootfs.py list --dir WHERE=DIR ...
  build-rootfs.py sources ROOTFS

Each build records where its host files came from (rootfs_sources.py) and how to build it
again; `rebuild` does that after a host upgrade (rootfs_rebuild.py).

Only the standard library of any python3 >= 3.9 is used.
"""

import argparse
import ctypes
import errno
import fcntl
import fnmatch
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
import rootfs_elf  # noqa: E402
import rootfs_packages  # noqa: E402
import rootfs_rebuild  # noqa: E402
import rootfs_sources  # noqa: E402
from rootfs_packages import BuildError, DiskLimitError, one_line, printable  # noqa: E402

BUILDER_VERSION = "1.2.0"

# Bytecode optimisation level passed to compileall's -o. 0 gives plain .pyc
# (asserts and docstrings kept); 1 or 2 would give .opt-N.pyc, which the
# interpreter only loads when started with -O / -OO.
PYC_OPTIMIZATION = 0

# mtime given to every entry when SOURCE_DATE_EPOCH is not set. 1 rather than
# 0 because some tools read an mtime of 0 as "unknown".
DEFAULT_EPOCH = 1

# Standard library parts that are dead weight in a sandbox. Names are relative
# to the stdlib directory; directories called test/tests and __pycache__ are
# dropped at any depth (this covers distutils/tests, unittest/test,
# ctypes/test, sqlite3/test, ...).
STDLIB_EXCLUDE_TOP_DIRS = (
    "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3",
    "config-3.*",                       # static libpython, for building
    "site-packages", "dist-packages",   # host packages: only via --with
)
# sitecustomize.py is the host's site policy, not the standard library: it has
# no place in a jail, and Debian's (it imports apport_python_hook, which the
# rootfs does not have) costs every interpreter start its own import and a
# failed one, a scan of the whole sys.path: site.main() takes 0.49 ms with it
# and 0.40 ms without.
# EXTERNALLY-MANAGED (PEP 668) is the host distribution's word on its own system Python ("use
# apt"): in a rootfs whose site-packages is read-only anyway it only refuses `pip install
# --user` into the jail's writable home, which is how a run installs a package for itself.
STDLIB_EXCLUDE_TOP_FILES = ("turtle.py", "sitecustomize.py", "EXTERNALLY-MANAGED")
ANY_DEPTH_EXCLUDE_DIRS = ("__pycache__", "test", "tests")
# Extension modules in lib-dynload that only the test suite (or Tk) uses.
DYNLOAD_EXCLUDE = (
    "_tkinter*", "_test*", "_ctypes_test*", "_xxtestfuzz*", "xxlimited*",
)

# Loaded with dlopen() by glibc (pthread_cancel, thread exit unwinding), so
# ldd never lists it, but threads need it.
DLOPENED_LIBS = ("libgcc_s.so.1",)

MERGED_USR = (("/bin", "/usr/bin"), ("/sbin", "/usr/bin"),
              ("/lib64", "/usr/lib64"), ("/lib32", "/usr/lib32"),
              ("/libx32", "/usr/libx32"), ("/lib", "/usr/lib"))
TOP_SYMLINKS = (("bin", "usr/bin"), ("sbin", "usr/bin"),
                ("lib", "usr/lib"), ("lib64", "usr/lib64"),
                ("lib32", "usr/lib32"), ("libx32", "usr/libx32"))
MOUNT_POINTS = ("proc", "dev", "tmp", "work", "home")

# Time zone data: what zoneinfo and glibc read. right/ (the same zones counting leap seconds,
# 1.9 MiB more) and localtime (the host's own zone) stay out.
ZONEINFO = "/usr/share/zoneinfo"
ZONEINFO_EXCLUDE = ("right", "localtime")

# ctypes.util.find_library() runs `/sbin/ldconfig -p` and reads the library names from its
# output (its other ways need gcc or ld). Debian's ldconfig is a static binary of 1 MB.
LDCONFIG = ("/sbin/ldconfig.real", "/sbin/ldconfig", "/usr/sbin/ldconfig")

# --shell-tools: Debian's static busybox (package busybox-static), with a link for each tool
# code run by agents calls through subprocess or os.system. Tools the rootfs already has
# (/bin/sh is dash) keep their own binary.
BUSYBOX = ("/bin/busybox", "/usr/bin/busybox")
SHELL_TOOLS = (
    "sh", "ls", "cat", "grep", "egrep", "fgrep", "head", "tail", "wc", "sort", "uniq", "sed",
    "awk", "find", "xargs", "cut", "tr", "env", "echo", "printf", "pwd", "mkdir", "rmdir",
    "rm", "cp", "mv", "ln", "touch", "chmod", "stat", "du", "df", "basename", "dirname",
    "realpath", "readlink", "date", "sleep", "tee", "diff", "cmp", "comm", "paste", "split",
    "tac", "rev", "nl", "fold", "od", "hexdump", "xxd", "md5sum", "sha1sum", "sha256sum",
    "sha512sum", "base64", "seq", "expr", "test", "[", "true", "false", "yes", "which",
    "id", "whoami", "uname", "hostname", "nproc", "ps", "kill", "timeout", "tar", "gzip",
    "gunzip", "zcat", "bzip2", "bunzip2", "xz", "unxz", "unzip", "bc", "dc", "less", "more",
    "file", "strings", "truncate", "mktemp", "install", "sync", "usleep", "free", "uptime",
)

# CA certificates: the host's bundle goes where the tree's OpenSSL looks by default (the target
# interpreter's ssl.get_default_verify_paths().openssl_cafile, /usr/lib/ssl/cert.pem on Debian),
# so that ssl.create_default_context() in a jail verifies servers as the host's Python does.
# Taken from there on the host, else from the first of these (an interpreter whose OpenSSL was
# built for another layout, such as a standalone build's /etc/ssl/cert.pem, then gets the
# host's bundle where it looks). Not SSL_CERT_FILE: the tree would depend on the environment
# of whoever builds (and rebuilds, from an apt hook) it; --ca-certificates FILE says it.
HOST_CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
                   "/etc/ssl/ca-bundle.pem", "/etc/ssl/cert.pem")
# Debian's bundle holds some 140 certificates in 220 KiB: a file of more is not a CA bundle.
CA_BUNDLE_MAX = 8 << 20
CA_CERT_RE = re.compile(rb"-----BEGIN (TRUSTED )?CERTIFICATE-----")
CA_KEY_RE = re.compile(rb"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
# How many certificates the tree's OpenSSL reads from the bundle (run by the target
# interpreter): a file it cannot read would leave every jail's default context empty, silently
# (OpenSSL ignores a default file it cannot load).
CA_COUNT = r"""
import json, ssl, sys
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
try:
    ctx.load_verify_locations(cafile=sys.argv[1])
except ssl.SSLError as e:
    print(json.dumps({"error": str(e)}))
else:
    print(json.dumps(ctx.cert_store_stats()))
"""

# A rootfs with matplotlib gets its font cache, built at build time in a jail on the new tree,
# and a start-up hook that points matplotlib at it (pyjail_matplotlib.py says why).
MATPLOTLIB_DIR = "/usr/lib/pyjail/matplotlib"
MATPLOTLIB_HOOK = "_pyjail_matplotlib"
MATPLOTLIB_FONTLIST = r"""
import json, os, sys
import matplotlib, matplotlib.font_manager as fm
path = os.path.join(matplotlib.get_cachedir(), "fontlist-v%s.json" % fm.FontManager.__version__)
with open(path, encoding="utf-8") as f:
    text = f.read()
json.loads(text)
sys.stdout.write(json.dumps({"name": os.path.basename(path), "text": text}))
"""

# How deep a tree of packages may nest (what pip's jail installed, a virtualenv's
# site-packages): real packages nest about 20 directories. A tree chosen by a jail could nest
# thousands, and the built tree is then walked by path and recursively: finalize()'s and
# rootfs_show's os.walk (which recurses before Python 3.12: RecursionError), paths past
# PATH_MAX (ENAMETOOLONG). Bounded where it is copied (copy_untrusted_tree), nothing deeper
# ever reaches the tree, and those walks stay safe.
MAX_TREE_DEPTH = 128

# A rootfs name: what `--rootfs NAME` and `--name NAME` accept (jail/plan/rootfs_name.cpp).
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")

MANIFEST = "etc/pyjail-manifest.sha256"
SYMLINKS = "etc/pyjail-manifest.symlinks"
INFO = "etc/pyjail-rootfs"

ELF_MAGIC = b"\x7fELF"


# --------------------------------------------------------------------------
# helpers


def usr_path(path):
    """Map a host path to its place in a merged-/usr tree (/lib/x -> /usr/lib/x)."""
    for top, usr in MERGED_USR:
        if path == top or path.startswith(top + "/"):
            return usr + path[len(top):]
    return path


def is_elf(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == ELF_MAGIC
    except OSError:
        return False


def raise_error(err):
    """os.walk() onerror: an unreadable directory must fail the build."""
    raise err


# pyjail's own host ids for root's jails and the directory of their locks (jail/plan/hostid.hpp:
# kDefaultRootIdRange, kRootLockDir): a jail holds an flock on the file named after its id.
ROOT_ID_RANGE = (1879048192, 65536)
ROOT_ID_LOCKS = "/run/pyjail/ids"


def lease_root_host_id():
    """root: (uid, lock fd) of a host id of pyjail's own range that nothing else uses while
    the fd is open, locked as pyjail locks a jail's (taken from the top; jails take theirs
    from the bottom). The pip jails run as it and the staging directory is its own, closed to
    others. Attack: with nobody (uid 65534) for both, every process of the real nobody user
    could write into root's staging directory for the whole build (a .pth file into the
    rootfs, a wheel into the cache) and signal the jail's processes."""
    os.makedirs(os.path.dirname(ROOT_ID_LOCKS), mode=0o755, exist_ok=True)
    try:
        os.mkdir(ROOT_ID_LOCKS, 0o755)
    except FileExistsError:
        pass
    dfd = os.open(ROOT_ID_LOCKS, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(dfd)
        if rootfs_packages.others_can_change(st, 0):
            raise BuildError("host ids", "%s belongs to uid %d or is open to others (mode %o)"
                             % (ROOT_ID_LOCKS, st.st_uid, stat.S_IMODE(st.st_mode)),
                             "remove it: pyjail makes it again")
        first, count = ROOT_ID_RANGE
        for uid in range(first + count - 1, first - 1, -1):
            fd = os.open(str(uid), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=dfd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return uid, fd
            except BlockingIOError:
                os.close(fd)
        raise BuildError("host ids", "all %d ids from %d are taken by running jails" % (count, first),
                         "wait for some to end")
    finally:
        os.close(dfd)


def check_out_parent(parent):
    """root: the directory the output is built in is one no other user can change. Attack: a
    user who could rename entries there swaps the build directory for a link while root fills
    it (every later write path-based), and root writes the rootfs into a directory of the
    user's choosing. A sticky directory of root's (/tmp) keeps others from renaming root's
    entries; so does a directory only root can write."""
    if os.geteuid() != 0:
        return
    why = rootfs_packages.root_walk_refusal(os.stat(parent), parent)
    if why:
        raise BuildError("--out in %s" % parent, why,
                         "build into a directory only root can change, or build as that user")


def remove_jail_tree(path, warn):
    """Removes a directory a jail wrote into, whose depth, width and modes the jail chose
    (rootfs_rebuild.remove_tree: by descriptor, no recursion, no symlink followed, directories
    left without permissions opened up). Says so if something is left."""
    if not rootfs_rebuild.remove_path(path):
        warn("cannot remove all of %s: remove it by hand" % path)


def ours(uid):
    """Whether an entry of this owner beside the output may be one of the builder's own: the
    builder's, or for root also one of the host ids its pip jails run as (a staging
    directory is that id's: lease_root_host_id)."""
    euid = os.geteuid()
    first, count = ROOT_ID_RANGE
    return uid == euid or euid == 0 and first <= uid < first + count


def lexists_at(dir_fd, name):
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False


def open_own_directory(path, what):
    """A directory the builder writes into, opened without following a symlink: the builder's
    own and closed to others' writes. Attack: a wheel cache another user can write (a shared
    /tmp/wheels made by someone else) lets that user plant wheels in it for the builder's
    later builds, or a link where the builder writes (root's bytes through it into any file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise BuildError(what, e.strerror, "give a directory of your own")
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        os.close(fd)
        raise BuildError(what, "it belongs to uid %d or others can write it (mode %o)"
                         % (st.st_uid, stat.S_IMODE(st.st_mode)),
                         "give a directory of your own that only you can write")
    return fd


def host_ca_file():
    """The host's bundle of CA certificates, which pip in the jail checks the index against
    (bound read-only): PIP_CERT's, else the host OpenSSL's. None when there is none."""
    import ssl
    paths = ssl.get_default_verify_paths()
    for f in (os.environ.get("PIP_CERT"), os.environ.get("SSL_CERT_FILE"), paths.cafile,
              paths.openssl_cafile, "/etc/ssl/certs/ca-certificates.crt"):
        if f and os.path.isfile(f):
            return os.path.realpath(f)
    return None


def read_ca_bundle(path, what, euid):
    """(the bytes, the resolved path) of a CA bundle on the host, read once, by descriptor: a
    regular file of at most CA_BUNDLE_MAX, with at least one PEM certificate and no private
    key: every jail reads the copy, and a key there (a combined cert-and-key file given by
    mistake) would be handed to untrusted code. For root, the file and every directory above it
    must be root's and writable by no one else (a sticky directory of root's, such as /tmp, may
    be above it), as for --from-venv. Attack: root's rebuilds (the apt hook's) read the file
    again, and whoever could change it would choose which servers every jail of root's trusts
    (a CA of their own, to read the jails' TLS), or swap in a link to a file of root's."""
    real = os.path.realpath(path)
    it = "it" if real == os.path.abspath(path) else real     # the file a link leads to
    fix = "give a file of PEM certificates%s, or build without: --no-ca-certificates" % (
        " that only root can change" if euid == 0 else "")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open("/", flags | os.O_DIRECTORY)
    try:
        parts = [p for p in real.split("/") if p]
        here = "/"
        for i, part in enumerate(parts):
            why = euid == 0 and rootfs_packages.root_walk_refusal(os.fstat(fd), here)
            if why:
                raise BuildError(what, why, fix)
            here = os.path.join(here, part)
            last = i == len(parts) - 1
            try:
                nfd = os.open(part, flags | (os.O_NONBLOCK if last else os.O_DIRECTORY),
                              dir_fd=fd)
            except OSError as e:
                raise BuildError(what, "cannot open %s (%s)" % (here, e.strerror), fix)
            os.close(fd)
            fd = nfd
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BuildError(what, "%s is not a regular file" % it, fix)
        if euid == 0 and (st.st_uid != 0 or st.st_mode & 0o022):
            raise BuildError(what, "%s belongs to uid %d with mode %o: others can change it, "
                             "and root builds this rootfs"
                             % (it, st.st_uid, stat.S_IMODE(st.st_mode)), fix)
        with os.fdopen(fd, "rb") as f:
            fd = None
            data = f.read(CA_BUNDLE_MAX + 1)
    finally:
        if fd is not None:
            os.close(fd)
    if len(data) > CA_BUNDLE_MAX:
        raise BuildError(what, "%s is larger than %d MiB, which no bundle of CA certificates "
                         "is" % (it, CA_BUNDLE_MAX >> 20), fix)
    if CA_KEY_RE.search(data):
        raise BuildError(what, "%s holds a private key, which every jail would read" % it,
                         "give a file of certificates only")
    if not CA_CERT_RE.search(data):
        raise BuildError(what, "%s holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
                         % it, fix)
    return data, real


class DownloadLimitError(BuildError):
    """The relay stopped pip's run: the index's hosts sent more than --download-limit
    (rootfs_relay.DownloadBudget). Never a warning: what pip wrote may be cut short."""

    def __init__(self, download, limit, rebuild=False):
        import rootfs_relay
        size = rootfs_relay.format_size
        raise_it = "--download-limit %s" % size(2 * limit)
        super().__init__("pip download" if download else "pip install",
                         "the index sent more than --download-limit %s, the most a build may "
                         "download, and the relay cut pip off" % size(limit),
                         "if the packages need that much, raise it: %s" % raise_it
                         if not rebuild else "a rebuild keeps its build's limit; if the "
                         "packages need that much, build it again with %s" % raise_it)


def inside(path, root):
    return path == root or path.startswith(root.rstrip("/") + "/")


class Builder:
    def __init__(self, args):
        self.args = args
        self.python = args.python
        self.quiet = args.quiet
        self.out = os.path.abspath(args.out)
        self.root = None            # the DIR.pyjail-tmp-XXXXXXXX being filled
        self.stage = None           # the DIR.pyjail-pip-XXXXXXXX pip installs into
        self.relay_dir = None       # another DIR.pyjail-pip-XXXXXXXX, with the relay's socket
        # Descriptors of those directories, each holding its flock (rootfs_rebuild.lock_sibling)
        # for as long as the build runs, and of the previous tree while it is swapped out.
        self.locks = []
        self.id_lease = None        # root: the lock of the pip jails' host id (lease_root_host_id)
        self.jail_uid = None        # root: that id
        self.made_parent = None     # the directory made to hold --out, removed on failure
        self.elf_sources = set()    # host ELF files whose dependencies we need (ldd)
        self.package_elfs = set()   # ELF files of wheels/venvs, in the tree (never run)
        self.package_libs = set()   # host libraries those need
        self.copying_packages = False
        self.lock = []              # what went in (rootfs_packages.lock_entries)
        self.dists = []             # dist-info/egg-info names copied via --with
        self.compile_dirs = []      # in-root directories/files to byte-compile
        self.package_compile = []   # same, for --with packages
        self.host_files = {}        # in-tree path -> host file copied there (rootfs_sources)
        self.pyjail_files = {}      # in-tree path -> sha256 of pyjail's own files copied in
        self.venv_dists = {}        # dist-info directory -> sha256 of its RECORD (--from-venv)
        self.ca_certificates = ""    # in-tree path of the CA bundle, when it has one
        self.ca_input = None         # (bytes, real path, OpenSSL's count) of --ca-certificates,
                                     # checked early
        # A rebuild: the lock of the tree it replaces, whose pip packages it installs again
        # (the same versions and wheels) and whose `requested` it keeps.
        self.previous_lock = None

    # ---------------------------------------------------------------- output

    def say(self, msg):
        if not self.quiet:
            print("build-rootfs: " + printable(msg), flush=True)

    def warn(self, msg):
        # A name or text from the jail (a file it left, pip's words) is printed as printable.
        print("build-rootfs: warning: " + printable(msg), file=sys.stderr, flush=True)

    # ------------------------------------------------------------ tree writes

    def dest(self, path):
        """Absolute host path inside the tree for an absolute in-jail path."""
        assert os.path.isabs(path), path
        return os.path.join(self.root, path.lstrip("/"))

    def makedirs(self, path):
        d = self.dest(path)
        if not os.path.isdir(d):
            os.makedirs(d, mode=0o755, exist_ok=True)

    def copy_file(self, src, path):
        """Copy host file src (symlinks followed) to in-jail path."""
        d = self.dest(path)
        if os.path.lexists(d):
            return
        self.makedirs(os.path.dirname(path))
        shutil.copyfile(src, d)
        elf = is_elf(d)
        mode = 0o755 if (os.stat(src).st_mode & 0o111) or elf else 0o644
        os.chmod(d, mode)
        if elf and self.copying_packages:
            self.package_elfs.add(d)   # read, not run through ldd: not the host's own file
        elif elf:
            self.elf_sources.add(os.path.realpath(src))
        if not self.copying_packages:
            self.host_files[path] = os.path.realpath(src)

    def symlink(self, path, target):
        d = self.dest(path)
        if os.path.lexists(d):
            return
        self.makedirs(os.path.dirname(path))
        os.symlink(target, d)

    def write_text(self, path, text):
        d = self.dest(path)
        self.makedirs(os.path.dirname(path))
        with open(d, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.chmod(d, 0o644)

    def copy_tree(self, src, path, skip=lambda rel, is_dir: False):
        """Copy directory src to in-jail path, leaving out what skip() rejects.

        Symlinks that point inside src (to something copied) are kept as
        relative symlinks; any other symlink is replaced by a copy of what
        it points to, so nothing in the tree points back at the host.
        """
        real_src = os.path.realpath(src)
        self.makedirs(path)
        for dirpath, dirnames, filenames in os.walk(real_src, onerror=raise_error):
            reldir = os.path.relpath(dirpath, real_src)
            reldir = "" if reldir == "." else reldir
            keep = []
            for name in sorted(dirnames):
                rel = os.path.join(reldir, name)
                if skip(rel, True):
                    continue
                full = os.path.join(dirpath, name)
                if os.path.islink(full):   # os.walk does not descend into it
                    self.copy_link(full, rel, real_src, path, skip)
                else:
                    self.makedirs(os.path.join(path, rel))
                    keep.append(name)
            dirnames[:] = keep
            for name in sorted(filenames):
                rel = os.path.join(reldir, name)
                if skip(rel, False):
                    continue
                full = os.path.join(dirpath, name)
                if os.path.islink(full):
                    self.copy_link(full, rel, real_src, path, skip)
                elif stat.S_ISREG(os.lstat(full).st_mode):
                    self.copy_file(full, os.path.join(path, rel))

    def copy_link(self, full, rel, real_src, path, skip):
        resolved = os.path.realpath(full)
        if not os.path.exists(resolved):
            return  # dangling: nothing to copy
        rel_res = os.path.relpath(resolved, real_src)
        parts = rel_res.split("/")
        if inside(resolved, real_src) and not any(
                skip("/".join(parts[:i + 1]),
                     i < len(parts) - 1 or os.path.isdir(resolved))
                for i in range(len(parts))):
            target = os.path.relpath(rel_res, os.path.dirname(rel) or ".")
            self.symlink(os.path.join(path, rel), target)
        elif os.path.isdir(resolved):
            self.copy_tree(resolved, os.path.join(path, rel),
                           lambda r, d: d and os.path.basename(r) == "__pycache__")
        else:
            self.copy_file(resolved, os.path.join(path, rel))

    # --------------------------------------------------------- subprocesses

    def run(self, cmd, what, fix, env=None, check=True, cwd=None):
        try:
            proc = subprocess.run(cmd, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env=env, universal_newlines=True, cwd=cwd)
        except OSError as e:
            raise BuildError(what, "cannot run %s: %s" % (cmd[0], e.strerror), fix)
        if check and proc.returncode != 0:
            why = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
            why = why[-1] if why else "exit status %d" % proc.returncode
            raise BuildError(what, "%s exited %d: %s" % (
                os.path.basename(cmd[0]), proc.returncode, one_line(why)), fix)
        return proc

    # ----------------------------------------------------------- the steps

    def query_python(self):
        py = self.python
        if "/" not in py:
            py = shutil.which(py) or py
        if not os.path.isfile(py) or not os.access(py, os.X_OK):
            raise BuildError("interpreter %s" % py, "not an executable file",
                             "pass --python with the path of a python3 binary")
        script = (
            "import json, os, sys, sysconfig\n"
            "dyn = sysconfig.get_config_var('DESTSHARED')\n"
            "if not dyn or not os.path.isdir(dyn):\n"
            "    dyn = next((p for p in sys.path\n"
            "                if os.path.basename(p) == 'lib-dynload'), None)\n"
            "try:\n"
            "    import ssl\n"
            "    cafile = ssl.get_default_verify_paths().openssl_cafile\n"
            "except ImportError:\n"
            "    cafile = None\n"
            "print(json.dumps({'version': '%d.%d.%d' % sys.version_info[:3],\n"
            "    'hexversion': sys.hexversion,\n"
            "    'implementation': sys.implementation.name,\n"
            "    'executable': sys.executable,\n"
            "    'machine': os.uname().machine,\n"
            "    'purelib': sysconfig.get_paths()['purelib'],\n"
            "    'platlib': sysconfig.get_paths()['platlib'],\n"
            "    'stdlib': sysconfig.get_paths()['stdlib'],\n"
            "    'dynload': dyn, 'openssl_cafile': cafile}))\n")
        proc = self.run([py, "-I", "-S", "-c", script], "query %s" % py,
                        "check that %s is a working CPython >= 3.9" % py)
        try:
            info = json.loads(proc.stdout)
        except ValueError:
            raise BuildError("query %s" % py, "unexpected output %r" % one_line(proc.stdout, 80),
                             "check that %s is a working CPython >= 3.9" % py)
        if info["implementation"] != "cpython" or info["hexversion"] < 0x03090000:
            raise BuildError("interpreter %s" % py,
                             "%s %s is not supported" % (info["implementation"],
                                                         info["version"]),
                             "use CPython 3.9 or newer")
        if not info["dynload"] or not os.path.isdir(info["dynload"]):
            raise BuildError("interpreter %s" % py, "no lib-dynload directory found",
                             "use an interpreter with a standard installation layout")
        # The binary to copy, and to run from now on: sys.executable resolved,
        # which also sees through wrappers such as pyenv shims.
        binary = os.path.realpath(info["executable"] or py)
        if not is_elf(binary):
            raise BuildError("interpreter %s" % py, "%s is not an ELF binary" % binary,
                             "pass the real interpreter, as printed by "
                             "python3 -c 'import sys; print(sys.executable)'")
        self.binary = binary
        self.info = info
        self.python_desc = "CPython %s on %s" % (".".join(info["version"].split(".")[:2]),
                                                 info["machine"])

    def check_out(self):
        """Refuse to replace anything that is not an earlier build (or empty)."""
        out = self.out
        if not os.path.lexists(out):
            return
        if os.path.islink(out) or not os.path.isdir(out):
            raise BuildError("output %s" % out, "exists and is not a directory",
                             "remove it or choose another --out")
        if os.listdir(out) and not os.path.isfile(os.path.join(out, INFO)):
            raise BuildError("output %s" % out,
                             "exists, is not empty and is not a rootfs made by this script",
                             "remove it yourself or choose another --out or --name")
        owner = os.lstat(out).st_uid
        if owner != os.geteuid():
            # Root rebuilding a user's tree would leave root-owned files there; a user cannot
            # replace another's anyway, and should learn so before the build, not after it.
            raise BuildError("output %s" % out, "belongs to uid %d, not to you (uid %d)"
                             % (owner, os.geteuid()),
                             "build it as its owner, or choose another --out or --name")

    def make_layout(self):
        for d in ("usr/bin", "usr/lib", "etc") + MOUNT_POINTS:
            self.makedirs("/" + d)

    def copy_interpreter(self):
        real = self.binary
        jail_real = usr_path(real)
        self.copy_file(real, jail_real)  # an ELF file (checked): executable, its libraries listed
        self.interpreter = jail_real
        for name in ("python3", "python"):
            link = "/usr/bin/" + name
            if link != jail_real:
                self.symlink(link, os.path.relpath(jail_real, "/usr/bin"))

    def copy_shell(self):
        """A POSIX shell at /bin/sh: os.system(), os.popen() and subprocess's shell=True
        need one, and code written for a normal machine uses them. dash, when the host has
        it: small, and no more than a program could run anyway (the jail's limits and filter
        apply to it as to Python)."""
        for candidate in ("/usr/bin/dash", "/bin/dash"):
            if os.path.isfile(candidate):
                real = os.path.realpath(candidate)
                self.copy_file(real, "/usr/bin/dash")
                self.symlink("/usr/bin/sh", "dash")
                return
        self.warn("no dash on this host: the jail will have no /bin/sh (os.system and "
                  "shell=True will fail); apt-get install dash")

    def copy_shell_tools(self):
        """--shell-tools: busybox, static (it needs no library), and a link per tool."""
        if not self.args.shell_tools:
            return
        src = next((p for p in BUSYBOX if os.path.isfile(p) and is_elf(p)), None)
        if src is None:
            raise BuildError("--shell-tools", "no busybox on this host",
                             "install Debian's static one (apt-get install busybox-static), "
                             "or leave --shell-tools out")
        proc = self.run([src, "--list"], "%s --list" % src,
                        "install Debian's busybox-static")
        applets = set(proc.stdout.split())
        self.copy_file(os.path.realpath(src), "/usr/bin/busybox")
        tools = [t for t in SHELL_TOOLS if t in applets]
        for tool in tools:
            self.symlink("/usr/bin/" + tool, "busybox")  # keeps what is there (dash's sh)
        self.say("shell tools: busybox with %d of them" % len(tools))

    def copy_stdlib(self):
        stdlib = self.info["stdlib"]
        dynload = os.path.realpath(self.info["dynload"])
        real_stdlib = os.path.realpath(stdlib)
        dyn_rel = (os.path.relpath(dynload, real_stdlib)
                   if inside(dynload, real_stdlib) else None)

        def skip(rel, is_dir):
            parts = rel.split("/")
            name = parts[-1]
            if is_dir:
                if rel == dyn_rel or name in ANY_DEPTH_EXCLUDE_DIRS:
                    return True
                return len(parts) == 1 and any(
                    fnmatch.fnmatchcase(name, p) for p in STDLIB_EXCLUDE_TOP_DIRS)
            if name.endswith((".pyc", ".pyo")):
                return True   # stray bytecode: we compile our own
            return len(parts) == 1 and name in STDLIB_EXCLUDE_TOP_FILES

        self.say("copying standard library %s" % stdlib)
        jail_stdlib = usr_path(stdlib)
        self.copy_tree(stdlib, jail_stdlib, skip)
        self.compile_dirs.append(jail_stdlib)

        jail_dyn = usr_path(self.info["dynload"])
        self.copy_tree(dynload, jail_dyn, lambda rel, is_dir: is_dir or any(
            fnmatch.fnmatchcase(rel, p) for p in DYNLOAD_EXCLUDE))
        if jail_dyn not in self.compile_dirs and not inside(jail_dyn, jail_stdlib):
            self.compile_dirs.append(jail_dyn)

    def find_packages(self):
        """Ask the target interpreter where each --with package lives."""
        self.packages = []
        names = sorted(set(self.args.with_))
        if not names:
            return
        for name in names:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
                raise BuildError("--with %s" % name, "not a top-level module name",
                                 "pass the import name of a package, e.g. --with numpy")
        # find_spec locates a package without running its code.
        script = (
            "import importlib.util, json, sys\n"
            "out = {}\n"
            "for name in sys.argv[1:]:\n"
            "    try:\n"
            "        spec = importlib.util.find_spec(name)\n"
            "    except Exception as e:\n"
            "        out[name] = {'error': '%s: %s' % (type(e).__name__, e)}\n"
            "        continue\n"
            "    if spec is None:\n"
            "        out[name] = {'error': 'no module named %s' % name}\n"
            "        continue\n"
            "    out[name] = {'origin': spec.origin if spec.has_location else None,\n"
            "                 'locations': list(spec.submodule_search_locations or [])}\n"
            "print(json.dumps(out))\n")
        py = self.python
        proc = self.run([self.binary, "-I", "-c", script] + names, "look up --with packages",
                        "check that %s works" % py)
        found = json.loads(proc.stdout)
        for name in names:
            entry = found[name]
            if "error" in entry:
                raise BuildError("--with %s" % name,
                                 "%s cannot find it (%s)" % (py, entry["error"]),
                                 "install it for %s, e.g. apt-get install python3-%s, "
                                 "or drop --with %s"
                                 % (py, name.lower().replace("_", "-"), name))
            if entry["locations"]:
                sources = entry["locations"]           # package (maybe namespace)
            elif entry["origin"]:
                sources = [entry["origin"]]            # single-file module
            else:
                sources = []                           # built into the interpreter
            for src in sources:
                if not os.path.exists(src):
                    raise BuildError("--with %s" % name, "%s does not exist" % src,
                                     "reinstall the package")
            self.packages.append((name, sources))

    def copy_packages(self):
        for name, sources in self.packages:
            if not sources:
                self.say("%s is built into the interpreter, nothing to copy" % name)
            for src in sources:
                self.copy_package_path(name, src)

    def copy_package_path(self, name, src):
        self.say("adding %s from %s" % (name, src))
        jail = usr_path(os.path.abspath(src))
        if inside(jail, usr_path(self.info["stdlib"])) and os.path.lexists(self.dest(jail)):
            return  # already there as part of the standard library
        no_cache = lambda rel, is_dir: os.path.basename(rel) == "__pycache__"
        if os.path.isdir(src):
            self.copy_tree(src, jail, no_cache)
        else:
            self.copy_file(src, jail)
        self.package_compile.append(jail)
        parent = os.path.dirname(os.path.abspath(src))
        dist_names = []
        for entry in sorted(os.listdir(parent)):
            if not entry.endswith((".dist-info", ".egg-info")):
                continue
            full = os.path.join(parent, entry)
            if name in self.dist_top_levels(full, entry):
                dist_names.append(entry.split("-")[0])
                jail_entry = usr_path(full)
                if os.path.isdir(full):
                    self.copy_tree(full, jail_entry, no_cache)
                else:
                    self.copy_file(full, jail_entry)
                self.dists.append(entry.rsplit(".", 1)[0])
        # Vendored libraries of wheels repaired by auditwheel (numpy.libs).
        for libs in sorted({name + ".libs"} | {d + ".libs" for d in dist_names}):
            full = os.path.join(parent, libs)
            if os.path.isdir(full):
                self.copy_tree(full, usr_path(full))

    @staticmethod
    def dist_top_levels(full, entry):
        """Top-level import names a *.dist-info / *.egg-info provides."""
        def first_parts(lines):
            tops = set()
            for line in lines:
                p = line.split(",")[0].strip().replace("\\", "/")
                while p.startswith("../"):
                    p = p[3:]
                top = p.split("/")[0]
                if top and not top.endswith((".dist-info", ".egg-info", ".pth", ".data")):
                    tops.add(re.sub(r"(\.[^.]*)?\.(py|so|pyd|pyc)$", "", top))
            return tops

        dist = re.sub(r"[-_.]+", "_", entry.split("-")[0]).lower()
        tops = {dist}
        if os.path.isdir(full):
            for fname in ("top_level.txt", "RECORD", "installed-files.txt"):
                p = os.path.join(full, fname)
                if os.path.isfile(p):
                    with open(p, encoding="utf-8", errors="replace") as f:
                        lines = f.read().splitlines()
                    if fname == "top_level.txt":
                        return {l.strip() for l in lines if l.strip()}
                    return first_parts(lines) | tops
        return tops

    # ------------------------------------------- wheels (pip) and virtualenvs

    def check_package_inputs(self):
        """What can be checked before anything is made: files exist, the venv matches."""
        a = self.args
        for f in a.requirements:
            if not os.path.isfile(f) or not os.access(f, os.R_OK):
                raise BuildError("--requirements %s" % f, "cannot read it",
                                 "give the path of a requirements file")
        for d in a.find_links:
            if "://" not in d and not os.path.isdir(d):
                raise BuildError("--find-links %s" % d, "no such directory",
                                 "give a directory of wheels (--wheel-cache DIR fills one)")
        if a.no_index and not a.find_links and not a.wheel_cache:
            raise BuildError("--no-index", "no --find-links directory to take wheels from",
                             "add --find-links DIR, a directory of wheels (or --wheel-cache "
                             "DIR)")
        self.venv_site = None
        if a.from_venv:
            self.venv_site = rootfs_packages.read_venv(os.path.abspath(a.from_venv),
                                                       self.info["version"])
            # Root's refusal of a virtualenv others can change, before anything is built;
            # install_venv walks to it again for the descriptor it copies from.
            os.close(rootfs_packages.open_venv_site(self.venv_site, os.geteuid()))

    def site_dir(self):
        """Where packages go in the tree: the interpreter's own default install directory
        (on its sys.path), e.g. /usr/local/lib/python3.11/dist-packages on Debian."""
        return usr_path(self.info["purelib"])

    def locked_pins(self):
        """A rebuild's requirements: the pip packages of the tree it replaces, each pinned to
        its version and, when every wheel was downloaded rather than built here, to its
        wheel's hash (pip's hash-checking mode): the same wheels as before."""
        pip = [e for e in self.previous_lock["packages"] if e.get("source") == "pip"]
        hashes = all((e.get("wheel") or {}).get("sha256") and not e.get("built") for e in pip)
        return ["%s==%s%s\n" % (e["name"], e["version"], " --hash=sha256:%s"
                                 % e["wheel"]["sha256"] if hashes else "") for e in pip]

    def find_pip(self):
        """The directory of the pip package of the rootfs's interpreter, on the host: the jail
        that runs pip sees it read-only (the tree itself has no pip). find_spec locates it
        without running its code."""
        script = ("import importlib.util, json\n"
                  "spec = importlib.util.find_spec('pip')\n"
                  "print(json.dumps(list(spec.submodule_search_locations or []) if spec else []))\n")
        proc = self.run([self.binary, "-I", "-c", script], "look up pip",
                        "check that %s works" % self.python)
        try:
            dirs = json.loads(proc.stdout)
        except ValueError:
            dirs = []
        pip = next((d for d in dirs if isinstance(d, str) and
                    os.path.isfile(os.path.join(d, "__main__.py"))), None)
        if pip is None:
            raise BuildError("pip", "%s has no pip" % self.python_desc,
                             "install pip for it (Debian: apt-get install python3-pip)")
        return os.path.realpath(pip)

    def install_wheels(self):
        a = self.args
        pins = self.locked_pins() if self.previous_lock is not None else None
        if not (a.requirements or a.pip or pins):
            return
        if not a.pyjail_binary:
            raise BuildError("--requirements/--pip", "pip runs only in a jail, and no pyjail "
                             "binary was given to make one", "run it as pyjail rootfs build")
        pip_dir = self.find_pip()
        self.say("installing packages with pip, in a jail, for %s" % self.python_desc)
        self.stage = self.sibling("pip")
        os.mkdir(os.path.join(self.stage, "tmp"))
        # Copies of the requirements files, which the jail's host user can read wherever
        # the builder found them (root's own in /root).
        requirements, specs, extra = [], a.pip, []
        for i, f in enumerate(a.requirements):
            requirements.append(os.path.join(self.stage, "requirements-%d.txt" % i))
            shutil.copyfile(f, requirements[-1])
            os.chmod(requirements[-1], 0o644)
        if pins:
            requirements, specs, extra = [os.path.join(self.stage, "locked.txt")], [], \
                ["--no-deps"]   # the lock lists every distribution: exactly those
            with open(requirements[0], "w", encoding="utf-8") as f:
                f.write("".join(pins))
        host_user = None
        if os.geteuid() == 0:
            # The jail runs as a host id of its own: the staging directory, the only host
            # directory it writes to, is that id's (mode 0700); nothing else of the host is.
            uid, self.id_lease = lease_root_host_id()
            self.jail_uid = uid
            for d in (self.stage, os.path.join(self.stage, "tmp")):
                os.chown(d, uid, uid)
            host_user = "%d:%d" % (uid, uid)
        os.chmod(self.root, 0o755)   # the jail's host user reads the tree
        find_links = [d if "://" in d else os.path.abspath(d) for d in a.find_links]
        no_index = a.no_index
        if a.wheel_cache:
            cache = os.path.abspath(a.wheel_cache)
            self.fill_wheel_cache(cache, pip_dir, requirements, specs, find_links, extra,
                                  host_user)
            find_links, no_index = find_links + [cache], True
        self.run_pip_jail(pip_dir, requirements, specs, find_links, no_index, extra, host_user)
        # Everything the jail wrote is hostile: read fd-relative, never through a symlink.
        stage_fd = os.open(self.stage, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            installed = rootfs_packages.check_report(rootfs_packages.read_report(stage_fd),
                                                     a.allow_build)
            # Console scripts name a path of the jail's interpreter, and a jail runs `python -m`.
            tops = self.copy_jail_tree(stage_fd, "site", self.site_dir(),
                                       lambda rel, is_dir: rel == "bin" or
                                       os.path.basename(rel) == "__pycache__")
        finally:
            os.close(stage_fd)
        site = self.dest(self.site_dir())
        if pins:
            old_site = os.path.join(self.out, self.site_dir().lstrip("/"))
            rootfs_packages.unmark_requested(site, {
                e for e in (os.listdir(old_site) if os.path.isdir(old_site) else [])
                if os.path.exists(os.path.join(old_site, e, "REQUESTED"))}, tops)
        self.lock += rootfs_packages.lock_entries(site, "pip", installed, tops)

    def run_pip_jail(self, pip_dir, requirements, specs, find_links, no_index, extra,
                     host_user, download=False):
        """Runs pip in a jail on the tree (rootfs_packages.pip_jail_command). No pip resolution
        and no package code on this host: the jail's only network is its own loopback, and
        with an index a relay of ours that reaches only the index's hosts (--no-index: no
        network at all)."""
        a = self.args
        relay = None
        index_urls = ([a.index_url] if a.index_url else []) + list(a.extra_index_url)
        if not no_index:
            relay = self.start_relay(index_urls, find_links)
        cmd = rootfs_packages.pip_jail_command(
            a.pyjail_binary, self.root, self.interpreter, pip_dir, self.stage, requirements,
            specs, find_links, no_index, a.allow_build, extra, host_user, self.epoch,
            relay and relay.path, index_urls, relay and host_ca_file(), download)
        # What the jail writes to the host's disk (the staging directory): --install-limit,
        # and the floors of free space (rootfs_packages.DiskWatch).
        watch = rootfs_packages.DiskWatch(
            self.stage, a.install_limit, "pip download" if download else "pip install",
            os.path.dirname(self.out), self.previous_lock is not None)
        try:
            rootfs_packages.run_pip(cmd, self.python_desc, watch)
        except DiskLimitError:
            raise       # the builder stopped the jail: that is why it ended
        except BuildError as e:
            if relay and relay.stopped:
                raise DownloadLimitError(download, a.download_limit, self.previous_lock is not None) from None
            if relay and relay.refused:
                e.why += "; the relay to the index refused %s" % ", ".join(relay.refused)
            raise
        finally:
            if relay:
                relay.close()
                remove_jail_tree(self.relay_dir, self.warn)
                self.relay_dir = None
        # Cut off, pip may still end well, with a file cut short (pip before 25.1 does not
        # check a download's length): nothing of this run is used.
        if relay and relay.stopped:
            raise DownloadLimitError(download, a.download_limit, self.previous_lock is not None)

    def fill_wheel_cache(self, cache, pip_dir, requirements, specs, find_links, extra,
                         host_user):
        """--wheel-cache DIR: the wheels the requirements need, downloaded by pip in a jail
        (from the cache itself when it has them all, offline; else from the index), into the
        staging directory; the new ones are then moved into DIR, which stays the builder's own
        (the jail never writes there)."""
        if not os.path.isdir(cache):
            try:
                os.makedirs(cache, mode=0o755)
            except OSError as e:
                raise BuildError("--wheel-cache %s" % cache, e.strerror,
                                 "give a directory you can write")
        cache_fd = open_own_directory(cache, "--wheel-cache %s" % cache)
        self.say("downloading wheels with pip, in a jail, into %s" % cache)
        download = os.path.join(self.stage, "download")
        try:
            self.run_pip_jail(pip_dir, requirements, specs, find_links + [cache], True, extra,
                              host_user, download=True)
        except DiskLimitError:
            raise       # nothing of it is cached: what it wrote may be cut short
        except BuildError as offline:
            stopped = offline
            if not self.args.no_index:
                remove_jail_tree(download, self.warn)
                try:
                    self.run_pip_jail(pip_dir, requirements, specs, find_links + [cache], False,
                                      extra, host_user, download=True)
                    stopped = None
                except (DownloadLimitError, DiskLimitError):
                    raise       # nothing of it is cached, and the install would only fail
                except BuildError as online:
                    stopped = online
            if stopped is not None:
                # The download runs no package code (rootfs_packages.NO_EXEC): what needs a
                # build is not cached, and the install says what is wrong, if anything is.
                self.warn("the wheel cache takes only wheels downloaded without running any "
                          "package's code; the download stopped (%s), so what is left is "
                          "not cached" % one_line(stopped.why, 200))
        stage_fd = os.open(self.stage, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            self.take_wheels(stage_fd, "download", cache_fd)
        finally:
            os.close(stage_fd)
            os.close(cache_fd)

    def take_wheels(self, stage_fd, name, cache_fd):
        """Move the wheels the download jail left in `name` into the cache: regular files named
        as wheels, opened without following a symlink, copied as the builder's own files; any
        other entry is not touched. A name already in the cache keeps its file."""
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            dfd = os.open(name, flags | os.O_DIRECTORY, dir_fd=stage_fd)
        except FileNotFoundError:
            return
        try:
            for entry in sorted(os.listdir(dfd)):
                if not rootfs_packages.WHEEL_FILE_RE.match(entry) or \
                        lexists_at(cache_fd, entry):
                    continue
                try:
                    fd = os.open(entry, flags | os.O_NONBLOCK, dir_fd=dfd)
                except OSError:
                    continue
                with os.fdopen(fd, "rb") as f:
                    st = os.fstat(f.fileno())
                    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                        continue
                    tmp = ".%s.part" % entry
                    # A .part left by an interrupted copy is replaced; none is followed (the
                    # cache is the builder's alone: open_own_directory).
                    if lexists_at(cache_fd, tmp):
                        os.unlink(tmp, dir_fd=cache_fd)
                    out_fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW |
                                     os.O_CLOEXEC, 0o644, dir_fd=cache_fd)
                    with os.fdopen(out_fd, "wb") as out:
                        shutil.copyfileobj(f, out, 1 << 20)
                        os.fchmod(out.fileno(), 0o644)
                    os.rename(tmp, entry, src_dir_fd=cache_fd, dst_dir_fd=cache_fd)
        finally:
            os.close(dfd)

    def start_relay(self, index_urls, find_links):
        """The relay the pip jail reaches its index through (rootfs_relay.py): a Unix socket
        in a directory of its own beside the output, only root's (or the builder's) to change."""
        import rootfs_relay
        try:
            allowed = rootfs_relay.allowed_hosts(index_urls, find_links)
        except ValueError as e:
            raise BuildError("index %s" % e, "not an https:// URL with a host name",
                             "give the index as https://HOST[:PORT]/PATH")
        self.relay_dir = self.sibling("pip")
        os.chmod(self.relay_dir, 0o755)
        path = os.path.join(self.relay_dir, "relay.sock")
        # A private address is reached only for a host the user named as an index.
        named = {h for h in allowed} if index_urls else set()
        relay = rootfs_relay.Relay(path, allowed, named, owner=self.jail_uid,
                                   download_limit=self.args.download_limit)
        relay.path = path
        return relay

    def copy_jail_tree(self, stage_fd, name, path, skip):
        """Copy directory `name` of the staging directory, as the pip jail left it, to in-jail
        `path`; returns the top-level names copied. The jail chose every name and kind in it:
        each entry is opened relative to its parent's descriptor, never through a symlink, so
        a link planted there (to /etc/shadow, to root's files) makes the builder read nothing
        of the host. Only directories and regular files with one link are copied; a wheel has
        nothing else, so a symlink, a hard link or a device is left out, with a warning."""
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_DIRECTORY
        try:
            top = os.open(name, flags, dir_fd=stage_fd)
        except FileNotFoundError:
            return set()
        tops, dropped = self.copy_untrusted_tree(top, path, skip, "what pip installed")
        if dropped:
            self.warn("left out of the tree what pip's jail made that a wheel cannot hold "
                      "(symlinks, hard links, special files): %s"
                      % one_line(", ".join(sorted(dropped)), 200))
        return tops

    def copy_untrusted_tree(self, top, path, skip, what, entry_check=None, link_check=None,
                            hard_links=False):
        """Copy the directory open at descriptor `top` (closed here) to in-jail `path`,
        without following a symlink anywhere: (top-level names copied, [what was left out]).
        The tree's owner chose its depth and width: it is walked by descriptor, one directory
        open at a time (rootfs_rebuild.DirCursor), and refused deeper than MAX_TREE_DEPTH.
        entry_check(rel, stat) may refuse an entry (raises); link_check(rel, target) says
        whether a symlink is kept as it is (else it is left out); hard_links: whether a file
        with more than one link is copied (a virtualenv's tools link files from their
        caches; a jail's output has no reason to). Fails with a BuildError naming `what`."""
        tops, dropped = set(), []
        cursor, r = None, ""
        self.copying_packages = True
        try:
            cursor = rootfs_rebuild.DirCursor(top)
            self.makedirs(path)
            while True:
                entry = cursor.next()
                if entry is None:
                    if cursor.depth == 0:
                        break
                    cursor.up()
                    continue
                r = cursor.rel(entry)
                st = os.stat(entry, dir_fd=cursor.fd, follow_symlinks=False)
                is_dir = stat.S_ISDIR(st.st_mode)
                if skip(r, is_dir):
                    continue
                if entry_check:
                    entry_check(r, st)
                if is_dir:
                    if cursor.depth >= MAX_TREE_DEPTH:
                        raise BuildError(what, "%s: directories nested more than %d deep, "
                                         "which no package needs (the builder copies no "
                                         "deeper)" % (one_line(r, 100), MAX_TREE_DEPTH),
                                         "leave out the package that made them")
                    self.makedirs(path + "/" + r)
                    cursor.down(entry)
                elif stat.S_ISLNK(st.st_mode) and link_check and \
                        link_check(r, os.readlink(entry, dir_fd=cursor.fd)):
                    self.symlink(path + "/" + r, os.readlink(entry, dir_fd=cursor.fd))
                elif not stat.S_ISREG(st.st_mode) or not self.copy_jail_file(
                        cursor.fd, entry, path + "/" + r, hard_links):
                    dropped.append(r)
                    continue
                tops.add(r.split("/")[0])
        except OSError as e:
            raise BuildError(what, "cannot copy %s (%s)" % (one_line(r or ".", 100),
                                                            e.strerror or e),
                             "check free space, or leave out the package that has it")
        finally:
            if cursor:
                cursor.close()
            self.copying_packages = False
        if self.site_dir() not in self.package_compile:
            self.package_compile.append(self.site_dir())
        return tops, dropped

    def copy_jail_file(self, dfd, entry, path, hard_links=False):
        """One regular file the jail wrote, to in-jail `path`; False if it is not one."""
        try:
            fd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=dfd)
        except OSError:
            return False
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or (st.st_nlink != 1 and not hard_links):
                return False
            d = self.dest(path)
            if os.path.lexists(d):
                return True
            with open(d, "xb") as out:
                shutil.copyfileobj(f, out, 1 << 20)
        elf = is_elf(d)
        os.chmod(d, 0o755 if (st.st_mode & 0o111) or elf else 0o644)
        if elf:
            self.package_elfs.add(d)   # read, not run through ldd: not the host's own file
        return True

    def install_venv(self):
        if not self.venv_site:
            return
        venv = self.args.from_venv
        self.say("adding the packages of %s" % venv)
        site_fd = rootfs_packages.open_venv_site(self.venv_site, os.geteuid())
        try:
            taken = {n.lower() for n in os.listdir(self.dest(self.site_dir()))} \
                if os.path.isdir(self.dest(self.site_dir())) else set()
            for entry in sorted(os.listdir(site_fd)):
                if entry.lower() in taken and not rootfs_packages.venv_skip(entry, True):
                    raise BuildError("--from-venv %s" % venv,
                                     "%s is also installed from --requirements/--pip" % entry,
                                     "take each package from one place")
            before = {e["name"] for e in self.lock}
            check = rootfs_packages.VenvCheck(venv, os.geteuid(), site_fd)
            tops, dropped = self.copy_untrusted_tree(
                os.dup(site_fd), self.site_dir(), rootfs_packages.venv_skip,
                "--from-venv %s" % venv, check.entry, check.link, hard_links=True)
        finally:
            os.close(site_fd)
        if dropped:
            self.warn("left out of the tree what a wheel cannot hold (special files) in %s: %s"
                      % (venv, one_line(", ".join(sorted(dropped)), 200)))
        # Host files too, but each distribution's RECORD lists the hashes of its files: its
        # own hash tells whether the virtualenv changed (rootfs_sources.check). Read from the
        # copy in the tree, never again through the virtualenv's paths.
        site = self.dest(self.site_dir())
        entries = [e for e in rootfs_packages.lock_entries(site, "venv", None, tops)
                   if e["name"] not in before and not rootfs_packages.venv_skip(e["name"], True)]
        for entry, name, _ in rootfs_packages.dist_infos(site):
            if entry in tops and name not in before and \
                    not rootfs_packages.venv_skip(entry, True):
                self.venv_dists[entry] = rootfs_packages.record_digest(
                    os.path.join(site, entry))[0]
        self.lock += entries

    def add_matplotlib_cache(self):
        """matplotlib's font cache and rc file, and the hook that makes it read them: the cache
        is built by matplotlib itself, in a jail on the new tree (its code runs nowhere else),
        so it lists the fonts as the jail sees them."""
        site = self.site_dir()
        if not os.path.isfile(self.dest(site + "/matplotlib/__init__.py")):
            return
        pyjail = self.args.pyjail_binary
        if not pyjail:
            self.warn("matplotlib's font cache is not built (only `pyjail rootfs build` runs "
                      "it in a jail): every run that imports it builds it again")
            return
        self.say("building matplotlib's font cache in a jail on the new tree")
        os.chmod(self.root, 0o755)   # the jail's host user reads it (nobody, for root)
        # PYTHONHASHSEED: the font list comes from a set, in hash order; fixed, it is
        # reproducible. MPLCONFIGDIR: a private, writable /tmp for matplotlib to write into.
        # --output-limit: the package's code runs in that jail and its stdout is read into the
        # builder's memory; a font list is a few hundred KiB, a flood is cut off at 16 MiB.
        # Not --quiet: it would hide pyjail's message for that (and for a timeout), which is
        # the last line of stderr that a failure is reported with.
        cmd = [pyjail, "--profile", "strict", "--rootfs", self.root,
               "--output-limit", "16M",
               "--env", "PYTHONHASHSEED=0", "--env", "MPLCONFIGDIR=/tmp/matplotlib",
               "--", "python", "-c", MATPLOTLIB_FONTLIST]
        fix = ("check that this host can run jails (pyjail doctor), and, as root, that the "
               "jail's host user (nobody) can read the output directory %s"
               % os.path.dirname(self.out))
        proc = self.run(cmd, "build matplotlib's font cache in a jail", fix)
        try:
            out = json.loads(proc.stdout)
            name = out["name"]
            if not re.match(r"^fontlist-v[0-9A-Za-z.]+\.json$", name) or \
                    "_version" not in json.loads(out["text"]):
                raise ValueError(name)
        except (ValueError, KeyError, TypeError):
            raise BuildError("build matplotlib's font cache in a jail",
                             "unexpected output %r" % one_line(proc.stdout, 80), fix)
        self.write_text(MATPLOTLIB_DIR + "/" + name, out["text"])
        self.write_text(MATPLOTLIB_DIR + "/matplotlibrc", "backend: Agg\n")
        here = os.path.dirname(os.path.realpath(__file__))
        self.copy_file(os.path.join(here, "pyjail_matplotlib.py"),
                       "%s/%s.py" % (site, MATPLOTLIB_HOOK))
        self.write_text("%s/%s.pth" % (site, MATPLOTLIB_HOOK), "import %s\n" % MATPLOTLIB_HOOK)
        self.compile(["%s/%s.py" % (site, MATPLOTLIB_HOOK)], strict=True)

    def resolve_package_libraries(self):
        """The libraries the packages' ELF files need, from their DT_NEEDED entries:
        vendored ones (NAME.libs, found through $ORIGIN) are in the tree already, the
        host's (libstdc++, libgomp, ...) are copied with the interpreter's."""
        if not self.package_elfs:
            return
        resolver = rootfs_elf.Resolver(self.root)
        # (file, DT_RPATH directories of the files that load it): a library in the tree is
        # looked at once per chain of loaders, whose DT_RPATH the loader searches too.
        pending = [(p, ()) for p in sorted(self.package_elfs)]
        seen, missing, found_once = set(), [], set()
        while pending:
            path, loaders_rpath = pending.pop()
            if (path, loaders_rpath) in seen:
                continue
            seen.add((path, loaders_rpath))
            info = resolver.info(path)
            if info is None:
                continue
            for name in info.needed:
                found = resolver.resolve(path, name, info, loaders_rpath)
                if found is None:
                    missing.append((path, name))
                elif inside(os.path.realpath(found), self.root):
                    chain = tuple(resolver.rpath_dirs(path, info)) + loaders_rpath
                    # Each directory once: a loop of libraries with $ORIGIN paths must end.
                    chain = tuple(dict.fromkeys(os.path.normpath(d) for d in chain))
                    pending.append((os.path.realpath(found), chain))
                    found_once.add((path, name))
                elif not os.stat(found).st_mode & stat.S_IROTH:
                    # A host library not every user may read stays out of a tree every jail
                    # reads, whoever builds it.
                    missing.append((path, name))
                else:
                    self.package_libs.add(found)
                    found_once.add((path, name))
        # Missing only if no chain of loaders finds it.
        for path, name in sorted(set(missing) - found_once):
            self.warn("%s needs %s, which this host does not have: importing it fails in the "
                      "jail as it does on the host (install the library, then rebuild)"
                      % ("/" + os.path.relpath(path, self.root), name))

    # ------------------------------------------------------------ libraries

    @staticmethod
    def ldd(path):
        env = {"PATH": os.environ.get("PATH", os.defpath), "LC_ALL": "C"}
        try:
            proc = subprocess.run(["ldd", path], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env=env, universal_newlines=True)
        except OSError as e:
            raise BuildError("ldd %s" % path, "cannot run ldd: %s" % e.strerror,
                             "install ldd (package libc-bin)")
        text = proc.stdout + proc.stderr
        if proc.returncode != 0:
            if "not a dynamic executable" in text or "statically linked" in text:
                return []
            raise BuildError("ldd %s" % path, one_line(text or "exit status %d"
                                                       % proc.returncode),
                             "check that the file is a readable ELF object")
        deps = []
        for line in proc.stdout.splitlines():
            line = line.strip()
            m = re.match(r"^(\S+) => not found$", line)
            if m:
                raise BuildError("ldd %s" % path, "library %s not found" % m.group(1),
                                 "install the package that provides %s" % m.group(1))
            m = re.match(r"^(\S+) => (/\S+) \(0x[0-9a-fA-F]+\)$", line)
            if m:
                deps.append(m.group(2))
                continue
            m = re.match(r"^(/\S+) \(0x[0-9a-fA-F]+\)$", line)
            if m:
                deps.append(m.group(1))   # the dynamic loader
        return deps

    def copy_libraries(self):
        self.say("resolving shared libraries of %d ELF files" % len(self.elf_sources))
        done = set()
        libs = set(self.package_libs)
        pending = sorted(self.elf_sources | {os.path.realpath(l) for l in self.package_libs})
        extra_added = False
        with ThreadPoolExecutor(max_workers=4) as pool:
            while pending:
                done.update(pending)
                for deps in pool.map(self.ldd, pending):
                    libs.update(deps)
                pending = []
                if not extra_added:
                    extra_added = True
                    dirs = sorted({os.path.dirname(p) for p in libs
                                   if os.path.basename(p).startswith("libc.so")})
                    for name in DLOPENED_LIBS:
                        hit = next((os.path.join(d, name) for d in dirs
                                    if os.path.exists(os.path.join(d, name))), None)
                        if hit is None and dirs:
                            raise BuildError("find %s" % name,
                                             "not next to libc in %s" % (dirs or "?"),
                                             "install it (Debian: libgcc-s1)")
                        if hit is None:
                            continue    # no glibc: nothing dlopens it
                        libs.add(hit)
                        if os.path.realpath(hit) not in done:
                            pending.append(os.path.realpath(hit))
        self.lib_paths = set()
        for lib in sorted(libs):
            real = os.path.realpath(lib)
            jail_real = usr_path(real)
            jail_name = usr_path(lib)
            self.lib_paths.add(jail_name)
            self.copy_file(real, jail_real)
            if jail_name != jail_real:
                self.symlink(jail_name, os.path.relpath(
                    jail_real, os.path.dirname(jail_name)))
        for name, target in TOP_SYMLINKS:
            if os.path.isdir(self.dest("/" + target)):
                self.symlink("/" + name, target)

    def write_ld_cache(self):
        """/etc/ld.so.cache for the libraries copied in, as on any installed
        system. Without it the dynamic loader of every program started in the
        jail probes the hwcaps and tls subdirectories of the library directory
        for its first library (a dozen failed lookups; cheap, but noise in
        every trace of a start)."""
        dirs = sorted({os.path.dirname(p) for p in self.lib_paths})
        self.write_text("/etc/ld.so.conf", "".join(d + "\n" for d in dirs))
        ldconfig = shutil.which("ldconfig") or next(
            (p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.path.exists(p)), None)
        if ldconfig is None:
            self.warn("no ldconfig on this host: the rootfs gets no /etc/ld.so.cache, and "
                      "every start in the jail searches for its libraries (apt-get install "
                      "libc-bin)")
            return
        # -X: the sonames are in place already; -r: everything relative to the rootfs,
        # which needs no privilege (no chroot).
        self.run([ldconfig, "-X", "-r", self.root], "ldconfig -r",
                 "check that ldconfig can read %s" % self.root)

    # -------------------------------------------------------------- bytecode

    def compile(self, dirs, strict):
        if not dirs:
            return
        # Reproducible bytecode:
        # - PYTHONHASHSEED=0: before 3.11, marshal writes (frozen)sets, e.g.
        #   the constant in `x in {"a", "b"}`, in hash order, which changes
        #   from run to run with randomised string hashing (measured: 22 of
        #   the 3.9 stdlib's pyc files differ between two builds without it).
        #   3.11 sorts them, so this is a no-op there.
        # - -j 1: marshal only emits back-references for objects whose
        #   refcount is > 1, and refcounts can depend on what the same
        #   process compiled before, so with parallel workers the bytes could
        #   depend on scheduling. No difference was observed with -j 2, but
        #   one process compiles the whole stdlib in about a second anyway.
        # - --invalidation-mode unchecked-hash: the pyc records a hash of the
        #   source instead of its mtime and size, and the interpreter never
        #   looks at the source to validate it.
        # - -s ROOT -p /: co_filename is the in-jail path
        #   (/usr/lib/python3.11/os.py), not the build directory.
        env = {"PATH": os.environ.get("PATH", os.defpath),
               "PYTHONHASHSEED": "0", "LC_ALL": "C.UTF-8"}
        cmd = [self.binary, "-B", "-s", "-m", "compileall", "-q", "-j", "1",
               "-o", str(PYC_OPTIMIZATION), "--invalidation-mode", "unchecked-hash",
               "-s", self.root, "-p", "/"] + [self.dest(d) for d in dirs]
        # Attack: `python -m` puts its working directory first on sys.path, so a
        # py_compile.py (or any module compileall imports) in the directory the builder was
        # started from would run here, on the host, as root when root builds. -I would
        # drop PYTHONHASHSEED too (and with it reproducible .pyc files): the module runs
        # from /, where only root writes, instead.
        proc = self.run(cmd, "byte-compile", "", env=env, check=False, cwd="/")
        if proc.returncode == 0:
            return
        errors = [l for l in (proc.stdout + proc.stderr).splitlines()
                  if l.startswith("***") or "Error" in l]
        why = one_line(errors[0] if errors else proc.stderr or proc.stdout)
        why = why.replace(self.root, "")
        if strict:
            raise BuildError("byte-compile %s" % " ".join(dirs), why,
                             "check that %s can compile its own standard library"
                             % self.python)
        self.warn("some files of --with packages did not compile (%s); "
                  "they stay source-only" % why)

    # ------------------------------------------------------------------- etc

    def write_etc(self):
        uid, gid = self.args.jail_uid, self.args.jail_gid
        self.write_text("/etc/passwd",
                        "root:x:0:0:root:/root:/usr/sbin/nologin\n"
                        "jail:x:%d:%d:pyjail sandbox user:/tmp:/bin/sh\n"
                        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
                        % (uid, gid))
        self.write_text("/etc/group",
                        "root:x:0:\n"
                        "jail:x:%d:\n"
                        "nogroup:x:65534:\n" % gid)
        # DNS after the files: under --net none the resolver's socket is refused by the
        # filter, which pyjail sees and names in its hint (a lookup in the files alone fails
        # without a syscall, as if the name did not exist).
        self.write_text("/etc/nsswitch.conf",
                        "passwd: files\n"
                        "group: files\n"
                        "hosts: files dns\n")
        self.write_text("/etc/hosts",
                        "127.0.0.1\tlocalhost\n"
                        "::1\tlocalhost\n"
                        "127.0.1.1\tpyjail\n")
        # No resolver: a jail has no network but with --net allow, whose mount plan binds its
        # own resolv.conf (the supervisor's 127.0.0.1:53) over this file.
        self.write_text("/etc/resolv.conf", "")
        info = self.info
        self.write_text("/" + INFO, "".join("%s=%s\n" % kv for kv in (
            ("NAME", '"pyjail rootfs"'),
            ("BUILDER_VERSION", '"%s"' % BUILDER_VERSION),
            ("PYTHON_IMPLEMENTATION", info["implementation"]),
            ("PYTHON_VERSION", info["version"]),
            ("PYTHON", '"%s"' % self.interpreter),
            ("STDLIB", '"%s"' % usr_path(info["stdlib"])),
            ("PYC_INVALIDATION_MODE", "unchecked-hash"),
            ("PYC_OPTIMIZATION", str(PYC_OPTIMIZATION)),
            ("WITH", '"%s"' % " ".join(sorted(set(self.args.with_)))),
            ("DISTRIBUTIONS", '"%s"' % " ".join(sorted(set(self.dists)))),
            ("PACKAGES", '"%s"' % " ".join("%s-%s" % (e["name"], e["version"])
                                           for e in self.lock)),
            ("SITE_PACKAGES", '"%s"' % self.site_dir()),
            ("CA_CERTIFICATES", '"%s"' % self.ca_certificates),
            ("JAIL_UID", str(uid)),
            ("JAIL_GID", str(gid)),
            ("SOURCE_DATE_EPOCH", str(self.epoch)),
        )))
        # The lock: every distribution that went in, with the hashes of its wheel and of
        # its RECORD (which lists each installed file's hash). No host paths: the same
        # inputs give the same bytes.
        a = self.args
        requested = []
        for f in a.requirements:
            with open(f, encoding="utf-8", errors="replace") as rf:
                requested += [l.strip() for l in rf if l.strip() and not l.startswith("#")]
        requested = {"requirements": requested, "pip": list(a.pip),
                     "from_venv": bool(a.from_venv), "with": sorted(set(a.with_))}
        if self.previous_lock is not None:
            requested = self.previous_lock["requested"]   # a rebuild asked for the same
        lock = {
            "lock_version": rootfs_packages.LOCK_VERSION,
            "python": info["version"],
            "site_packages": self.site_dir(),
            "requested": requested,
            "packages": self.lock + [{"name": d.split("-")[0], "version": d.split("-", 1)[-1],
                                      "source": "with", "wheel": None,
                                      "record_sha256": None, "files": None}
                                     for d in sorted(set(self.dists))],
        }
        self.write_text("/" + rootfs_packages.LOCK,
                        json.dumps(lock, indent=2, sort_keys=True) + "\n")

    # ---------------------------------------------------------- finalising

    def finalize(self):
        """Normalise modes, write the manifests, count, then set mtimes."""
        files, links = [], []
        total = 0
        for dirpath, dirnames, filenames in os.walk(self.root):
            os.chmod(dirpath, 0o755)
            for name in dirnames + filenames:
                full = os.path.join(dirpath, name)
                rel = "./" + os.path.relpath(full, self.root)
                if "\n" in rel or "\\" in rel or " -> " in rel:
                    raise BuildError("manifest", "file name %r cannot be listed" % rel,
                                     "leave the package with that file out")
                st = os.lstat(full)
                if stat.S_ISLNK(st.st_mode):
                    links.append((rel, os.readlink(full)))
                elif stat.S_ISREG(st.st_mode):
                    mode = 0o755 if st.st_mode & 0o111 else 0o644
                    if stat.S_IMODE(st.st_mode) != mode:
                        os.chmod(full, mode)
                    files.append(rel)
                    total += st.st_size
                elif not stat.S_ISDIR(st.st_mode):
                    raise BuildError("finalise", "unexpected special file %s" % rel,
                                     "this is a bug in build-rootfs.py")
        files.sort()
        lines = []
        for rel in files:
            h = hashlib.sha256()
            with open(os.path.join(self.root, rel), "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            lines.append("%s  %s\n" % (h.hexdigest(), rel))
        # Where the host files came from (its own hash is in the manifest like the lock's).
        self.write_sources({rel[1:]: l.split("  ", 1)[0] for rel, l in zip(files, lines)})
        with open(self.dest("/" + rootfs_sources.SOURCES), "rb") as f:
            lines.append("%s  ./%s\n" % (hashlib.sha256(f.read()).hexdigest(),
                                         rootfs_sources.SOURCES))
            total += os.fstat(f.fileno()).st_size
        self.write_text("/" + SYMLINKS,
                        "".join("%s -> %s\n" % l for l in sorted(links)))
        with open(self.dest("/" + SYMLINKS), "rb") as f:
            lines.append("%s  ./%s\n" % (hashlib.sha256(f.read()).hexdigest(), SYMLINKS))
            total += os.fstat(f.fileno()).st_size
        lines.sort(key=lambda l: l.split("  ", 1)[1])
        self.write_text("/" + MANIFEST, "".join(lines))
        total += os.path.getsize(self.dest("/" + MANIFEST))
        self.nfiles = len(files) + 3
        self.nbytes = total
        # mtimes last: children before their directory, the root at the end.
        t = (self.epoch, self.epoch)
        for dirpath, dirnames, filenames in os.walk(self.root, topdown=False):
            for name in filenames + dirnames:
                os.utime(os.path.join(dirpath, name), t, follow_symlinks=False)
            os.utime(dirpath, t)

    def write_sources(self, digests):
        """etc/pyjail-rootfs.sources.json: where each host file came from (rootfs_sources.py)
        and what a rebuild repeats (rootfs_rebuild.inputs)."""
        venv = (self.venv_site, self.venv_dists) if self.venv_site else None
        rec = rootfs_sources.record(self.host_files, digests, self.pyjail_files, venv)
        rec["inputs"] = rootfs_rebuild.inputs(self.args, self.epoch)
        self.write_text("/" + rootfs_sources.SOURCES,
                        json.dumps(rec, indent=2, sort_keys=True) + "\n")

    def install(self):
        """Move the finished tree to --out, replacing an earlier build. Jails running in the
        earlier tree keep it (rootfs_rebuild.retire)."""
        out, tmp = self.out, self.root
        self.check_out()
        rootfs_rebuild.sweep(out, self.say, ours, point_out=False)   # said at the start
        if not os.path.lexists(out):
            os.rename(tmp, out)
            self.root = None
            return
        # The previous tree, which the swap puts at DIR.pyjail-tmp-XXXXXXXX, stays locked until
        # retire() is done with it: another build's sweep would take it for a killed build's.
        # Never waited for: anyone who can read the tree can hold a lock on it (a jail's
        # program, whose / it is), and would hold the build up for as long as it liked. If
        # the lock is taken, a concurrent sweep may remove the old tree first, which is what
        # retire() would have done (sweep too keeps a tree a jail has mounted).
        old_fd = os.open(out, rootfs_rebuild.DIR_FLAGS)
        self.locks.append(old_fd)
        try:
            fcntl.flock(old_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            pass
        if not exchange(tmp, out):
            # No renameat2 (old kernel or libc): two renames, with a short
            # moment where DIR does not exist.
            old = tmp + ".old"
            os.rename(out, old)
            try:
                os.rename(tmp, out)
            except OSError:
                os.rename(old, out)
                raise
            tmp = old
        self.root = None
        rootfs_rebuild.retire(tmp, out, self.say)
        self.cleanup()

    # ------------------------------------------------------------------ main

    def copy_locale(self):
        """The C.UTF-8 locale data, so LANG=C.UTF-8 (the jail's default) names a real locale
        and locale.setlocale() works; glibc does not build it in."""
        src = "/usr/lib/locale/C.utf8"
        if os.path.isdir(src):
            self.copy_tree(src, src)
        else:
            self.warn("no %s on this host: the jail will have no C.UTF-8 locale data" % src)

    def copy_zoneinfo(self):
        """Time zone data, so zoneinfo.ZoneInfo("Europe/Paris") works (1.3 MiB)."""
        if not os.path.isdir(ZONEINFO):
            self.warn("no %s on this host: zoneinfo will find no time zones in the jail "
                      "(apt-get install tzdata)" % ZONEINFO)
            return
        self.copy_tree(ZONEINFO, ZONEINFO, lambda rel, is_dir: rel in ZONEINFO_EXCLUDE)

    def ca_tree_path(self):
        """(where the tree's OpenSSL reads its CA bundle by default, None) or (None, why not)."""
        cafile = self.info.get("openssl_cafile")
        if not cafile:
            return None, "%s has no ssl module" % self.python_desc
        path = usr_path(cafile)
        if not os.path.isabs(path) or os.path.normpath(path) != path:
            return None, "its OpenSSL's CA file %r is not a plain absolute path" % cafile
        if path.split("/")[1] in MOUNT_POINTS:
            # /tmp, /work, ...: what a jail mounts there would hide it.
            return None, "its OpenSSL reads its CA bundle from %s, where a jail mounts a " \
                         "directory of its own" % cafile
        return path, None

    def check_ca_input(self):
        """A bundle given with --ca-certificates, checked before anything is built: a bad one
        fails at once, in one line, not after the tree was copied."""
        if not self.args.ca_certificates or self.args.no_ca_certificates:
            return
        what = "--ca-certificates %s" % self.args.ca_certificates
        data, real = read_ca_bundle(self.args.ca_certificates, what, os.geteuid())
        with tempfile.TemporaryDirectory(prefix="pyjail-ca-") as d:
            copy = os.path.join(d, "cert.pem")
            with open(copy, "xb") as f:
                f.write(data)
            stats = self.count_ca_certificates(copy, what, real)
        self.ca_input = (data, real, stats)

    def count_ca_certificates(self, path, what, real):
        """What the interpreter's OpenSSL loads from the bundle at `path` ({"x509": N, ...}), or
        BuildError when it loads none (OpenSSL skips a default file it cannot read, silently)."""
        proc = self.run([self.binary, "-I", "-S", "-c", CA_COUNT, path], "count CA certificates",
                        "check that %s can load certificates" % self.python)
        try:
            stats = json.loads(proc.stdout)
        except ValueError:
            stats = {"error": one_line(proc.stdout, 80)}
        if "error" in stats or not stats.get("x509"):
            raise BuildError(what, "OpenSSL reads no certificate from %s (%s)" % (
                real, stats.get("error", "none loaded")), "give a file of PEM certificates")
        return stats

    def copy_ca_certificates(self):
        """The host's CA bundle (or --ca-certificates FILE), as a regular file with its content,
        where the tree's OpenSSL looks by default, so that ssl.create_default_context() (urllib,
        http.client, asyncio, ...) verifies servers in a jail as the host's Python does. One
        file: OpenSSL reads every certificate in it, and the hashed directory beside it (capath,
        a link per certificate) would add nothing. The bundle is public data, but it is the
        host's trust decision copied into the tree: its hash is recorded with the other host
        files, so `pyjail rootfs info`, doctor and `rebuild --if-stale` see when the host's
        bundle changes, and a rebuild takes the new one."""
        a = self.args
        if a.no_ca_certificates:
            return
        path, why = self.ca_tree_path()
        given = "--ca-certificates %s" % a.ca_certificates if a.ca_certificates else None
        if path is None:
            if given:
                raise BuildError(given, why, "build it without: --no-ca-certificates")
            (self.say if not self.info.get("openssl_cafile") else self.warn)(
                "no CA certificates in the tree: %s" % why)
            return
        src = a.ca_certificates or next((f for f in (self.info["openssl_cafile"],) +
                                         HOST_CA_BUNDLES if os.path.isfile(f)), None)
        if src is None:
            self.warn("no CA certificates on this host (%s): HTTPS in the jail cannot verify "
                      "any server (apt-get install ca-certificates and rebuild, or give "
                      "--ca-certificates FILE; --no-ca-certificates builds without and says "
                      "nothing)" % self.info["openssl_cafile"])
            return
        what = given or "CA certificates %s" % src
        # A given bundle was read and counted before the build (check_ca_input): the same bytes.
        data, real, stats = self.ca_input or (read_ca_bundle(src, what, os.geteuid()) + (None,))
        d = self.dest(path)
        self.makedirs(os.path.dirname(path))
        if os.path.lexists(d) or not inside(os.path.realpath(d), os.path.realpath(self.root)):
            raise BuildError(what, "the tree has %s already" % path,
                             "this is a bug in build-rootfs.py")
        with open(d, "xb") as f:
            f.write(data)
        os.chmod(d, 0o644)
        stats = stats or self.count_ca_certificates(d, what, real)
        self.host_files[path] = real
        self.ca_certificates = path
        self.say("CA certificates: %d from %s at %s" % (stats["x509"], real, path))

    def copy_ldconfig(self):
        """/sbin/ldconfig, for ctypes.util.find_library(): it lists the libraries of the
        tree's /etc/ld.so.cache (`ldconfig -p`). It can change nothing: the root is
        read-only."""
        src = next((p for p in LDCONFIG if os.path.isfile(p) and is_elf(p)), None)
        if src is None:
            self.warn("no ldconfig binary on this host: ctypes.util.find_library() will "
                      "find nothing in the jail (apt-get install libc-bin)")
            return
        self.copy_file(os.path.realpath(src), "/usr/bin/ldconfig")

    def copy_session_server(self):
        """The in-jail half of the Python package's Session, importable as
        pyjail_server (with pyjail_spawn and pyjail_wire) from /usr/lib/pyjail
        (the driver sends its own copies when these are missing or differ).
        Found in the source tree, or next to the installed builder."""
        for dst, src in session_server_files().items():
            if not os.path.isfile(src):
                self.warn("no %s: the rootfs gets no session server" % os.path.normpath(src))
                return
        for dst, src in session_server_files().items():
            self.copy_file(src, dst)
            # pyjail's file, not the host's: its record is compared with the copy the pyjail
            # installed now would put in, wherever that is.
            del self.host_files[dst]
            self.pyjail_files[dst] = rootfs_sources.file_sha256(src)
        self.compile_dirs.append("/usr/lib/pyjail")

    def build(self):
        start = time.monotonic()
        sde = os.environ.get("SOURCE_DATE_EPOCH")
        if sde is None:
            self.epoch = DEFAULT_EPOCH
        elif re.match(r"^[0-9]+$", sde):
            self.epoch = int(sde)
        else:
            raise BuildError("SOURCE_DATE_EPOCH", "%r is not a number of seconds" % sde,
                             "unset it or set it to an integer")
        self.query_python()
        self.find_packages()
        self.check_package_inputs()
        self.check_ca_input()
        self.check_out()
        parent = os.path.dirname(self.out)
        try:
            missing = parent
            while not os.path.exists(os.path.dirname(missing)):
                missing = os.path.dirname(missing)
            if not os.path.exists(parent):
                os.makedirs(parent, mode=0o755)
                self.made_parent = missing
            check_out_parent(parent)
            rootfs_rebuild.sweep(self.out, self.say, ours)
            self.root = self.sibling("tmp")
        except OSError as e:
            raise BuildError("create build directory in %s" % parent, e.strerror,
                             "choose an --out in a writable directory")
        self.make_layout()
        self.say("interpreter %s (Python %s)" % (self.binary, self.info["version"]))
        self.copy_interpreter()
        self.copy_shell()
        self.copy_shell_tools()
        self.copy_stdlib()
        self.copy_packages()
        # The tree can run Python now: pip runs in a jail on it (install_wheels).
        self.copy_ldconfig()
        self.copy_libraries()
        self.copy_locale()
        self.copy_zoneinfo()
        self.copy_ca_certificates()
        self.copy_session_server()
        self.write_etc()
        self.write_ld_cache()
        self.install_wheels()
        self.install_venv()
        self.resolve_package_libraries()
        if self.package_libs:
            self.copy_libraries()
            self.write_ld_cache()
        self.write_etc()    # again: the lock and the list of packages
        self.say("byte-compiling")
        self.compile(self.compile_dirs, strict=True)
        self.compile(self.package_compile, strict=False)
        self.add_matplotlib_cache()
        self.finalize()
        self.install()
        self.made_parent = None
        elapsed = time.monotonic() - start
        print("rootfs: %s: %d files, %.1f MiB, built in %.1f s"
              % (self.args.out, self.nfiles, self.nbytes / 1048576.0, elapsed),
              flush=True)

    def sibling(self, kind):
        """A new directory beside the output (DIR.pyjail-tmp-XXXXXXXX, DIR.pyjail-pip-XXXXXXXX),
        locked until cleanup(): if the builder is killed, the next build of DIR removes it."""
        path, fd = rootfs_rebuild.lock_sibling(self.out, kind)
        self.locks.append(fd)
        return path

    def cleanup(self):
        # The directories first, then their locks: a sweep never finds one half removed.
        for path in (self.relay_dir, self.root, self.stage):
            if path:
                remove_jail_tree(path, self.warn)
        self.relay_dir = self.root = self.stage = None
        while self.locks:
            os.close(self.locks.pop())
        if self.id_lease is not None:
            os.close(self.id_lease)     # after its files, gone with the stage
            self.id_lease = None
        # Directories made only to hold the output, on a failed build.
        if self.made_parent:
            d = os.path.dirname(self.out)
            while inside(d, self.made_parent):
                try:
                    os.rmdir(d)
                except OSError:
                    break
                d = os.path.dirname(d)
            self.made_parent = None


SESSION_MODULES = ("wire", "spawn", "server")


def session_server_files():
    """The session server's modules this builder puts into a rootfs, {path in the rootfs:
    source}: the source tree's, or the ones installed next to the builder."""
    here = os.path.dirname(os.path.realpath(__file__))
    files = {}
    for module in SESSION_MODULES:
        src = os.path.join(here, os.pardir, "python", "pyjail", "_%s.py" % module)
        if not os.path.isfile(src):
            src = os.path.join(here, "pyjail_%s.py" % module)
        files["/usr/lib/pyjail/pyjail_%s.py" % module] = src
    return files


def sources_state(root):
    """rootfs_sources.check() for the rootfs at `root`: have its host files changed?"""
    now = {dst: rootfs_sources.file_sha256(src)
           for dst, src in session_server_files().items() if os.path.isfile(src)}

    def venv_records(site, dists):
        return {d: rootfs_packages.record_digest(os.path.join(site, d))[0] for d in dists}

    return rootfs_sources.check(rootfs_sources.read(root), now, venv_records)


def exchange(a, b):
    """Atomically swap two paths with renameat2(RENAME_EXCHANGE).

    Returns False when the kernel or file system does not support it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                   ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), b)


# How failures are reported: as build-rootfs.py (exit 1), or as `pyjail rootfs` (exit 125,
# pyjail's own status for its errors) when pyjail runs this script with --as-pyjail.
REPORT = {"prog": "build-rootfs", "status": 1}


class ArgumentParser(argparse.ArgumentParser):
    """Report command line errors like every other failure: one line, exit 1 (125)."""

    def error(self, message):
        print("%s: command line: %s (see %s --help)" % (REPORT["prog"], message, self.prog),
              file=sys.stderr, flush=True)
        sys.exit(REPORT["status"])


def parse_build_args(argv, prog):
    import rootfs_relay     # here, not for info or list: the socket modules take 10 ms
    p = ArgumentParser(
        prog=prog,
        description="Build a minimal read-only root filesystem containing Python "
                    "for pyjail, with packages from wheels or a virtualenv.")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", metavar="DIR",
                       help="where to put the tree (replaced atomically if it exists)")
    where.add_argument("--name", metavar="NAME",
                       help="build the named rootfs NAME, found by pyjail --rootfs NAME")
    # Given by pyjail: where --name puts a rootfs for this user.
    p.add_argument("--named-dir", help=argparse.SUPPRESS)
    p.add_argument("--python", default="/usr/bin/python3", metavar="PATH",
                   help="host interpreter to copy (default: %(default)s)")
    p.add_argument("--requirements", "-r", action="append", default=[], metavar="FILE",
                   help="install these requirements, with their dependencies, from wheels "
                        "(repeatable)")
    p.add_argument("--pip", nargs="+", action="extend", default=[], metavar="SPEC",
                   help="install these requirement specifiers (e.g. 'cffi>=1.15'), with "
                        "their dependencies, from wheels")
    p.add_argument("--find-links", action="append", default=[], metavar="DIR",
                   help="also look for wheels in this directory (repeatable)")
    p.add_argument("--no-index", action="store_true",
                   help="do not use the package index: only --find-links directories")
    p.add_argument("--wheel-cache", metavar="DIR",
                   help="keep the wheels pip downloads in DIR, and take them from there when "
                        "it has them all (offline)")
    p.add_argument("--download-limit", metavar="SIZE",
                   default=rootfs_relay.format_size(rootfs_relay.DOWNLOAD_LIMIT),
                   help="the most the package index may send in a build, all files together "
                        "(K, M or G; default: %(default)s): past it the build fails")
    p.add_argument("--install-limit", metavar="SIZE",
                   default=rootfs_relay.format_size(rootfs_packages.INSTALL_LIMIT),
                   help="the most one pip run (in its jail) may add to the disk of the output's "
                        "directory, what it downloads, unpacks and builds together (K, M or G; "
                        "default: %(default)s): past it the build fails")
    p.add_argument("--index-url", metavar="URL",
                   help="the package index (default: PyPI), https:// only: the jail that runs "
                        "pip reaches this host and no other")
    p.add_argument("--extra-index-url", action="append", default=[], metavar="URL",
                   help="another index pip may take packages from (repeatable)")
    p.add_argument("--from-venv", metavar="DIR",
                   help="take the packages of this virtualenv (of the same Python)")
    p.add_argument("--allow-build", action="store_true",
                   help="keep packages pip built from source (a source distribution, a local "
                        "directory, a URL): their build code runs in the jail that runs pip")
    p.add_argument("--with", dest="with_", action="append", default=[], metavar="PKG",
                   help="also copy this importable package of the host interpreter "
                        "(repeatable, dependencies not followed)")
    p.add_argument("--shell-tools", action="store_true",
                   help="add busybox (static) with ls, cat, grep, sed, awk, find, ... for "
                        "subprocess and os.system")
    ca = p.add_mutually_exclusive_group()
    ca.add_argument("--ca-certificates", metavar="FILE",
                    help="the CA certificates (PEM) the jail's OpenSSL trusts by default "
                         "(default: the host's bundle)")
    ca.add_argument("--no-ca-certificates", action="store_true",
                    help="put no CA certificates into the tree: HTTPS in the jail verifies "
                         "nothing unless the program brings its own")
    # Given by pyjail: its own binary, to run matplotlib in a jail for its font cache.
    p.add_argument("--pyjail-binary", help=argparse.SUPPRESS)
    p.add_argument("--jail-uid", type=int, default=1000, metavar="UID",
                   help="uid of the 'jail' user in etc/passwd (default: %(default)s)")
    p.add_argument("--jail-gid", type=int, default=1000, metavar="GID",
                   help="gid of the 'jail' group (default: %(default)s)")
    p.add_argument("--quiet", action="store_true",
                   help="print only the final summary line (and errors)")
    args = p.parse_args(argv)
    for opt in ("download_limit", "install_limit"):
        try:
            setattr(args, opt, rootfs_relay.parse_size(getattr(args, opt)))
        except ValueError as e:
            raise BuildError("--%s %s" % (opt.replace("_", "-"), getattr(args, opt)), str(e),
                             "write bytes or a number with K, M or G, e.g. %s"
                             % ("16G" if opt == "download_limit" else "64G"))
    for opt, v in (("--jail-uid", args.jail_uid), ("--jail-gid", args.jail_gid)):
        if not 0 < v < 2**32 - 1 or v == 65534:
            p.error("%s %d: must be between 1 and 4294967294 and not 65534" % (opt, v))
    if args.name is not None:
        if not NAME_RE.match(args.name) or args.name == "default":
            raise BuildError("--name %s" % args.name,
                             "not a rootfs name (letters, digits, '.', '_', '-'; not 'default')",
                             "choose another name, or use --out DIR")
        if not args.named_dir:
            raise BuildError("--name %s" % args.name, "nowhere to put named rootfses (pyjail "
                             "puts a user's in ~/.local/share/pyjail/rootfs, and HOME is not "
                             "set)", "set HOME, run it as pyjail rootfs build, or use --out DIR")
        args.out = os.path.abspath(os.path.join(args.named_dir, args.name))
    if args.out and rootfs_rebuild.is_sibling_name(os.path.basename(args.out.rstrip("/"))):
        # Such a name is what a build of another rootfs leaves beside it while it runs, or
        # keeps for jails: a build of that other rootfs would take this one for its own and
        # remove it. The names earlier versions gave them too: an earlier pyjail still
        # installed would, and pyjail rootfs list skips them.
        raise BuildError("%s %s" % ("--name" if args.name is not None else "--out",
                                    args.name if args.name is not None else args.out),
                         "names ending in .pyjail-tmp-, .pyjail-pip- or .pyjail-old- (or, as "
                         "earlier versions made them, .tmp-, .pip- or .old-) and 8 letters, "
                         "digits or '_' are the builder's own (what a build of another rootfs "
                         "leaves beside it)", "choose another name")
    return args


def parse_args(argv):
    """Back-compatible entry for tests: the build command's arguments."""
    return parse_build_args(argv, "build-rootfs.py")


def run_build(argv, prog):
    return run_guarded(lambda: Builder(parse_build_args(argv, prog)))


def run_guarded(make_builder):
    """Runs make_builder().build(): 0, or REPORT's status after one line on stderr. Whatever
    happens, nothing half-built stays behind."""
    builder = None

    def on_term(signum, frame):
        raise BuildError("build", "terminated by signal %d" % signum, "run it again")

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)
    try:
        builder = make_builder()
        builder.build()
        return 0
    except BuildError as e:
        msg = e.line(REPORT["prog"])
    except KeyboardInterrupt:
        msg = "%s: build: interrupted (run it again)" % REPORT["prog"]
    except OSError as e:
        msg = "%s: %s: %s (check free space and permissions)" % (
            REPORT["prog"], e.filename or "I/O", e.strerror or e)
    finally:
        # Runs on success too, where root is already None.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if builder is not None:
            builder.cleanup()
    print(msg, file=sys.stderr, flush=True)
    return REPORT["status"]


def run_info(argv, prog):
    import rootfs_show
    p = ArgumentParser(prog=prog, description="Show what a rootfs holds: its Python, size, "
                       "the packages of its lock, and whether its host files changed since.")
    p.add_argument("rootfs", metavar="ROOTFS", help="a rootfs directory")
    p.add_argument("--json", action="store_true", help="print JSON")
    args = p.parse_args(argv)
    root = os.path.abspath(args.rootfs)
    rootfs_show.read_info(root)     # not a rootfs: say so first
    rootfs_show.show_info(root, args.json, sources_state(root))
    return 0


def run_sources(argv, prog):
    """For pyjail doctor: whether a rootfs's host files changed, as one line of JSON."""
    p = ArgumentParser(prog=prog)
    p.add_argument("rootfs", metavar="ROOTFS")
    print(json.dumps(sources_state(os.path.abspath(p.parse_args(argv).rootfs)), sort_keys=True))
    return 0


def rebuild_builder(root, if_stale, quiet, prog, pyjail_binary=None):
    """A Builder that rebuilds the rootfs at `root` in place from what its build recorded:
    the same options, the locked pip packages, the host's files as they are now. None when
    --if-stale and nothing changed."""
    import rootfs_show
    rootfs_show.read_info(root)
    rec = rootfs_sources.read(root)
    if rec is None or "inputs" not in rec:
        raise BuildError("rebuild %s" % root, "it does not record how it was built (its "
                         "builder predates rebuilds)", "build it again with pyjail rootfs "
                         "build --out DIR (or --name NAME) and the options it was built with")
    if if_stale and sources_state(root)["state"] == "fresh":
        print("rootfs: %s: its sources are as built, nothing to do" % root, flush=True)
        return None
    args = parse_build_args(["--out", root] + (["--quiet"] if quiet else []), prog)
    for key, value in rec["inputs"].items():
        if hasattr(args, key) and key not in rootfs_rebuild.NOT_INPUTS:
            setattr(args, key, value)
    args.pyjail_binary = pyjail_binary
    os.environ["SOURCE_DATE_EPOCH"] = str(rec["inputs"]["source_date_epoch"])
    builder = Builder(args)
    # Its pip packages are the lock's, pinned (Builder.locked_pins), not --pip's again.
    builder.previous_lock = rootfs_show.read_lock(root)
    return builder


def run_rebuild(argv, prog):
    p = ArgumentParser(prog=prog, description="Rebuild rootfses in place from what their "
                       "build recorded, taking the host's files as they are now (after a "
                       "security update). Jails running in the old tree keep it.")
    p.add_argument("rootfs", nargs="*", metavar="ROOTFS", help="a rootfs directory")
    p.add_argument("--all", action="store_true",
                   help="every rootfs pyjail rootfs list shows that you own")
    p.add_argument("--if-stale", action="store_true",
                   help="only those whose host files changed since they were built")
    p.add_argument("--quiet", action="store_true", help="print only summary lines and errors")
    p.add_argument("--dir", action="append", default=[], help=argparse.SUPPRESS)
    p.add_argument("--default", help=argparse.SUPPRESS)
    p.add_argument("--pyjail-binary", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not args.rootfs and not args.all:
        p.error("name the rootfs to rebuild, or pass --all")
    named = [os.path.abspath(r) for r in args.rootfs]
    roots = rootfs_rebuild.targets(named, args.all,
                                   args.default,
                                   [tuple(d.split("=", 1)) for d in args.dir if "=" in d])
    status, done = 0, 0
    for root in roots:
        if root not in named and os.lstat(root).st_uid != os.geteuid():
            continue    # another user's (root's installed ones, for a user): theirs to rebuild
        done += 1
        status = run_guarded(lambda root=root: rebuild_builder(
            root, args.if_stale, args.quiet, prog, args.pyjail_binary) or NoBuild()) or status
    if not done:
        print("rootfs: no rootfs of yours to rebuild (pyjail rootfs list shows them all)",
              flush=True)
    return status


class NoBuild:
    """What run_guarded builds when --if-stale finds nothing to do."""

    def build(self):
        pass

    def cleanup(self):
        pass


def run_list(argv, prog):
    import rootfs_show
    p = ArgumentParser(prog=prog, description="List the installed rootfses.")
    p.add_argument("--dir", action="append", default=[], metavar="WHERE=DIR",
                   help="a directory of named rootfses, searched in the order given")
    p.add_argument("--default", metavar="DIR", help="the default rootfs")
    args = p.parse_args(argv)
    rootfs_show.show_list([tuple(d.split("=", 1)) for d in args.dir if "=" in d], args.default)
    return 0


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = "build-rootfs.py"
    if argv[:1] == ["--as-pyjail"]:
        argv.pop(0)
        REPORT.update(prog="pyjail rootfs", status=125)
        prog = "pyjail rootfs"
    commands = {"build": run_build, "info": run_info, "list": run_list,
                "rebuild": run_rebuild, "sources": run_sources}
    if argv and argv[0] in commands:
        command = argv.pop(0)
        try:
            return commands[command](argv, "%s %s" % (prog, command))
        except BuildError as e:
            print(e.line(REPORT["prog"]), file=sys.stderr, flush=True)
            return REPORT["status"]
    return run_build(argv, prog)   # build-rootfs.py --out DIR ...


if __name__ == "__main__":
    sys.exit(main())
