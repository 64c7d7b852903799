"""matplotlib on a read-only rootfs: its configuration and font cache, built with the rootfs.

pyjail's rootfs builder installs this module into a rootfs that has matplotlib, as
_pyjail_matplotlib.py in its site-packages with a .pth file that imports it at start-up.

matplotlib wants a configuration and cache directory it can write. Given one it cannot write
(MPLCONFIGDIR on the read-only rootfs), it warns on stderr, makes a temporary directory and
rebuilds its font list there at every start; given a writable one ($HOME, a fresh tmpfs in
every jail), it builds the font list and writes it there at every run. The builder built that
list once, by importing matplotlib in a jail on the new rootfs, and put it in DIRECTORY with a
matplotlibrc that selects the Agg backend (a jail has no display). This module points
matplotlib at DIRECTORY, which it then only reads: `import matplotlib.pyplot` writes nothing
and prints nothing.

It acts on the first import of matplotlib only, and not at all when MPLCONFIGDIR is set (the
program's or the jail's --env choice wins). Until then it costs one function call per import.
"""

import os
import sys

DIRECTORY = "/usr/lib/pyjail/matplotlib"


def _directory():
    """matplotlib.get_configdir() and get_cachedir(): the rootfs's own, read-only."""
    return DIRECTORY


def _configured(exec_module):
    def exec_matplotlib(module):
        # While matplotlib/__init__.py runs, it finds its rc file through MATPLOTLIBRC before
        # it would ask for the configuration directory (which makes one under $HOME).
        given = "MATPLOTLIBRC" in os.environ
        if not given:
            os.environ["MATPLOTLIBRC"] = DIRECTORY
        try:
            exec_module(module)
        finally:
            if not given:
                os.environ.pop("MATPLOTLIBRC", None)
        # Everything after (font_manager, style, texmanager) asks through these two.
        module.get_configdir = module.get_cachedir = _directory
    return exec_matplotlib


class _FirstImport:
    """A meta path finder that takes part in the first import of matplotlib, then leaves."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "matplotlib":
            return None
        if _FirstImport in sys.meta_path:
            sys.meta_path.remove(_FirstImport)
        from importlib.machinery import PathFinder
        spec = PathFinder.find_spec(name, path)
        if (spec is not None and hasattr(spec.loader, "exec_module")
                and not os.environ.get("MPLCONFIGDIR")
                and os.path.isdir(DIRECTORY)):
            spec.loader.exec_module = _configured(spec.loader.exec_module)
        return spec


if "matplotlib" not in sys.modules and not os.environ.get("MPLCONFIGDIR"):
    sys.meta_path.insert(0, _FirstImport)
