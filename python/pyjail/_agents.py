"""What the agent adapters (pyjail.langchain, pyjail.smolagents) share: which
rootfs they run on, what they tell the model about the jail, how much output
the model gets, and the checks of what the host sends in.

Everything here runs on the host. What it reads from a jail (the rootfs's lock
file, a list of modules, a snapshot of variables) is treated as hostile: it is
size-capped, decoded by the plain-data codec (never unpickled) and only ever
shown to the model as text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional

from ._common import JailError, PyjailError
from ._session import CellError, JailObject, Session

DEFAULT_OUTPUT_BUDGET = 16_000
"""Characters of output a tool hands the model by default: what a context
window takes without crowding out the conversation (a print loop can write
megabytes)."""

DATA_ROOTFS = "data"
"""The rootfs the adapters prefer: the one with numpy, pandas, matplotlib, ...
(``pyjail rootfs build --name data``), which code written by models expects."""

LOCK_IN_JAIL = "/etc/pyjail-rootfs.lock.json"
"""The rootfs's record of its packages (see ``pyjail rootfs info``)."""

INSTALL_DIR = "/tmp/site-packages"
"""Where packages installed in a session go (``pip install --target``; the
rootfs is read-only), appended to its ``sys.path``."""


class MissingModuleError(PyjailError, ModuleNotFoundError):
    """A module the agent is allowed to import is not in the jail's rootfs."""


class ValueNotSentError(PyjailError, ValueError):
    """A value the host gave could not be put into the jail."""


# ------------------------------------------------------------------ output

def fit_for_model(text: str, budget: Optional[int], unseen: int = 0) -> str:
    """``text`` cut to about ``budget`` characters for a model: its first and
    last whole lines, and between them a line saying how much was left out.
    A single line longer than its share is cut inside (there is no boundary).
    ``unseen``: bytes already left out of ``text`` (a session keeps the start
    and end of a cell's output), counted in the marker when it is cut.

    >>> fit_for_model("a\\nb\\n", 100)
    'a\\nb\\n'
    >>> print(fit_for_model("".join("line %d\\n" % i for i in range(1000)), 100), end="")
    line 0
    line 1
    [... 8858 characters (996 lines) left out ...]
    line 998
    line 999
    >>> print(fit_for_model("x" * 1000, 100).replace("x" * 10, "X"))
    Xxxxx
    [... 964 characters left out ...]
    XXxx
    """
    if budget is None or budget <= 0 or len(text) <= budget:
        return text
    room = max(budget - 64, 2)        # the marker's line takes the rest
    head_room = room * 2 // 5         # the end holds the error, when there is one
    tail_room = room - head_room
    head = text[:head_room]
    cut = head.rfind("\n")
    if cut >= 0:
        head = head[:cut + 1]
    tail = text[len(text) - tail_room:]
    cut = tail.find("\n")
    if 0 <= cut < len(tail) - 1:
        tail = tail[cut + 1:]
    middle = text[len(head):len(text) - len(tail)]
    lines = middle.count("\n")
    if unseen:
        marker = "[... about %d characters (more than %d lines) left out ...]\n" % (
            len(middle) + unseen, lines)
    else:
        marker = "[... %d characters%s left out ...]\n" % (
            len(middle), " (%d lines)" % lines if lines else "")
    if head and not head.endswith("\n"):
        marker = "\n" + marker
    return head + marker + tail


# ------------------------------------------------------------------ rootfs

def open_session(rootfs: Optional[Any], options: Mapping[str, Any]) -> "tuple[Session, str]":
    """A session on ``rootfs``; when None, on the ``data`` rootfs if it is
    installed, else on the installed default one. Returns it and the rootfs's
    name as the model should hear it."""
    if rootfs is not None:
        return Session(rootfs=rootfs, **options), str(rootfs)
    try:
        return Session(rootfs=DATA_ROOTFS, **options), DATA_ROOTFS
    except JailError as e:
        if e.step != "rootfs" or "no rootfs named %r" % DATA_ROOTFS not in e.message:
            raise
    return Session(**options), "default"


