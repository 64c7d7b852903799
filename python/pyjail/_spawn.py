"""The in-jail half of ``pyjail.run`` with files (installed in the rootfs as
``/usr/lib/pyjail/pyjail_spawn.py``): the ``spawn`` operation of the in-jail
server (see _wire's protocol description).

The program runs as a child of the server, which has made itself
non-dumpable before (see _server._become_unreachable): the program, though it
has the same uid, can reach neither the channel nor the server's memory. Its
output streams to the driver in ``out`` frames; once it has ended, nothing it
started is left running, and the files it wrote or changed in the work
directory go back in one ``exited`` frame, within the driver's caps. The
server then exits with the program's status. Runs only in the jail; standard
library only.
"""

import os
import sys
TYPE_CHECKING = False     # typing's, without importing typing (see _wire)

if TYPE_CHECKING or __package__:     # imported from the host's pyjail package (its tests)
    from ._wire import HEADER_FROM_JAIL, SKIPPED_LIMIT, WORKDIR, _encode_json, list_files
else:               # in the jail, as pyjail_spawn (see _wire.JAIL_MODULES)
    from pyjail_wire import HEADER_FROM_JAIL, SKIPPED_LIMIT, WORKDIR, _encode_json, list_files


def serve_spawn(server, rid, header, body):
    """Run the program of ``header["argv"]`` ("{python}" is this interpreter)
    with ``body`` as its stdin, stream its output, then send its status and
    the files it wrote; set ``server.exit_status``."""
    import threading
    signal = server.signal
    argv = [sys.executable if a == "{python}" else a for a in header["argv"]]
    child = [None]

    def forward(signum, frame):
        if child[0] is not None:
            try:
                child[0].send_signal(signum)
            except OSError:
                pass

    # pyjail relays SIGINT and SIGTERM to this process: pass them on.
    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    try:
        if header["argv"][:2] == ["{python}", header.get("script")] and "pyjail_template" in sys.modules:
            # A run from a template (pyjail serve): the program is a fork of this
            # interpreter, with the template's modules already imported. With python
            # options it is a fresh interpreter instead, which reads them itself (the
            # template reads no command line: pyjail parses a run's).
            proc = child[0] = _Forked(header["argv"][1], header["argv"][2:])
        else:
            proc = child[0] = _Spawned(argv)
    except OSError as e:
        server.reply_error(rid, e)
        server.exit_status = 127
        return

    def pump(src, stream):
        while True:
            data = os.read(src.fileno(), 1 << 16)
            if not data:
                return
            server.send({"op": "out", "stream": stream}, data)

    def feed():
        try:
            proc.stdin.write(body)
        except OSError:
            pass
        try:
            proc.stdin.close()
        except OSError:
            pass

    threads = [threading.Thread(target=pump, args=(proc.stdout, 1)),
               threading.Thread(target=pump, args=(proc.stderr, 2)),
               threading.Thread(target=feed)]
    for t in threads:
        t.daemon = True
        t.start()
    status = proc.wait()
    # As after a plain run, nothing the program started outlives it.
    server.kill_others()
    for t in threads[:2]:
        t.join()
    files, skipped, blobs = _collect(header) if header.get("collect") else ([], [], [])
    # Set first: the driver closes the channel as soon as it has this frame.
    server.exit_status = status
    server.send({"op": "exited", "id": rid, "status": status, "files": files,
                 "skipped": skipped}, b"".join(blobs))


class _Child:
    """The program, with what serve_spawn needs of a Popen: its pid, our ends
    of its three pipes (stdin, stdout, stderr), send_signal and wait."""

    pid = -1
    returncode = None

    def _take_pipes(self, pipes):
        """Close the program's ends of ``pipes`` (stdin's reading end, the
        writing ends of stdout and stderr); keep ours."""
        os.close(pipes[0][0])
        os.close(pipes[1][1])
        os.close(pipes[2][1])
        self.stdin = open(pipes[0][1], "wb")    # buffered: a write is whole, as Popen's
        self.stdout = open(pipes[1][0], "rb", buffering=0)
        self.stderr = open(pipes[2][0], "rb", buffering=0)

    def send_signal(self, signum):
        if self.returncode is None:
            os.kill(self.pid, signum)

    def wait(self):
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


