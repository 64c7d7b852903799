"""Third-party packages for a rootfs: from wheels with pip, or from an existing virtualenv,
and the lock that records what went in.

pip runs as the rootfs's own interpreter (`PYTHON -I -m pip`), so it picks wheels for exactly
that interpreter and platform, with --only-binary :all:: a wheel is unpacked, never built, so
no package's code runs at build time -- pip's is the only code that does. A requirement that
pip cannot satisfy is explained from pip's own log (-vv lists every file it skipped and why):
no such project, no wheel for this interpreter, only a source distribution.

Only the standard library of any python3 >= 3.9 is used.
"""

import hashlib
import json
import os
import re
import subprocess

LOCK = "etc/pyjail-rootfs.lock.json"
LOCK_VERSION = 1

# A virtualenv's own tools: they install packages, which a read-only jail cannot do.
VENV_TOOLS = ("pip", "setuptools", "_distutils_hack", "wheel", "pkg_resources")


class BuildError(Exception):
    """A failure reported as `PROG: WHAT: WHY (FIX)`."""

    def __init__(self, what, why, fix):
        super().__init__(what)
        self.what, self.why, self.fix = what, why, fix

    def line(self, prog="build-rootfs"):
        return "%s: %s: %s (%s)" % (prog, self.what, self.why, self.fix)


def one_line(text, limit=300):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


# ------------------------------------------------------------------------------------ pip


def pip_command(python, target, report, requirements, specs, find_links, no_index, extra=()):
    """The pip command that installs `requirements` files and `specs` into `target`."""
    cmd = [python, "-I", "-m", "pip", "install", "-vv", "--disable-pip-version-check",
           "--no-input", "--root-user-action=ignore",
           # Wheels only: an sdist would be built, running its setup code on this host.
           "--only-binary", ":all:",
           # A fresh, flat directory: nothing the host has installed counts as satisfied.
           "--target", target, "--ignore-installed",
           # The builder compiles the bytecode itself, reproducibly (unchecked-hash).
           "--no-compile",
           "--report", report]
    return cmd + source_args(no_index, find_links, requirements) + list(extra) + list(specs)


def source_args(no_index, find_links, requirements):
    """pip's options naming where packages come from and which are asked for."""
    args = ["--no-index"] if no_index else []
    for d in find_links:
        args += ["--find-links", d]
    for r in requirements:
        args += ["--requirement", r]
    return args


def explain_pip_failure(log, python_desc):
    """(what, why, fix) for a failed `pip install`, from its -vv log."""
    lines = log.splitlines()
    errors = [l[len("ERROR: "):] for l in lines if l.startswith("ERROR: ")]
    m = next((re.search(r"No matching distribution found for (\S+)", e) for e in errors
              if "No matching distribution found" in e), None)
    if m:
        req = m.group(1)
        project = canonical(re.split(r"[<>=!~;\[ ]", req)[0])
        # A dependency, not what was asked for: say whose.
        parent = re.search(r"^ERROR: Could not find a version that satisfies the requirement "
                           r"%s \(from (?!versions:)([^,)]+)" % re.escape(req), log, re.M)
        what = "requirement %s" % req + (" (needed by %s)" % parent.group(1) if parent else "")
        skipped = []
        for l in lines:
            link = re.search(r"Skipping link: (.*?): (\S+?)(?:#\S*)?(?: \(from .*\))?$", l)
            if link:
                fname = link.group(2).rsplit("/", 1)[-1]
                stem = re.match(r"(.+?)-[0-9]", fname)
                if stem and canonical(stem.group(1)) == project:
                    skipped.append((link.group(1), fname))
        sdists = [f for why, f in skipped if "No sources permitted" in why or
                  "No binaries permitted" in why]
        wheels = [why for why, f in skipped if "none of the wheel's tags" in why or
                  "requires a different Python" in why]
        versions = next((re.search(r"\(from versions: ([^)]*)\)", e) for e in errors
                         if "from versions:" in e), None)
        versions = versions.group(1) if versions else "none"
        if versions != "none":
            shown = versions.split(", ")
            return (what,
                    "no version of it that matches has a wheel for %s (versions with one: %s)"
                    % (python_desc, ", ".join(shown[-5:])),
                    "change the version it asks for")
        if wheels:
            tags = sorted({t for l in wheels for t in re.findall(r"tags \(([^)]*)\)", l)})
            shown = ", ".join(tags[-4:]) + (", ..." if len(tags) > 4 else "")
            return (what,
                    "no wheel of it for %s (its wheels are for: %s)"
                    % (python_desc, shown or "other Python versions"),
                    "pick a package or version that has a wheel for this interpreter, or build "
                    "the rootfs from an interpreter its wheels support (--python)")
        if sdists:
            return (what,
                    "it has only source distributions (%s), and building one would run its "
                    "code on this host" % sdists[-1],
                    "use a version that has a wheel, or build the wheel yourself (pip wheel) "
                    "and pass its directory with --find-links DIR, or pass --allow-build to "
                    "let pip build it here")
        return (what,
                "no such project on the index%s" % (
                    " or in the --find-links directories" if "Looking in links" in log else ""),
                "check the name (pip index versions NAME), or add --find-links DIR with its "
                "wheel")
    conflict = next((e for e in errors if "ResolutionImpossible" in e or "conflict" in e), None)
    if conflict:
        return ("requirements", one_line(conflict),
                "loosen the conflicting version pins")
    why = errors[-1] if errors else (lines[-1] if lines else "pip failed")
    if "no such option: --report" in log or "no such option: --root-user-action" in log:
        return ("pip", "the pip of %s is older than 22.2" % python_desc,
                "upgrade it for that interpreter (python3 -m pip install --upgrade pip)")
    if "No module named pip" in log:
        return ("pip", "%s has no pip" % python_desc,
                "install pip for it (Debian: apt-get install python3-pip)")
    return ("pip install", one_line(why), "see pip's message; run it again with network, or "
            "with --no-index --find-links DIR on an offline host")


