"""The Python half of a pyjail template (``pyjail serve``), run by the rootfs's
interpreter in a jail as ``python -I -c BOOT MODULE...``.

It imports the modules to preload (from the rootfs: the template has no other
files and runs nothing it was sent), freezes what it built so that the runs
share it copy-on-write, and hands over to ``_pyjail_template.serve``, which
answers run requests in C++ and never returns in the template. It returns in
each run's program, whose jail is complete by then, with the program's command
(parsed by pyjail's command.cpp: this file reads no command line) and
environment: ``run_program`` then runs it as ``python ARGS`` would.

What a run shares with the template and every other run, because it is a fork
of the same interpreter: the address-space layout (ASLR is per template), the
str/bytes hash seed (PYTHONHASHSEED), the interpreter's flags (``-I -S``; site
has run all the same), and the
preloaded modules as they were after import. Random generators are reseeded
in each run: ``random`` by its own at-fork hook, numpy's global generator
by _pyjail_template in place (or here, through numpy, where it cannot).
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main(preload):
    # Before any module of the rootfs's site-packages runs (the interpreter started with -S:
    # site's .pth files would have run before this line): the template's capabilities stay
    # permitted only, effective only while a run is set up. Then site, as python runs it.
    import _pyjail_template
    _pyjail_template.lower_capabilities()
    import site
    site.main()
    import importlib
    # What every run uses to start and end its program: imported once, here (pkgutil and
    # runpy: what runs a module or an archive, half a millisecond of each such run if it
    # imported them itself).
    import atexit, pkgutil, runpy, signal, threading, traceback, types  # noqa: F401,E401
    for name in preload:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name is None or not (name == e.name or name.startswith(e.name + ".")):
                raise    # something the module imports is missing: its traceback says what
            # The module itself is not in the rootfs: one line, not the import machinery's traceback.
            sys.stderr.write("pyjail template: --preload %s: no module named %r in the rootfs "
                             "(pyjail rootfs info ROOTFS lists its packages)\n" % (name, e.name))
            return 1
    _preload_session_server()
    _keep_numpy_generator()
    import gc
    gc.collect()
    gc.freeze()        # the runs' first collection does not touch (and copy) these pages
    # What the runs share, settled: in huge pages, each run's fork and exit are cheaper.
    _pyjail_template.collapse_into_huge_pages()
    sys.stdout.flush()
    sys.stderr.flush()
    global _TEMPLATE_MODULES
    _TEMPLATE_MODULES = frozenset(sys.modules)
    got = _pyjail_template.serve(0, os.path.join(HERE, "pyjail-reaper"))
    if got is None:    # the server has gone
        return 0
    _exit_fast(run_program(*got))


_TEMPLATE_MODULES = frozenset()

# The rootfs's session server (the in-jail half of pyjail.Session and of pyjail.run with
# files), as the driver's boot names it: its modules under SESSION_SERVER_DIR, in the order
# the driver hashes them (pyjail._wire.JAIL_MODULES).
SESSION_SERVER_DIR = "/usr/lib/pyjail"
SESSION_SERVER_MODULES = ("pyjail_wire", "pyjail_spawn", "pyjail_server")
# The hash of the copies imported here (as the driver's boot computes it: sha256 over the
# sha256 of each module), or None: none was imported.
SESSION_SERVER_SHA256 = None


def _preload_session_server():
    """Import the rootfs's session server once, here: a session forked from this template
    finds it imported, and its boot (pyjail._launch) neither hashes nor imports it again when
    SESSION_SERVER_SHA256 is the hash it wants. A rootfs without it (or whose copy does not
    import) leaves the boot to do as in a fresh jail. It is the rootfs's trusted code, as the
    preloads are: importing it runs nothing but definitions."""
    global SESSION_SERVER_SHA256
    import hashlib
    h = hashlib.sha256()
    try:
        for name in SESSION_SERVER_MODULES:
            with open(os.path.join(SESSION_SERVER_DIR, name + ".py"), "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
    except OSError:
        return
    sys.path.insert(0, SESSION_SERVER_DIR)
    try:
        for name in SESSION_SERVER_MODULES:
            __import__(name)
    except Exception:
        for name in SESSION_SERVER_MODULES:
            sys.modules.pop(name, None)
        return
    finally:
        del sys.path[0]
    SESSION_SERVER_SHA256 = h.hexdigest()


def _exit_fast(code):
    """End the run's program as the interpreter's exit would, less the teardown
    of the template's modules (a tenth of a second with pandas loaded, paid by
    every run): wait for its threads, run its atexit functions, free what it
    made (closing its files), flush, exit."""
    try:
        import threading
        threading._shutdown()
    except BaseException:
        pass
    try:
        import atexit
        atexit._run_exitfuncs()
    except BaseException:
        pass
    # The run's own modules (__main__ and what it imported), cleared in the order the
    # interpreter clears a module: names with one leading underscore first, then the rest
    # but __builtins__.
    try:
        names = sys.modules["_pyjail_template"].modules_not_in(sys.modules, _TEMPLATE_MODULES)
    except BaseException:
        names = [n for n in list(sys.modules) if n == "__main__" or n not in _TEMPLATE_MODULES]
    for name in names:
        _clear_module(sys.modules.get(name))
    try:
        import gc
        gc.collect()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            if not stream.closed:   # as python: a stream the program closed is not flushed
                stream.flush()
        except BaseException:
            if code == 0:
                code = 120   # as python does when it cannot flush stdout
    os._exit(code)


def _clear_module(module):
    try:
        d = module.__dict__
        for key in [k for k in d if k[:1] == "_" and k[:2] != "__"]:
            d[key] = None
        for key in [k for k in d if k != "__builtins__"]:
            d[key] = None
    except BaseException:
        pass


# Whether _pyjail_template holds numpy.random's global generator, which each run then reseeds
# in place (numpy_reseed.hpp): numpy's seed() in a fresh fork copies about 170 of the
# template's pages, 0.4 ms of every run's way to its first line; the write in place a page or two.
_NUMPY_IN_PLACE = False


def _keep_numpy_generator():
    """In the template, with numpy.random preloaded: its global generator seeded here (which
    also drops a normal the legacy generator may have cached: no run starts with one), then
    handed to _pyjail_template if it is numpy's MT19937 as the module knows it."""
    global _NUMPY_IN_PLACE
    np_random = sys.modules.get("numpy.random")
    if np_random is None:
        return
    _seed_through_numpy(np_random)
    try:
        bit_generator = np_random.mtrand._rand._bit_generator
    except AttributeError:
        return
    _NUMPY_IN_PLACE = sys.modules["_pyjail_template"].keep_numpy_generator(bit_generator)


