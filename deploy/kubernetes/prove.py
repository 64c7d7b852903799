"""What deploy/kubernetes/prove-podman.sh checks through pyjail.remote against the service in
its pod: cells and sessions, the jail's limits and isolation (the essentials of the attack
suites, tests/integration/test_jail_*.py), and, with --after-delete, that a session of a
deleted pod fails at once with SessionDiedError.

    python3 prove.py URL TOKEN              # the checks; leaves one session open, prints its id
    python3 prove.py URL TOKEN --after-delete SESSION_ID
"""

import sys
import threading
import time

import pyjail
import pyjail.remote


def check(what, ok, detail=""):
    print("%s  %s%s" % ("ok  " if ok else "FAIL", what, (": " + detail) if detail and not ok else ""))
    if not ok:
        check.failed += 1


check.failed = 0

ATTACKS = {
    # name: (code, what the jail must answer)
    "no network (connect to a public address)":
        ("import socket\ntry:\n socket.create_connection(('1.1.1.1', 53), timeout=3)\n"
         " print('CONNECTED')\nexcept OSError as e:\n print('refused', e.errno)", "refused"),
    "no name resolution":
        ("import socket\ntry:\n socket.getaddrinfo('example.com', 80)\n print('RESOLVED')\n"
         "except OSError:\n print('refused')", "refused"),
    "only the jail's processes are visible":
        ("import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit())[:3])",
         "[1, "),
    "the root file system is read-only":
        ("try:\n open('/usr/evil', 'w')\n print('WROTE')\nexcept OSError as e:\n"
         " print('refused', e.errno)", "refused"),
    "mount is denied":
        ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
         "r = libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)\n"
         "print('refused' if r != 0 else 'MOUNTED')", "refused"),
    "no new user namespace inside the jail":
        ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
         "print('refused' if libc.unshare(0x10000000) != 0 else 'UNSHARED')", "refused"),
    "ptrace of pid 1 is denied":
        ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
         "print('refused' if libc.ptrace(16, 1, None, None) != 0 else 'ATTACHED')", "refused"),
    "the pod's service account and host paths are absent":
        ("import os\nprint('absent' if not any(os.path.exists(p) for p in ("
         "'/var/run/secrets', '/run/pyjail', '/secret', '/usr/local/bin/pyjail')) else 'SEEN')",
         "absent"),
    "no capabilities":
        ("print('none' if open('/proc/self/status').read().split('CapEff:')[1].split()[0]"
         " == '0000000000000000' else 'HAS CAPS')", "none"),
}


def main():
    url, token = sys.argv[1], sys.argv[2]
    pool = pyjail.remote.connect(url, token=token)
    if "--after-delete" in sys.argv:
        sid = sys.argv[sys.argv.index("--after-delete") + 1]
        s = pyjail.remote.RemoteSession(pool, {"id": sid}, None)
        outcome = []

        def call():
            try:
                s.run("1 + 1")
                outcome.append("answered")
            except pyjail.SessionDiedError as e:
                outcome.append(e)
        t = threading.Thread(target=call, daemon=True)
        start = time.monotonic()
        t.start()
        t.join(60)
        check("a session of the deleted pod raises SessionDiedError, without hanging",
              not t.is_alive() and outcome and isinstance(outcome[0], pyjail.SessionDiedError),
              "%r after %.1f s" % (outcome, time.monotonic() - start))
        return 1 if check.failed else 0

    r = pool.run("print(6 * 7)")
    check("a fresh run", r.ok and r.stdout == "42\n", repr(r))
    with pool.session() as s:
        s.run("x = 20")
        c = s.run("x * 2 + 2")
        check("a session keeps its state", c.value == "42", repr(c))
        s.upload("in.txt", b"abc")
        s.run("open('/work/out.txt', 'w').write(open('/work/in.txt').read().upper())")
        check("files in and out of /work", s.download("out.txt") == b"ABC")
        c = s.run("import time\ntime.sleep(30)", timeout=1)
        check("a cell's time limit (the session lives on)", c.timed_out and
              s.run("x").value == "20", repr(c))
    r = pool.run("x = bytearray(900 << 20)", memory="256M")
    check("a run's memory limit", not r.ok and "MemoryError" in r.stderr, r.stderr[-300:])
    r = pool.run("import time\ntime.sleep(30)", timeout=1)
    check("a run's time limit", r.status == "wall-timeout", r.status)
    r = pool.run("import os\nn = 0\ntry:\n while True:\n  if os.fork() == 0:\n"
                 "   import time; time.sleep(5); os._exit(0)\n  n += 1\nexcept OSError:\n"
                 " print('stopped at', n)")
    check("a fork bomb stops at the pids limit", "stopped at" in r.stdout, r.stdout + r.stderr)
    for name, (code, want) in ATTACKS.items():
        r = pool.run(code)
        check(name, want in r.stdout, (r.stdout + r.stderr)[-300:])
    # One session left open in the pod, for the --after-delete check.
    s = pool.session()
    s.run("kept = 1")
    print("SESSION", s.id)
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
