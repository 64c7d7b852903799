"""The shared libraries an ELF file needs, read from the file itself.

Used for the files of packages installed from wheels or taken from a virtualenv: those are
not the host's, so the builder never runs them, not even through ldd (which, for some files,
starts the program's own dynamic loader): it reads DT_NEEDED, DT_RPATH and DT_RUNPATH from the
dynamic section and resolves each name as the dynamic loader would -- RPATH (when there is no
RUNPATH), RUNPATH, the host's ld.so.cache, the default directories -- taking only libraries of
the same machine and class.

Only the standard library of any python3 >= 3.9 is used.
"""

import os
import re
import struct
import subprocess

ELF_MAGIC = b"\x7fELF"
PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_RPATH, DT_RUNPATH = 0, 1, 5, 10, 15, 29
DEFAULT_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64")


class ElfInfo:
    """What the dynamic loader reads from one file."""

    def __init__(self, machine, elfclass, needed, rpath, runpath):
        self.machine, self.elfclass = machine, elfclass
        self.needed, self.rpath, self.runpath = needed, rpath, runpath


def read_elf(path):
    """ElfInfo of `path`, or None when it is not an ELF file the loader could use."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if len(data) < 64 or data[:4] != ELF_MAGIC:
        return None
    elfclass, endian = data[4], data[5]
    if elfclass not in (1, 2) or endian not in (1, 2):
        return None
    e = "<" if endian == 1 else ">"
    try:
        machine = struct.unpack_from(e + "H", data, 18)[0]
        if elfclass == 2:
            phoff, = struct.unpack_from(e + "Q", data, 32)
            phentsize, phnum = struct.unpack_from(e + "HH", data, 54)
            ph_fmt, dyn_fmt = e + "IIQQQQQQ", e + "qQ"
        else:
            phoff, = struct.unpack_from(e + "I", data, 28)
            phentsize, phnum = struct.unpack_from(e + "HH", data, 42)
            ph_fmt, dyn_fmt = e + "IIIIIIII", e + "iI"
        loads, dynamic = [], None
        for i in range(phnum):
            fields = struct.unpack_from(ph_fmt, data, phoff + i * phentsize)
            if elfclass == 2:
                p_type, _, p_offset, p_vaddr, _, p_filesz = fields[:6]
            else:
                p_type, p_offset, p_vaddr, _, p_filesz = fields[:5]
            if p_type == PT_LOAD:
                loads.append((p_vaddr, p_offset, p_filesz))
            elif p_type == PT_DYNAMIC:
                dynamic = (p_offset, p_filesz)
        if dynamic is None:
            return ElfInfo(machine, elfclass, [], [], [])   # static: needs nothing
        entries, strtab, strsz = [], None, None
        size = struct.calcsize(dyn_fmt)
        off, end = dynamic[0], dynamic[0] + dynamic[1]
        while off + size <= min(end, len(data)):
            tag, val = struct.unpack_from(dyn_fmt, data, off)
            off += size
            if tag == DT_NULL:
                break
            if tag == DT_STRTAB:
                strtab = val
            elif tag == DT_STRSZ:
                strsz = val
            elif tag in (DT_NEEDED, DT_RPATH, DT_RUNPATH):
                entries.append((tag, val))
        if strtab is None:
            return ElfInfo(machine, elfclass, [], [], [])
        # DT_STRTAB is an address: find the file offset of the segment that maps it.
        str_off = next((o + strtab - v for v, o, n in loads if v <= strtab < v + n), None)
        if str_off is None:
            return None

        def string(index):
            start = str_off + index
            stop = data.index(b"\0", start, start + (strsz or len(data)))
            return data[start:stop].decode("utf-8", "surrogateescape")

        needed = [string(v) for t, v in entries if t == DT_NEEDED]
        rpath = [p for t, v in entries if t == DT_RPATH for p in string(v).split(":") if p]
        runpath = [p for t, v in entries if t == DT_RUNPATH for p in string(v).split(":") if p]
        return ElfInfo(machine, elfclass, needed, rpath, runpath)
    except (struct.error, ValueError, IndexError):
        return None


def host_ld_cache():
    """{soname: [paths]} from the host's ld.so.cache (`ldconfig -p`), or {} without one."""
    for ldconfig in ("/sbin/ldconfig", "/usr/sbin/ldconfig", "/sbin/ldconfig.real"):
        if os.path.exists(ldconfig):
            break
    else:
        return {}
    try:
        out = subprocess.run([ldconfig, "-p"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, universal_newlines=True,
                             env={"LC_ALL": "C"}).stdout
    except OSError:
        return {}
    cache = {}
    for name, path in re.findall(r"^\s+(\S+) \([^)]*\) => (\S+)$", out, re.M):
        cache.setdefault(name, []).append(path)
    return cache


class Resolver:
    """Finds the libraries ELF files need, as the dynamic loader of the jail would.

    `tree`: the rootfs being built. The files resolved are a package's, whose DT_NEEDED,
    DT_RPATH and DT_RUNPATH its author chose: a path there outside the tree would make the
    builder copy that host file (a root-only library, for a root build) into a tree every jail
    reads. So an absolute library name or search directory counts only inside the tree; the
    host's libraries are found where the host's loader finds its own (ld.so.cache, the default
    directories)."""

    def __init__(self, tree=None):
        self.cache = host_ld_cache()
        self._info = {}
        self.tree = os.path.realpath(tree) if tree else None

    def in_tree(self, path):
        if self.tree is None:
            return True
        real = os.path.realpath(path)
        return real == self.tree or real.startswith(self.tree + "/")

    def info(self, path):
        if path not in self._info:
            self._info[path] = read_elf(path)
        return self._info[path]

    def matches(self, path, want):
        got = self.info(path)
        return got is not None and got.machine == want.machine and got.elfclass == want.elfclass

    @staticmethod
    def rpath_dirs(path, info):
        """The DT_RPATH directories of `path`, $ORIGIN expanded: searched for its own
        libraries and, without a DT_RUNPATH there, for those of every library it loads."""
        origin = os.path.dirname(os.path.abspath(path))
        return [re.sub(r"\$(ORIGIN\b|\{ORIGIN\})", origin.replace("\\", "\\\\"), d)
                for d in info.rpath]

    def resolve(self, path, name, info, loaders_rpath=()):
        """Host path of library `name` needed by ELF file `path`, or None. loaders_rpath:
        the DT_RPATH directories of the files that loaded `path`, nearest first (auditwheel
        gives a wheel's extension modules a DT_RPATH to NAME.libs, and a library there may
        need another one of them without a path of its own)."""
        if "/" in name:
            ok = self.in_tree(name) and os.path.isfile(name) and self.matches(name, info)
            return name if ok else None
        origin = os.path.dirname(os.path.abspath(path))

        def expand(d):
            return re.sub(r"\$(ORIGIN\b|\{ORIGIN\})", origin.replace("\\", "\\\\"), d)

        # As glibc's loader: DT_RUNPATH turns off every DT_RPATH, the loaders' included.
        dirs = [] if info.runpath else self.rpath_dirs(path, info) + list(loaders_rpath)
        dirs += [expand(d) for d in info.runpath]
        for d in (d for d in dirs if self.in_tree(d)):
            candidate = os.path.join(d, name)
            if os.path.isfile(candidate) and self.matches(candidate, info):
                return candidate
        for candidate in self.cache.get(name, []):
            if os.path.isfile(candidate) and self.matches(candidate, info):
                return candidate
        for d in DEFAULT_DIRS:
            candidate = os.path.join(d, name)
            if os.path.isfile(candidate) and self.matches(candidate, info):
                return candidate
        return None