def pip_run(cmd):
    """Runs pip (cmd[0] is the interpreter); returns the process, its log in stdout."""
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("PYTHON"):
            del env[k]
    env["LC_ALL"] = "C.UTF-8"
    try:
        return subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, universal_newlines=True, env=env)
    except OSError as e:
        raise BuildError("pip", "cannot run %s: %s" % (cmd[0], e.strerror),
                         "check --python")


def build_wheels(python, python_desc, wheel_dir, requirements, specs, find_links, no_index,
                 extra=()):
    """--allow-build: `pip wheel` puts a wheel of every distribution the requirements need
    into `wheel_dir`, building those that have only a source distribution -- which runs their
    build code on this host, as the invoking user, in pip's temporary directory, never in the
    rootfs. Returns the canonical names of the distributions it built. Raises BuildError."""
    # --no-cache-dir: every sdist is built by this build, never a wheel an earlier one cached
    # (so "Created wheel for" names every distribution built, for the lock).
    cmd = [python, "-I", "-m", "pip", "wheel", "-vv", "--disable-pip-version-check",
           "--no-input", "--no-cache-dir", "--wheel-dir", wheel_dir]
    proc = pip_run(cmd + source_args(no_index, find_links, requirements) + list(extra) + list(specs))
    log = proc.stdout
    if proc.returncode != 0:
        if "subprocess-exited-with-error" in log or "Failed building wheel" in log:
            # The build's own output is indented in pip's log, before pip's summary.
            what = re.findall(r"^(?:Building wheel for|Processing) (\S+)", log, re.M)
            what = re.sub(r"\.(tar\.gz|zip|tar\.bz2)$", "", os.path.basename(
                what[-1])) if what else "a source distribution"
            own = log.split("subprocess-exited-with-error")[0]
            errors = re.findall(r"^\s+([A-Za-z_.]*(?:Error|Exception): .*)$", own, re.M)
            raise BuildError("--allow-build: building %s" % what,
                             "its build failed: %s" % one_line(
                                 errors[-1] if errors else "see pip wheel's output", 200),
                             "pip wheel %s shows the whole log; install what its build "
                             "needs, or use a version that has a wheel"
                             % re.sub(r"-[0-9][^-]*$", "", what))
        raise BuildError(*explain_pip_failure(log, python_desc))
    return {canonical(m) for m in re.findall(r"Created wheel for (\S+?):", log)}


