"""`pyjail rootfs info ROOTFS` and `pyjail rootfs list`: what a built rootfs holds, read from
its metadata (etc/pyjail-rootfs, the lock, the manifest). Reads only; runs nothing.

Only the standard library of any python3 >= 3.9 is used.
"""

import json
import os

from rootfs_packages import LOCK, BuildError
from rootfs_rebuild import is_sibling_name

INFO = "etc/pyjail-rootfs"
MANIFEST = "etc/pyjail-manifest.sha256"


def read_info(root):
    try:
        with open(os.path.join(root, INFO), encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise BuildError("rootfs %s" % root, "not a rootfs built by pyjail (%s: %s)"
                         % (INFO, e.strerror), "give a rootfs name or directory "
                         "(pyjail rootfs list shows them)")
    info = {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        info[key] = value.strip('"')
    return info


def read_lock(root):
    """The lock, or None for a rootfs built before locks existed."""
    try:
        with open(os.path.join(root, LOCK), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def tree_size(root):
    """(regular files, bytes) of the tree."""
    files = size = 0
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            st = os.lstat(os.path.join(dirpath, name))
            if not os.path.islink(os.path.join(dirpath, name)):
                files += 1
                size += st.st_size
    return files, size


def packages_of(info, lock):
    if lock is not None:
        return lock.get("packages", [])
    names = (info.get("PACKAGES", "") + " " + info.get("DISTRIBUTIONS", "")).split()
    return [{"name": n.rsplit("-", 1)[0], "version": n.rsplit("-", 1)[-1], "source": "?"}
            for n in names]


def show_info(root, as_json=False, sources=None):
    """sources: rootfs_sources.check()'s verdict on the tree's host files."""
    info = read_info(root)
    lock = read_lock(root)
    files, size = tree_size(root)
    packages = packages_of(info, lock)
    if as_json:
        print(json.dumps({"rootfs": root, "python": info.get("PYTHON_VERSION"),
                          "interpreter": info.get("PYTHON"), "files": files, "bytes": size,
                          "builder_version": info.get("BUILDER_VERSION"),
                          "lock": lock, "sources": sources}, indent=2, sort_keys=True))
        return
    print("rootfs       %s" % root)
    print("python       %s (%s)" % (info.get("PYTHON_VERSION", "?"), info.get("PYTHON", "?")))
    print("size         %d files, %.1f MiB" % (files, size / 1048576.0))
    print("built by     build-rootfs %s, SOURCE_DATE_EPOCH=%s" % (
        info.get("BUILDER_VERSION", "?"), info.get("SOURCE_DATE_EPOCH", "?")))
    if sources is not None:
        if sources["state"] == "stale":
            print("sources      CHANGED on the host since the build (rebuild it: pyjail rootfs "
                  "rebuild %s)" % root)
            for change in sources["changes"]:
                print("  %s" % change)
        else:
            print("sources      %s" % sources["summary"])
    if lock is None:
        print("lock         none (built before locks existed: rebuild to get one)")
    else:
        print("lock         /%s" % LOCK)
        print("packages     %d, in %s" % (len(packages), lock.get("site_packages", "?")))
    for p in packages:
        wheel = p.get("wheel") or {}
        built = p.get("built_from") if isinstance(p.get("built_from"), dict) else None
        how = ("wheel %s sha256:%s" % (wheel.get("file"), wheel.get("sha256"))
               if wheel else "built in the %s from %s" % (
                   built.get("in", "?"), built.get("file") or "a directory or URL")
               if built else "RECORD sha256:%s" % p.get("record_sha256")
               if p.get("record_sha256") else "")
        print("  %-28s %-6s %s" % ("%s %s" % (p["name"], p["version"]), p.get("source", "?"),
                                   how))


def show_list(dirs, default):
    """dirs: [(where, directory)], searched in that order (the first of a name wins)."""
    rows, seen = [], set()
    if default and os.path.isfile(os.path.join(default, INFO)):
        rows.append(("default", "installed", default))
        seen.add("default")
    for where, d in dirs:
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for name in names:
            path = os.path.join(d, name)
            if is_sibling_name(name) or not os.path.isfile(
                    os.path.join(path, INFO)):
                continue
            rows.append((name if name not in seen else name + " (hidden)", where, path))
            seen.add(name)
    if not rows:
        print("no rootfs found (looked in %s); build one: pyjail rootfs build --name NAME"
              % ", ".join(d for _, d in dirs))
        return
    print("%-16s %-9s %-8s %10s  %s" % ("NAME", "WHERE", "PYTHON", "SIZE", "PACKAGES"))
    for name, where, path in rows:
        info = read_info(path)
        _, size = tree_size(path)
        packages = packages_of(info, read_lock(path))
        shown = ", ".join("%s %s" % (p["name"], p["version"]) for p in packages) or "-"
        print("%-16s %-9s %-8s %6.1f MiB  %s" % (name, where, info.get("PYTHON_VERSION", "?"),
                                                 size / 1048576.0, shown))
        print("%-16s %s" % ("", path))