@dataclass
class JailFacts:
    """What a model should know about the jail its code runs in."""

    rootfs: Optional[str]
    """Its name as the caller gave it (None: a session the caller made)."""
    python: str = ""
    packages: List[str] = field(default_factory=list)
    network: bool = False
    hosts: List[str] = field(default_factory=list)
    """With controlled egress (``net="allow"``): the only hosts code can reach."""

    def describe(self) -> str:
        """One paragraph for a tool's description or a system prompt."""
        python = ("Python %s" % self.python) if self.python else "Python"
        if self.packages:
            have = "%s with its standard library and these packages: %s" % (
                python, ", ".join(self.packages))
        else:
            have = "%s with its standard library only (no third-party packages)" % python
        if not self.network:
            net = (" There is no network in this sandbox: code cannot download anything, call "
                   "web APIs or pip install packages.")
        elif self.hosts:
            net = (" The network reaches only these hosts (a port after the colon; else 80 "
                   "and 443): %s. Nothing else is reachable: other names do not resolve."
                   % ", ".join(self.hosts))
            if "pip" in self.packages:
                net += (" If the package index is among them, install a missing package with "
                        "subprocess.run([sys.executable, '-m', 'pip', 'install', '--target', "
                        "%r, NAME]) and then sys.path.append(%r)." % (INSTALL_DIR, INSTALL_DIR))
        else:
            net = ""
        where = " (rootfs %r)" % self.rootfs if self.rootfs else ""
        return ("The code runs in an isolated sandbox%s: %s.%s Files are in /work, "
                "the working directory; variables persist from one call to the next."
                % (where, have, net))


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MAX_PACKAGES_SHOWN = 60


def egress(session: Session) -> "tuple[bool, List[str]]":
    """Whether ``session`` has a network (any but ``net="none"``), and the
    hosts it may reach (controlled egress)."""
    net, hosts = session.egress
    return bool(net) and net != "none", hosts if net == "allow" else []


def read_lock(session: Session) -> Any:
    """The rootfs's lock, as JSON from the jail (at most 1 MiB; hostile: only
    read for names), or None (a rootfs built before locks existed)."""
    try:
        return json.loads(session.download(LOCK_IN_JAIL, max_bytes=1 << 20))
    except (OSError, ValueError, RecursionError, PyjailError):
        return None     # (RecursionError: JSON nested deeper than the host's stack)


def read_facts(session: Session, rootfs: Optional[str], network: bool) -> JailFacts:
    """The facts of ``session``'s jail, from the rootfs's lock file (what its
    build asked for; else every package in it). Only names that look like
    package names are kept: the answer comes from the jail."""
    facts = JailFacts(rootfs=rootfs, network=network, hosts=egress(session)[1] if network else [])
    python = session.server_info.get("python")
    if isinstance(python, str):
        facts.python = python.split()[0][:16]
    lock = read_lock(session)
    if lock is None:
        return facts      # no list to show
    names: List[str] = []
    if isinstance(lock, dict):
        requested = lock.get("requested")
        asked: List[Any] = []
        if isinstance(requested, dict):
            for key in ("requirements", "pip", "with"):
                value = requested.get(key)
                if isinstance(value, list):
                    asked += value
        if not asked and isinstance(lock.get("packages"), list):
            asked = [p.get("name") for p in lock["packages"] if isinstance(p, dict)]
        for item in asked:
            m = _NAME.match(item) if isinstance(item, str) else None
            if m and m.group(0) not in names:
                names.append(m.group(0))
    if len(names) > MAX_PACKAGES_SHOWN:
        names = names[:MAX_PACKAGES_SHOWN] + ["..."]
    facts.packages = names
    return facts


# ------------------------------------------------------------------ errors

_NETWORK_SIGNS = (
    "gaierror", "Name or service not known", "Temporary failure in name resolution",
    "No address associated with hostname", "Network is unreachable", "NewConnectionError",
    "Failed to establish a new connection", "URLError", "MaxRetryError", "ConnectTimeout",
    "Max retries exceeded", "NameResolutionError",
)
_SOCKET_DENIED = re.compile(r"socket|connect|urlopen|requests|http", re.I)

NO_NETWORK_NOTE = ("[pyjail] There is no network in this sandbox: this code cannot reach the "
                   "internet or any other host. Work with the files in /work and the data you "
                   "were given.")


def network_note(error: Optional[CellError], network: bool) -> Optional[str]:
    """NO_NETWORK_NOTE when ``error`` is the jail refusing a connection or a
    name lookup (an agent that reads "Name or service not known" retries
    forever), else None."""
    if error is None or network:
        return None
    text = "%s\n%s\n%s" % (error.type, error.message, error.traceback)
    if any(sign in text for sign in _NETWORK_SIGNS):
        return NO_NETWORK_NOTE
    if error.type in ("PermissionError", "ConnectionError", "ConnectionRefusedError",
                      "OSError") and _SOCKET_DENIED.search(error.traceback or ""):
        return NO_NETWORK_NOTE
    return None


