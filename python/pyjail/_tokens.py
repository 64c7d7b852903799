"""Bearer tokens of the network services (pyjail-server, pyjail-mcp over HTTP):
the tokens file, read once at start, and the check of a request's
``Authorization`` header. Only the tokens' SHA-256 digests are kept."""

import hashlib
import hmac
import os
import stat
from typing import Dict, Optional

MAX_HEADER = 4096


def read_tokens(path: str, prog: str = "pyjail-server") -> Dict[bytes, str]:
    """{sha256(token): tenant} from a ``TENANT TOKEN`` file that only its owner can read."""
    # Secrets in a file others can read are not secrets: refuse it rather than serve.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise SystemExit("%s: --tokens %s: %s" % (prog, path, e.strerror))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SystemExit("%s: --tokens %s: not a regular file" % (prog, path))
        if st.st_mode & 0o077:
            raise SystemExit("%s: --tokens %s: mode %o lets others read the tokens; "
                             "chmod 600 it" % (prog, path, stat.S_IMODE(st.st_mode)))
        data = os.read(fd, 1 << 20)
    finally:
        os.close(fd)
    out: Dict[bytes, str] = {}
    for n, line in enumerate(data.decode("utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2 or len(parts[1]) < 16:
            raise SystemExit("%s: --tokens %s:%d: give TENANT TOKEN (a token of 16 "
                             "characters or more)" % (prog, path, n))
        out[hashlib.sha256(parts[1].encode()).digest()] = parts[0]
    if not out:
        raise SystemExit("%s: --tokens %s: no TENANT TOKEN line" % (prog, path))
    return out


def tenant_of(tokens: Dict[bytes, str], authorization: Optional[str]) -> Optional[str]:
    """The tenant whose token ``Authorization: Bearer TOKEN`` carries, else None."""
    if not authorization or not authorization.startswith("Bearer ") or \
            len(authorization) > MAX_HEADER:
        return None
    given = hashlib.sha256(authorization[7:].strip().encode("utf-8", "replace")).digest()
    found = None
    # Every token is compared, each in constant time: neither the time to answer nor
    # its order tells an attacker how much of a token was right, or which.
    for digest, tenant in tokens.items():
        if hmac.compare_digest(digest, given):
            found = tenant
    return found