def run_pip(python, python_desc, target, report, requirements, specs, find_links, no_index,
            extra=()):
    """Installs into `target`; returns pip's installation report (a dict). Raises BuildError."""
    proc = pip_run(pip_command(python, target, report, requirements, specs, find_links,
                               no_index, extra))
    if proc.returncode != 0:
        raise BuildError(*explain_pip_failure(proc.stdout, python_desc))
    try:
        with open(report, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise BuildError("pip", "no installation report (%s)" % e,
                         "use pip 22.2 or newer for the rootfs's interpreter")


def unmark_requested(site, requested):
    """pip marks every distribution it was asked for with a REQUESTED file (listed in its
    RECORD). A rebuild asks for each locked distribution by name; this takes the mark off those
    not in `requested` (the dist-info directories that had it before), so the rebuilt tree is
    the tree built first."""
    for entry, _, _ in dist_infos(site):
        mark = os.path.join(site, entry, "REQUESTED")
        if entry in requested or not os.path.exists(mark):
            continue
        os.unlink(mark)
        record = os.path.join(site, entry, "RECORD")
        with open(record, "rb") as f:       # bytes: its line ends stay as pip wrote them
            rows = [r for r in f if r.split(b",")[0] != os.fsencode(entry + "/REQUESTED")]
        with open(record, "wb") as f:
            f.writelines(rows)


def wheel_hashes(report):
    """{canonical name: (wheel file name, sha256)} from pip's installation report."""
    out = {}
    for item in report.get("install", []):
        meta = item.get("metadata", {})
        info = item.get("download_info", {})
        url = info.get("url", "")
        archive = info.get("archive_info", {})
        digest = archive.get("hashes", {}).get("sha256")
        if digest is None and archive.get("hash", "").startswith("sha256="):
            digest = archive["hash"][len("sha256="):]
        if digest is None and url.startswith("file://"):
            try:
                with open(url[len("file://"):], "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            except OSError:
                pass
        out[canonical(meta.get("name", ""))] = (url.rsplit("/", 1)[-1], digest)
    return out


# ------------------------------------------------------------------------------ virtualenv


def read_venv(venv, target_version):
    """The site-packages directory of virtualenv `venv`, checked to be of the same Python
    (major.minor) as `target_version` ("3.11.2"). Raises BuildError."""
    cfg = os.path.join(venv, "pyvenv.cfg")
    fix_other = ("make the virtualenv with the rootfs's interpreter (PYTHON -m venv DIR), or "
                 "build the rootfs from the virtualenv's interpreter with --python")
    try:
        with open(cfg, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise BuildError("--from-venv %s" % venv, "not a virtualenv (%s: %s)" % (
            cfg, e.strerror), "pass the directory that holds pyvenv.cfg")
    keys = dict((k.strip().lower(), v.strip()) for k, _, v in
                (l.partition("=") for l in text.splitlines() if "=" in l))
    version = keys.get("version_info") or keys.get("version") or ""
    impl = keys.get("implementation", "cpython").lower()
    if impl != "cpython":
        raise BuildError("--from-venv %s" % venv, "it is a virtualenv of %s" % impl, fix_other)
    if version.split(".")[:2] != target_version.split(".")[:2]:
        raise BuildError("--from-venv %s" % venv,
                         "it was made by Python %s, the rootfs's interpreter is Python %s"
                         % (version or "of unknown version", target_version), fix_other)
    site = os.path.join(venv, "lib", "python%s.%s" % tuple(target_version.split(".")[:2]),
                        "site-packages")
    if not os.path.isdir(site):
        raise BuildError("--from-venv %s" % venv, "it has no %s" % site,
                         "pass the virtualenv's top directory")
    return site


def venv_skip(rel, is_dir):
    """What of a virtualenv's site-packages stays out of the rootfs."""
    parts = rel.split("/")
    name = parts[-1]
    if name == "__pycache__":
        return True
    if len(parts) == 1:
        if name.endswith(".pth"):
            return True  # code run at every start, or host paths (editable installs)
        base = re.split(r"-[0-9]", name)[0] if name.endswith(".dist-info") else name
        if base in VENV_TOOLS or name in ("distutils-precedence.pth",):
            return True
    return name.endswith((".pyc", ".pyo"))


# ------------------------------------------------------------------------------------ lock


def dist_infos(site):
    """(directory name, metadata name, version) of every *.dist-info in `site`, sorted."""
    out = []
    if not os.path.isdir(site):
        return out
    for entry in sorted(os.listdir(site)):
        if not entry.endswith(".dist-info"):
            continue
        name = version = None
        try:
            with open(os.path.join(site, entry, "METADATA"), encoding="utf-8",
                      errors="replace") as f:
                for line in f:
                    if not line.strip():
                        break
                    k, _, v = line.partition(":")
                    if k == "Name":
                        name = v.strip()
                    elif k == "Version":
                        version = v.strip()
        except OSError:
            pass
        if name is None:
            name, _, version = entry[:-len(".dist-info")].partition("-")
        out.append((entry, name, version))
    return out


def record_digest(dist_dir):
    """sha256 of the distribution's RECORD (the list of its files with their hashes), and
    its number of files."""
    try:
        with open(os.path.join(dist_dir, "RECORD"), "rb") as f:
            data = f.read()
    except OSError:
        return None, 0
    return hashlib.sha256(data).hexdigest(), sum(1 for l in data.splitlines() if l.strip())


def lock_entries(site, source, wheels):
    """Lock entries for the distributions in `site` (a directory of the tree)."""
    entries = []
    for entry, name, version in dist_infos(site):
        digest, files = record_digest(os.path.join(site, entry))
        wheel = wheels.get(canonical(name))
        entries.append({
            "name": name,
            "version": version,
            "source": source,
            "wheel": {"file": wheel[0], "sha256": wheel[1]} if wheel else None,
            "record_sha256": digest,
            "files": files,
        })
    return entries
