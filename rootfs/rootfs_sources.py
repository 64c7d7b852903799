"""Where a rootfs's host files came from, and whether the host has changed them since.

A rootfs holds copies of host files (the interpreter, its libraries, the standard library, time
zone data, ...). A security update of the host (`apt-get upgrade`) replaces the originals and
not the copies, so the jail would keep running the vulnerable interpreter while its manifest
still matches. The build therefore records, in etc/pyjail-rootfs.sources.json, where every copied
host file came from:

  - the Debian package that owns it and that package's version, read from dpkg's own database
    (info/*.list: which package owns which path; status: installed versions), directly: one read
    of each file, no dpkg-query per path (1700 files would take seconds);
  - for a file no package owns, its sha256;
  - for pyjail's own file (the session server), its sha256, compared with the copy this pyjail
    would put in now;
  - for packages taken from a virtualenv, the sha256 of each distribution's RECORD.

check() compares that record with the host as it is now. Wheels (pip) are not host files: the
lock pins them by hash.

The dpkg database is $DPKG_ADMINDIR when set (as for dpkg itself), else /var/lib/dpkg. The tests
point it at a database of their own to simulate a package upgrade.

Only the standard library of any python3 >= 3.9 is used.
"""

import glob
import hashlib
import json
import os

SOURCES = "etc/pyjail-rootfs.sources.json"
SOURCES_VERSION = 1

# dpkg's package states in which a package's files are on disk.
FILES_PRESENT = ("installed", "half-configured", "unpacked", "triggers-awaited",
                 "triggers-pending", "half-installed")


def admindir():
    return os.environ.get("DPKG_ADMINDIR") or "/var/lib/dpkg"


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_status(admin):
    """{package key: version} of the packages whose files are on disk. A package is keyed both
    as NAME:ARCH (how dpkg names the .list of a Multi-Arch: same package) and as NAME."""
    versions = {}
    try:
        with open(os.path.join(admin, "status"), encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    for stanza in text.split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            if line[:1] not in (" ", "\t") and ":" in line:
                k, _, v = line.partition(":")
                fields[k] = v.strip()
        name, version = fields.get("Package"), fields.get("Version")
        state = fields.get("Status", "").split()
        if not name or not version or len(state) != 3 or state[2] not in FILES_PRESENT:
            continue
        versions[name + ":" + fields.get("Architecture", "")] = version
        versions.setdefault(name, version)
    return versions


def merged_usr_aliases(path, root="/"):
    """The names dpkg may list `path` under: itself, and on a merged-/usr host the path through
    a top-level symlink (/usr/lib/x/libc.so.6 is listed as /lib/x/libc.so.6 by libc6)."""
    out = [path]
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        link = os.path.join(root, top)
        try:
            target = os.readlink(link)
        except OSError:
            continue
        usr = "/" + target.strip("/") if not target.startswith("/") else target.rstrip("/")
        if path.startswith(usr + "/"):
            out.append("/" + top + path[len(usr):])
    return out


def owners(admin, paths):
    """{host path: package key} for those of `paths` that a package owns."""
    alias = {}
    for p in paths:
        for a in merged_usr_aliases(p):
            alias.setdefault(a, p)
    found = {}
    for listing in sorted(glob.glob(os.path.join(admin, "info", "*.list"))):
        package = os.path.basename(listing)[:-len(".list")]
        try:
            with open(listing, encoding="utf-8", errors="surrogateescape") as f:
                for line in f:
                    p = alias.get(line.rstrip("\n"))
                    if p is not None:
                        found.setdefault(p, package)
        except OSError:
            continue
    return found


def record(host_files, digests, pyjail_files, venv):
    """The provenance record of a build.

    host_files: {in-tree path: host path it was copied from}; digests: {in-tree path: sha256};
    pyjail_files: {in-tree path: sha256} of pyjail's own files; venv: None, or (site directory,
    {dist-info directory: sha256 of its RECORD})."""
    admin = admindir()
    status = read_status(admin)
    paths = sorted(set(host_files.values()))
    owned = owners(admin, paths) if status is not None else {}
    packages, files = {}, {}
    for tree_path, host in sorted(host_files.items()):
        package = owned.get(host)
        if package is not None and package in status:
            entry = packages.setdefault(package, {"version": status[package], "files": 0})
            entry["files"] += 1
        elif digests.get(tree_path) is not None:
            files[host] = digests[tree_path]
    return {
        "sources_version": SOURCES_VERSION,
        "dpkg": status is not None,
        "packages": packages,
        "files": files,
        "pyjail": dict(sorted(pyjail_files.items())),
        "venv": None if venv is None else {"site": venv[0], "dists": venv[1]},
    }


def read(root):
    """The record of the rootfs at `root`, or None when it was built without one."""
    try:
        with open(os.path.join(root, SOURCES), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def shown(items, limit=3):
    return ", ".join(items[:limit]) + (", ..." if len(items) > limit else "")


def check(rec, pyjail_now, venv_records):
    """What changed on the host since the build: {"state": "fresh"|"stale"|"unknown",
    "summary": one line, "changes": [one line each]}.

    pyjail_now: {in-tree path: sha256} of pyjail's own files as this pyjail would copy them;
    venv_records(site, dist_dirs) -> {dist-info directory: sha256 of RECORD, or None}."""
    if rec is None:
        return {"state": "unknown", "changes": [],
                "summary": "not recorded (built before pyjail recorded where a rootfs's files "
                           "come from: build it again to get the record)"}
    changes = []
    status = read_status(admindir()) if rec.get("packages") else {}
    status = status or {}
    for package, entry in sorted(rec.get("packages", {}).items()):
        now = status.get(package)
        if now is None:
            changes.append("package %s %s is no longer installed" % (package, entry["version"]))
        elif now != entry["version"]:
            changes.append("package %s was %s, now %s" % (package, entry["version"], now))
    differ = []
    for host, digest in sorted(rec.get("files", {}).items()):
        try:
            same = file_sha256(host) == digest
        except OSError:
            same = False
        if not same:
            differ.append(host)
    for tree_path, digest in sorted(rec.get("pyjail", {}).items()):
        if pyjail_now.get(tree_path) != digest:
            differ.append("pyjail's %s" % os.path.basename(tree_path))
    if differ:
        changes.append("%d file%s differ%s (%s)" % (len(differ), "s" if len(differ) > 1 else "",
                                                   "" if len(differ) > 1 else "s",
                                                   shown(differ)))
    venv = rec.get("venv")
    if venv:
        now = venv_records(venv["site"], sorted(venv["dists"]))
        moved = [d[:-len(".dist-info")] for d, digest in sorted(venv["dists"].items())
                 if now.get(d) != digest]
        if moved:
            changes.append("virtualenv packages changed or removed: %s" % shown(moved))
    npkg, nfiles = len(rec.get("packages", {})), len(rec.get("files", {}))
    if changes:
        return {"state": "stale", "changes": changes,
                "summary": "changed on the host since the build: %s%s" % (
                    "; ".join(changes[:3]),
                    "; and %d more" % (len(changes) - 3) if len(changes) > 3 else "")}
    return {"state": "fresh", "changes": [],
            "summary": "as built (%d Debian package%s, %d file%s by hash%s)" % (
                npkg, "" if npkg == 1 else "s", nfiles, "" if nfiles == 1 else "s",
                "" if rec.get("dpkg") else "; no dpkg database on this host")}