def _reseed():
    np_random = sys.modules.get("numpy.random")
    if np_random is None:
        return
    if _NUMPY_IN_PLACE and sys.modules["_pyjail_template"].reseed_numpy():
        return
    _seed_through_numpy(np_random)


def _seed_through_numpy(np_random):
    """The whole state (624 words) from the kernel's entropy, as MT19937 takes a key."""
    numpy = sys.modules["numpy"]
    np_random.seed(numpy.frombuffer(os.urandom(624 * 4), dtype=numpy.uint32))


def _apply_options(options):
    """python's options as the client parsed them (pyjail's command.cpp), each one
    a run from a template honours: what it does, done here. -q -E -s: nothing to
    do (the template's interpreter runs with -I: no PYTHON* variable, no user
    site). Returns (unbuffered, safe_path)."""
    unbuffered = safe_path = False
    warnoptions = []
    for letter, value in options:
        if letter == "u":
            unbuffered = True
        elif letter == "B":
            sys.dont_write_bytecode = True
        elif letter in "IP":
            safe_path = True
        elif letter == "W":
            warnoptions.append(value)
            sys.warnoptions.append(value)
        elif letter == "X":
            name, eq, arg = value.partition("=")
            sys._xoptions[name] = arg if eq else True
            if name in ("dev", "faulthandler"):
                import faulthandler
                faulthandler.enable()
            if name == "dev":
                # As the development mode's warning filter: before the -W ones, which win.
                warnoptions.insert(0, "default")
    if warnoptions:
        import warnings
        warnings._processoptions(warnoptions)
    return unbuffered, safe_path


def _new_main():
    """A fresh __main__ module's namespace, as python's start makes it (add_main_module
    in CPython's pylifecycle.c): __annotations__, the builtins module, and the builtin
    importer as __loader__ until a file's loader replaces it."""
    import builtins
    import types
    from importlib.machinery import BuiltinImporter
    main = types.ModuleType("__main__")
    namespace = main.__dict__
    namespace["__annotations__"] = {}
    namespace["__builtins__"] = builtins
    namespace["__loader__"] = BuiltinImporter
    sys.modules["__main__"] = main
    return namespace