_MISSING_MODULE = re.compile(r"No module named '([A-Za-z0-9_.]{1,100})'")


def missing_module_note(error: Optional[CellError], facts: "JailFacts") -> Optional[str]:
    """For an import of a module the rootfs lacks: that nothing can be
    installed here, and what there is (a model's next move is pip install)."""
    if error is None or error.type != "ModuleNotFoundError":
        return None
    m = _MISSING_MODULE.search(error.message)
    name = "%r" % m.group(1) if m else "that module"
    have = ("its packages are: %s" % ", ".join(facts.packages) if facts.packages
            else "it has the standard library only")
    if facts.network and facts.hosts and "pip" in facts.packages:
        return ("[pyjail] There is no module %s in this sandbox; %s. pip can install a package "
                "from the package index if it is one of the reachable hosts (%s), with "
                "--target %r, then sys.path.append(%r)."
                % (name, have, ", ".join(facts.hosts), INSTALL_DIR, INSTALL_DIR))
    return ("[pyjail] There is no module %s in this sandbox, and nothing can be installed "
            "here (no network, no pip); %s." % (name, have))


def is_plain(value: Any) -> bool:
    """Did the value come back as plain data (not a JailObject standing for it)?"""
    return not isinstance(value, JailObject)


# ------------------------------------------------------------------ into the jail

def send_values(session: Session, values: Mapping[str, Any], what: str) -> None:
    """Put ``values`` into the session's namespace (plain data as it is, other
    objects pickled: host to jail only). Raises ValueNotSentError naming every
    value that did not make it, and why: nothing is dropped silently."""
    if not values:
        return
    failed = session.set_variables(dict(values))
    if failed:
        raise ValueNotSentError(
            "pyjail: %s not put into the jail: %s (a value that is not plain data is "
            "pickled, and the jail's rootfs must have the modules of its class: choose a "
            "rootfs that has them, e.g. rootfs='data')"
            % (what, "; ".join("%s: %s" % kv for kv in failed.items())))


_FIND_PACKAGES = """\
def missing(names):
    import importlib.metadata, importlib.util
    out = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except Exception:
            found = False
        if not found:
            try:
                importlib.metadata.distribution(name)
                found = True
            except Exception:
                pass
        if not found:
            out.append(name)
    return out
"""

# Runs pip in the jail as smolagents' Docker and E2B executors do in theirs, into a directory
# the session then has on sys.path (the rootfs is read-only).
_PIP_INSTALL = """\
def install(names, target):
    import importlib, subprocess, sys
    p = subprocess.run([sys.executable, '-m', 'pip', 'install', '--no-input',
                        '--disable-pip-version-check', '--target', target, *names],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, errors='replace')
    if target not in sys.path:
        sys.path.append(target)
    importlib.invalidate_caches()
    return [p.returncode, p.stdout[-2000:]]
"""

# A name only: one that starts with "-" would be a pip option (--index-url, --editable),
# and a path or URL a package from elsewhere than the allowed index.
_PACKAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}\Z")
PIP_TIMEOUT = 600.0
"""Seconds pip may take to install the missing packages in a session."""


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _wanted(names: Iterable[str]) -> List[str]:
    """``pkg.*`` means ``pkg``; ``*`` (anything) is not checked."""
    wanted: List[str] = []
    for name in names:
        name = name[:-2] if name.endswith(".*") else name
        if name != "*" and name and name not in wanted:
            wanted.append(name)
    return wanted


def _in_jail(session: Session, source: str, function: str, args: "tuple[Any, ...]",
             timeout: float) -> Any:
    """``function(*args)``, defined in ``source``, run in the session as one
    expression (no name is left in its namespace); its result as plain data."""
    code = "(lambda ns: (exec(%r, ns), ns[%r](*%r))[1])({})" % (source, function, args)
    result = session.run(code, timeout=timeout, want_data=True)
    if not result.ok:
        raise PyjailError("pyjail: could not check the jail's packages: %s" % result.error)
    return result.data


def missing_modules(session: Session, names: Iterable[str]) -> List[str]:
    """The names among ``names`` the session has neither as a module nor as
    an installed distribution (``pillow`` as well as ``PIL``): what the
    rootfs's lock lists by distribution name, else what the jail finds."""
    wanted = _wanted(names)
    lock = read_lock(session) if wanted else None
    locked = set()
    if isinstance(lock, dict) and isinstance(lock.get("packages"), list):
        locked = {_canonical(p["name"]) for p in lock["packages"]
                  if isinstance(p, dict) and isinstance(p.get("name"), str)}
    rest = [n for n in wanted if _canonical(n) not in locked]
    if not rest:
        return []
    data = _in_jail(session, _FIND_PACKAGES, "missing", (rest,), 60)
    if not isinstance(data, list) or not all(isinstance(n, str) and n in rest for n in data):
        raise PyjailError("pyjail: could not check the jail's packages: a malformed answer")
    return list(data)


