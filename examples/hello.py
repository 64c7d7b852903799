"""A first program to run in the jail: it looks around and reports what it can reach."""
import getpass
import os
import pathlib
import socket
import sys

print(f"Hello from Python {sys.version.split()[0]}, running as {getpass.getuser()!r} "
      f"(uid {os.getuid()}) in {os.getcwd()}")
print("visible in /:", " ".join(sorted(os.listdir("/"))))
print("visible in the working directory:", " ".join(sorted(os.listdir("."))))
print("processes:", " ".join(sorted(p for p in os.listdir("/proc") if p.isdigit())))

pathlib.Path("result.txt").write_text("written in the jail; gone when it ends\n")
print("wrote result.txt in the private working directory (gone when the jail ends); home is",
      pathlib.Path.home())

try:
    socket.create_connection(("127.0.0.1", 22), timeout=2)
    print("network: reachable (!)")
except OSError as e:
    print(f"network: unreachable ({e.strerror})")

try:
    open("/usr/new-file", "w")
    print("rootfs: writable (!)")
except OSError as e:
    print(f"rootfs: read-only ({e.strerror})")