def _run_file(target, namespace, safe_path):
    """``python FILE``, as CPython's pymain_run_python and _PyRun_SimpleFileObject run it.
    A directory or zip archive: its __main__ module, the archive first on sys.path.
    Compiled code (.pyc, or the bytecode's magic): unmarshalled, a SourcelessFileLoader.
    Source: compiled from the file's bytes (so its coding cookie holds), a
    SourceFileLoader. __file__ and __cached__ are set while it runs, as python sets them.
    (runpy's run_path, which ran every file before, left __loader__ None and took half a
    millisecond more of each run: a zip importer tried first, a temporary module.)"""
    import importlib.util
    import pkgutil
    import runpy
    from importlib.machinery import SourceFileLoader, SourcelessFileLoader
    path = os.path.abspath(target)
    data = None if os.path.isdir(target) else _read(path)
    # Only a file that ends as a zip archive does (its directory's record) is asked of the
    # import system, as python asks it of every script.
    if data is None or (b"PK\x05\x06" in data[-(1 << 16) - 22:] and pkgutil.get_importer(target) is not None):
        sys.path.insert(0, target)
        runpy._run_module_as_main("__main__", alter_argv=False)
        return
    if not safe_path:
        sys.path.insert(0, os.path.dirname(path))
    namespace["__file__"] = path
    namespace["__cached__"] = None
    try:
        if path.endswith(".pyc") or data[:2] == importlib.util.MAGIC_NUMBER[:2]:
            if data[:4] != importlib.util.MAGIC_NUMBER:
                raise RuntimeError("Bad magic number in .pyc file")
            import marshal
            namespace["__loader__"] = SourcelessFileLoader("__main__", path)
            code = marshal.loads(data[16:])
        else:
            namespace["__loader__"] = SourceFileLoader("__main__", path)
            code = compile(data, path, "exec", dont_inherit=True)
        exec(code, namespace)
    finally:
        namespace.pop("__file__", None)
        namespace.pop("__cached__", None)


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _print_exception(exc):
    """The traceback as python prints it, without this module's frames: the same
    text as a fresh jail's (a SyntaxError of the file, then without a "Traceback"
    line at all; runpy's frames where python has them too, under -m or a zip
    archive)."""
    import traceback
    ours = {__file__}
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in ours:
        tb = tb.tb_next
    exc.__traceback__ = tb
    try:
        sys.excepthook(type(exc), exc, tb)
    except Exception:
        traceback.print_exception(type(exc), exc, tb)


def _exit_code(exc):
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        sys.stderr.write(str(code) + "\n")
    except Exception:
        pass
    return 1


def run_program(kind, target, rest, options, env):
    """Run the program in this process: kind is file, c, m or stdin, target the
    script, code or module, rest its arguments. Returns its exit status."""
    if HERE in sys.path:
        sys.path.remove(HERE)
    os.environ.clear()
    for entry in env:
        key, _, value = entry.partition("=")
        os.environ[key] = value
    _reseed()
    unbuffered, safe_path = _apply_options(options)
    if unbuffered:
        sys.stdout.reconfigure(write_through=True)
        sys.stderr.reconfigure(write_through=True)
    elif os.isatty(1):
        sys.stdout.reconfigure(line_buffering=True)
    import runpy
    try:
        namespace = _new_main()
        if kind == "file":
            sys.argv = [target] + rest
            _run_file(target, namespace, safe_path)
        elif kind == "m":
            sys.argv = [target] + rest
            if not safe_path:
                sys.path.insert(0, os.getcwd())
            runpy._run_module_as_main(target, alter_argv=True)
        else:
            if kind == "c":
                sys.argv = ["-c"] + rest
                source, filename = target, "<string>"
            else:
                sys.argv = ["-"] + rest
                source, filename = sys.stdin.read(), "<stdin>"
            if not safe_path:
                sys.path.insert(0, "")
            exec(compile(source, filename, "exec"), namespace)
    except SystemExit as e:
        return _exit_code(e)
    except KeyboardInterrupt as e:
        _print_exception(e)
        # As python does: end by the signal, so the caller sees it.
        import signal
        sys.stdout.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        return 130
    except BaseException as e:
        _print_exception(e)
        return 1
    return 0
