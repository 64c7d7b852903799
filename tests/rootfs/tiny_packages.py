"""Tiny Python packages made on the fly for the rootfs tests: wheels, and source distributions
whose in-tree PEP 517 backend needs nothing to build (so pip builds them offline, with build
isolation). Nothing is downloaded.
"""

import hashlib
import io
import tarfile
from pathlib import Path

# Writes a pure-Python wheel: the module NAME.py and its dist-info. Used by make_wheel and, as
# source, by the sdists' build backend.
WHEEL_WRITER = r'''
import base64, hashlib, os, zipfile

def write_wheel(directory, name, version, code, requires=(), module=None, more=None,
                deflate=False):
    files = {(module or name + ".py"): code.encode()}
    files.update(more or {})
    info = "%s-%s.dist-info/" % (name, version)
    files[info + "METADATA"] = ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n%s" % (
        name, version, "".join("Requires-Dist: %s\n" % r for r in requires))).encode()
    files[info + "WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: tiny\nRoot-Is-Purelib: true\n"
                             b"Tag: py3-none-any\n")
    record = ""
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += "%s,sha256=%s,%d\n" % (path, digest, len(data))
    files[info + "RECORD"] = (record + info + "RECORD,,\n").encode()
    wheel = "%s-%s-py3-none-any.whl" % (name, version)
    with zipfile.ZipFile(os.path.join(directory, wheel), "w") as z:
        for path, data in files.items():
            info_ = zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0))
            info_.compress_type = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
            z.writestr(info_, data)
    return wheel
'''

BACKEND = WHEEL_WRITER + r'''
FAIL = @FAIL@
MARKER = @MARKER@

# Build code that leaves a trace where it ran: a file at MARKER, a host path (in a jail, that
# path is not the host's, or not there at all).
if MARKER:
    try:
        with open(MARKER, "w") as f:
            f.write("build code ran as uid %d\n" % os.getuid())
    except OSError:
        pass

@PLANT@

def get_requires_for_build_wheel(config_settings=None):
    return []

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    if FAIL:
        raise RuntimeError("tiny backend: this package does not build, on purpose")
    return write_wheel(wheel_directory, @NAME@, @VERSION@, @CODE@)
'''


def make_wheel(directory, name, version, code="VALUE = 42\n", requires=(), module=None,
               more=None, deflate=False):
    """module: the file the code goes in (NAME.py unless given, e.g. "NAME/__init__.py");
    more: other files, {path in the wheel: bytes}; deflate: compress every file (by default
    they are stored, so that a wheel is as large as its files)."""
    scope = {}
    exec(WHEEL_WRITER, scope)
    return Path(directory) / scope["write_wheel"](str(directory), name, version, code, requires,
                                                  module, more, deflate)


def sdist_files(name, version, code="VALUE = 42\n", fail=False, marker=None, plant=""):
    """{path: text} of a source tree whose own backend (backend-path) builds it; with
    `marker`, its build code writes that file first; `plant`: more build code, run then."""
    return {
        "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "tinybackend"\n'
                          'backend-path = ["."]\n',
        "tinybackend.py": BACKEND.replace("@FAIL@", repr(fail)).replace("@NAME@", repr(name))
                                 .replace("@VERSION@", repr(version)).replace("@CODE@", repr(code))
                                 .replace("@MARKER@", repr(marker and str(marker)))
                                 .replace("@PLANT@", plant),
        "PKG-INFO": "Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version),
        name + ".py": code,
    }


def make_project(directory, name, version, code="VALUE = 42\n", marker=None):
    """A source tree NAME/ in `directory` (what `pip install ./NAME` builds)."""
    top = Path(directory) / name
    top.mkdir()
    for rel, text in sdist_files(name, version, code, marker=marker).items():
        (top / rel).write_text(text)
    return top


def make_sdist(directory, name, version, code="VALUE = 42\n", fail=False, marker=None,
               plant=""):
    """NAME-VERSION.tar.gz in `directory`, built by its own backend (backend-path)."""
    top = "%s-%s/" % (name, version)
    files = sdist_files(name, version, code, fail, marker, plant)
    path = Path(directory) / ("%s-%s.tar.gz" % (name, version))
    with tarfile.open(path, "w:gz") as tar:
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(top + rel)
            info.size, info.mtime, info.mode = len(data), 1577836800, 0o644
            tar.addfile(info, io.BytesIO(data))
    return path


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()