def _missing_error(text: str, missing: List[str]) -> MissingModuleError:
    err = MissingModuleError(text)
    err.name = missing[0]
    return err


def check_modules(session: Session, names: Iterable[str], rootfs: Optional[str],
                  asked_as: str, install: bool = False) -> List[str]:
    """Check that the session has each of ``names``, a distribution
    (``pillow``) or a module (``PIL``). With ``install`` (the session has
    controlled egress), pip installs the missing ones into INSTALL_DIR, on
    the session's ``sys.path``; returns what it installed. Raises
    MissingModuleError naming what is still missing and the fix."""
    missing = missing_modules(session, names)
    if not missing:
        return []
    where = repr(rootfs) if rootfs else "(the given session's)"
    them = "it" if len(missing) == 1 else "them"
    listed = ", ".join(repr(m) for m in missing)
    if not install:
        raise _missing_error(
            "pyjail: the jail's rootfs %s has no package %s (named in %s, as a distribution "
            "or a module), and the session cannot install %s: it has no allowed package index. "
            "Use a rootfs that has %s (rootfs='data', or build one: pyjail rootfs build --name "
            "NAME --pip PACKAGE), give the session the index (net='allow', allow_hosts=["
            "'pypi.org', 'files.pythonhosted.org']) to pip install %s there, or leave %s out"
            % (where, listed, asked_as, them, them, them, them), missing)
    bad = [m for m in missing if not _PACKAGE_NAME.match(m)]
    if bad:
        raise _missing_error("pyjail: %s in %s: not a package name pip can install"
                             % (", ".join(repr(m) for m in bad), asked_as), missing)
    data = _in_jail(session, _PIP_INSTALL, "install", (missing, INSTALL_DIR), PIP_TIMEOUT)
    status, log = (data if isinstance(data, list) and len(data) == 2 else (None, ""))
    still = missing_modules(session, missing)
    if still:
        last = [l for l in str(log).splitlines() if l.strip()][-3:]
        raise _missing_error(
            "pyjail: the jail's rootfs %s has no package %s (named in %s), and pip could not "
            "install %s in the session (exit status %s: %s). Check that the package index is "
            "among the allowed hosts (and PIP_INDEX_URL in env= for another index), or use a "
            "rootfs that has %s (pyjail rootfs build --name NAME --pip PACKAGE)"
            % (where, ", ".join(repr(m) for m in still), asked_as,
               "it" if len(still) == 1 else "them", status, " | ".join(last)[-600:] or "no output",
               "it" if len(still) == 1 else "them"), still)
    return missing


_SNAPSHOT = """\
def plain_variables(ns):
    kinds = (type(None), bool, int, float, str, bytes)
    def plain(v, depth):
        if depth > 20:
            return False
        if type(v) in kinds:
            return True
        if type(v) in (list, tuple, set, frozenset):
            return all(plain(x, depth + 1) for x in v)
        if type(v) is dict:
            return all(plain(k, depth + 1) and plain(x, depth + 1) for k, x in v.items())
        return False
    out, room = {}, 512 * 1024
    for k, v in list(ns.items()):
        if k.startswith('_') or not plain(v, 0):
            continue
        size = len(repr(v))
        if size > 65536 or size > room:
            continue
        room -= size
        out[k] = v
    return out
"""


def plain_variables(session: Session) -> Dict[str, Any]:
    """A snapshot of the session's variables that are plain data (str,
    numbers, bytes, lists, tuples, dicts, sets of them; none over 64 KiB as
    text, 512 KiB in all), decoded by the plain-data codec: nothing from the jail is
    unpickled. Functions, modules and other objects stay in the jail."""
    code = ("(lambda ns: (exec(%r, ns), ns['plain_variables'](globals()))[1])({})"
            % _SNAPSHOT)
    result = session.run(code, timeout=60, want_data=True)
    data = result.data
    if not result.ok or not isinstance(data, dict) or \
            not all(isinstance(k, str) for k in data):
        raise PyjailError("pyjail: could not read the session's variables: %s"
                          % (result.error or "they did not come back as plain data"))
    return data