class _Spawned(_Child):
    """The program as a process of its own (``os.posix_spawnp``), as
    ``subprocess.Popen(argv, stdin=PIPE, stdout=PIPE, stderr=PIPE,
    close_fds=True)`` in the work directory would start it, without the
    subprocess module: its import (locale, and with it re and enum) took the
    jail 10-12 ms of every ``pyjail.run`` with files. The program gets its
    three pipes and no other descriptor of this server (any inheritable one is
    closed for it), this server's directory (WORKDIR), signals as Popen leaves
    them (none blocked; SIGPIPE and SIGXFSZ, which Python ignores, back to
    their defaults). OSError if it cannot be started."""

    def __init__(self, argv):
        import _signal
        pipes = [os.pipe() for _ in range(3)]
        actions = [(os.POSIX_SPAWN_DUP2, pipes[0][0], 0), (os.POSIX_SPAWN_DUP2, pipes[1][1], 1),
                   (os.POSIX_SPAWN_DUP2, pipes[2][1], 2)]
        # close_fds=True's part: Python's own descriptors are close-on-exec (PEP 446),
        # but one inherited or made inheritable is closed for the program here.
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd > 2 and fd not in pipes[0] + pipes[1] + pipes[2]:
                try:
                    if os.get_inheritable(fd):
                        actions.append((os.POSIX_SPAWN_CLOSE, fd))
                except OSError:
                    pass    # the listing's own descriptor, closed by now
        try:
            self.pid = os.posix_spawnp(argv[0], argv, os.environ, file_actions=actions,
                                       setsigmask=(),
                                       setsigdef=(_signal.SIGPIPE, _signal.SIGXFSZ))
        except BaseException:
            for r, w in pipes:
                os.close(r)
                os.close(w)
            raise
        self._take_pipes(pipes)


class _Forked(_Child):
    """The program as a fork of this interpreter, in a template's run. The
    child gets fresh standard streams on the pipes and nothing else of the
    server (its channel is closed), then runs the program as ``python ARGS``
    would (pyjail_template.run_program)."""

    def __init__(self, script, args):
        import signal
        pipes = [os.pipe() for _ in range(3)]
        env = ["%s=%s" % kv for kv in os.environ.items()]
        self.pid = os.fork()
        if self.pid == 0:
            try:
                for fd, (r, w) in enumerate(pipes):
                    os.dup2(r if fd == 0 else w, fd)
                os.closerange(3, os.sysconf("SC_OPEN_MAX"))
                sys.stdin = sys.__stdin__ = open(0, "r", closefd=False)
                sys.stdout = sys.__stdout__ = open(1, "w", closefd=False)
                sys.stderr = sys.__stderr__ = open(2, "w", buffering=1, closefd=False,
                                                   errors="backslashreplace")
                os.chdir(WORKDIR)
                signal.signal(signal.SIGINT, signal.default_int_handler)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                import pyjail_template
                pyjail_template._exit_fast(pyjail_template.run_program("file", script, args, [], env))
            finally:
                os._exit(127)
        self._take_pipes(pipes)


def _collect(header):
    """The files under the work directory that match ``collect`` and that the
    program created or changed, within the caps: ([name, size] entries, skipped
    [name, size, why] entries, their contents)."""
    files, skipped, blobs = [], [], []
    collect = header["collect"]
    budget = header["max_bytes"]
    max_files = header["max_files"]
    inputs = {k: tuple(v) for k, v in header["inputs"].items()}
    patterns = None if collect is True else list(collect)
    # The names must fit in one header the driver accepts.
    names_room = HEADER_FROM_JAIL // 2
    skipped_room = HEADER_FROM_JAIL // 4

    def skip(rel, size, why):
        nonlocal skipped_room
        entry = [rel, size, why]
        skipped_room -= len(_encode_json(entry)) + 1
        if skipped_room >= 0 and len(skipped) < SKIPPED_LIMIT:
            skipped.append(entry)

    for rel, size in list_files(WORKDIR, patterns, 100000):
        path = os.path.join(WORKDIR, rel)
        try:
            st = os.stat(path)
        except OSError:
            continue
        if inputs.get(rel) == (st.st_size, st.st_mtime_ns):
            continue   # an input the program did not change
        if rel == header["script"]:
            continue
        if len(files) >= max_files:
            skip(rel, size, "more than %d files" % max_files)
            continue
        if size > budget:
            skip(rel, size, "over the size budget")
            continue
        room = len(_encode_json([rel, size])) + 1
        if room > names_room:
            skip(rel, size, "the list of names is full")
            continue
        try:
            with open(path, "rb") as f:
                data = f.read(budget + 1)
        except OSError as e:
            skip(rel, size, "unreadable: %s" % e.strerror)
            continue
        if len(data) > budget:
            skip(rel, len(data), "over the size budget")
            continue
        budget -= len(data)
        names_room -= room
        files.append([rel, len(data)])
        blobs.append(data)
    return files, skipped, blobs
