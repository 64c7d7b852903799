"""The `data` rootfs (rootfs/data-requirements.txt, built with --shell-tools): real work with
numpy, pandas, matplotlib, scipy and scikit-learn under --profile strict, shell tools through
subprocess, and nothing written or printed by the imports themselves (matplotlib reads the font
cache built with the rootfs).

The rootfs is built by `cmake --build build --target rootfs-data` (tests/run.sh does it before
these tests) and found by name, as `pyjail --rootfs data`; without it these tests skip, or
fail under PYJAIL_MUST_WORK=1.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from pyjail_testing import skip_or_fail
from pyjail_testing.runs import describe, without_notices

REQUIREMENTS = Path(__file__).resolve().parents[2] / "rootfs" / "data-requirements.txt"
STRICT_DATA = ("--profile", "strict", "--rootfs", "data")
# Imports of these sizes take a while on a loaded 2-CPU machine.
TIMEOUT = 180


@pytest.fixture
def data_rootfs(run_jail, current_user):
    r = run_jail(["--rootfs", "data", "--explain"], user=current_user)
    if r.returncode != 0:
        skip_or_fail("no data rootfs (cmake --build build --target rootfs-data, then install "
                     "or stage it): " + r.stderr.strip())


def run_data(run_py, code, user, opts=STRICT_DATA, **kwargs):
    """Runs code on the data rootfs; it must succeed and print nothing on stderr."""
    r = run_py(code, user=user, opts=opts, timeout=TIMEOUT, **kwargs)
    assert without_notices(r.stderr) == "", describe(r)
    return r.result


def test_numpy_linear_algebra_and_fft(data_rootfs, run_py, as_user):
    result = run_data(run_py, """
        import numpy as np
        rng = np.random.default_rng(7)
        a = rng.normal(size=(200, 200)) + 200 * np.eye(200)
        x = rng.normal(size=200)
        solved = np.linalg.solve(a, a @ x)
        t = np.arange(1024) / 1024
        peak = int(np.argmax(np.abs(np.fft.rfft(np.sin(2 * np.pi * 50 * t)))))
        emit([bool(np.allclose(solved, x)), peak, np.__version__])
    """, as_user)
    assert result[:2] == [True, 50]
    assert "numpy==%s" % result[2] in REQUIREMENTS.read_text()


def test_pandas_groupby_csv_and_time_zones(data_rootfs, run_py, as_user):
    result = run_data(run_py, """
        import io
        import pandas as pd
        df = pd.DataFrame({"city": ["Paris", "Oslo", "Paris", "Lima", "Oslo"],
                           "sales": [10, 20, 30, 40, 50],
                           "when": pd.date_range("2024-07-01 12:00", periods=5, freq="D",
                                                 tz="UTC")})
        totals = df.groupby("city")["sales"].sum().sort_index()
        back = pd.read_csv(io.StringIO(df.to_csv(index=False)), parse_dates=["when"])
        local = df["when"].dt.tz_convert("Europe/Paris").dt.hour.tolist()
        emit([{k: int(v) for k, v in totals.items()}, int(back["sales"].sum()), int(local[0])])
    """, as_user)
    assert result == [{"Lima": 40, "Oslo": 70, "Paris": 40}, 150, 14]


def test_matplotlib_draws_a_png_and_its_import_writes_nothing(data_rootfs, run_py, as_user):
    result = run_data(run_py, """
        import os
        def files():
            return sorted(os.path.join(d, f) for top in ("/tmp", "/work")
                          for d, _, fs in os.walk(top) for f in fs)
        before = files()
        import matplotlib
        import matplotlib.pyplot as plt
        after_import = files()
        fig, ax = plt.subplots()
        ax.plot([1, 2, 3], [1, 4, 9], label="squares")
        ax.set_title("in a jail")
        ax.legend()
        fig.savefig("plot.png")
        with open("plot.png", "rb") as f:
            head = f.read(8)
        emit([before == after_import, matplotlib.get_backend(), head == b"\\x89PNG\\r\\n\\x1a\\n",
              os.path.getsize("plot.png") > 5000, [p for p in files() if p not in before]])
    """, as_user)
    assert result == [True, "Agg", True, True, ["/work/plot.png"]]


def test_a_numpy_program_that_exits_3_reports_exit_3(data_rootfs, run_jail, world_tmp, as_user):
    """numpy sets NUMA policies for its buffers (mbind): allowed, and a failing numpy program's
    status says how it ended, not that a call was refused on the way."""
    d = world_tmp.dir(0o777)
    report = d / "report.json"
    code = ("import os, sys, numpy as np\n"
            "a = np.ones((400, 400)); b = a @ a\n"
            "sys.stdout.flush()\n"
            "print(int(b[0, 0]))\n"
            "sys.exit(3)\n")
    r = run_jail(["--rootfs", "data", "--report", report, "--", "python", "-c", code],
                 user=as_user, timeout=TIMEOUT)
    assert r.returncode == 3, describe(r)
    assert r.stdout == "400\n"
    rep = json.loads(report.read_text())
    assert (rep["status"], rep["program_exit_code"]) == ("exit", 3)
    assert rep["denied_syscalls"] == []


def test_batch_keeps_the_png(data_rootfs, run_jail, world_tmp, as_user):
    work = world_tmp.dir(mode=0o777)  # batch: the jail's host user writes here
    code = ("import pandas as pd, matplotlib.pyplot as plt\n"
            "df = pd.DataFrame({'x': range(10), 'y': [v * v for v in range(10)]})\n"
            "df.plot(x='x', y='y').get_figure().savefig('squares.png')\n")
    r = run_jail(["--profile", "batch", "--rootfs", "data", "--", "python", "-c", code],
                 user=as_user, cwd=work, timeout=TIMEOUT)
    assert r.returncode == 0, describe(r)
    assert without_notices(r.stderr) == "", describe(r)
    png = work / "squares.png"
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in work.iterdir()) == ["squares.png"]


def test_scipy_optimize_integrate_and_stats(data_rootfs, run_py, as_user):
    result = run_data(run_py, """
        import numpy as np
        from scipy import integrate, optimize, stats
        best = optimize.minimize(lambda v: (v[0] - 3) ** 2 + (v[1] + 1) ** 2, [0, 0])
        area, _ = integrate.quad(np.sin, 0, np.pi)
        t = stats.ttest_ind([1.0, 2.0, 3.0, 4.0, 5.0], [6.0, 7.0, 8.0, 9.0, 10.0])
        emit([np.round(best.x, 3).tolist(), round(area, 6), bool(t.pvalue < 0.01)])
    """, as_user)
    assert result == [[3.0, -1.0], 2.0, True]


def test_sklearn_fits_and_predicts(data_rootfs, run_py, as_user):
    result = run_data(run_py, """
        from sklearn.datasets import load_iris
        from sklearn.linear_model import LogisticRegression
        from sklearn.model_selection import train_test_split
        x, y = load_iris(return_X_y=True)
        xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.3, random_state=0, stratify=y)
        model = LogisticRegression(max_iter=500).fit(xtr, ytr)
        emit(round(float(model.score(xte, yte)), 2))
    """, as_user)
    assert result >= 0.9


def test_shell_tools_through_subprocess(data_rootfs, run_py, as_user):
    result = run_data(run_py, """
        import subprocess
        def sh(cmd):
            r = subprocess.run(cmd, shell=True, capture_output=True, text=True)
            return [r.returncode, r.stdout, r.stderr]
        with open("data.txt", "w") as f:
            f.write("pear 3\\napple 1\\npear 2\\nfig 5\\n")
        emit([sh("ls"),
              sh("sort data.txt | uniq -c | wc -l"),
              sh("grep pear data.txt | awk '{s += $2} END {print s}'"),
              sh("sed -n 's/^fig /figs: /p' data.txt"),
              sh("find /work -name '*.txt' | xargs cat | cut -d' ' -f1 | tr a-z A-Z | head -1"),
              sh("env | grep -c '^HOME=/tmp$'")])
    """, as_user)
    assert result == [[0, "data.txt\n", ""], [0, "4\n", ""], [0, "5\n", ""],
                      [0, "figs: 5\n", ""], [0, "PEAR\n", ""], [0, "1\n", ""]]


def test_default_rootfs_has_no_shell_tools(run_py, as_user):
    """--shell-tools is the data rootfs's: the default one stays minimal (a shell, no tools)."""
    r = run_py("""
        import subprocess
        r = subprocess.run("ls /", shell=True, capture_output=True, text=True)
        emit([r.returncode, "not found" in r.stderr])
    """, user=as_user)
    assert r.result == [127, True]


def process_tree(pid: int) -> list[int]:
    """pid and every process below it."""
    out = [pid]
    for task in os.listdir(f"/proc/{pid}/task"):
        for child in open(f"/proc/{pid}/task/{task}/children").read().split():
            out += process_tree(int(child))
    return out


def anon_huge_kib(pid: int) -> int:
    rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    return int(re.search(r"^AnonHugePages:\s+(\d+) kB", rollup, re.M).group(1))


def test_runs_from_a_numpy_template_draw_numpys_random_numbers_of_their_own(data_rootfs, run_jail, as_user, serve):
    # Attack (on privacy): each run is a copy of the template, numpy's global generator
    # included; unseeded, every run would draw the same "random" numbers, and one run could
    # predict another's (a token, a sample). Each run's program gets it seeded afresh from the
    # kernel's entropy, and its state is not the template's.
    # numpy.random named: `import numpy` alone loads it on first use (then in the run, afresh).
    # The template hands the generator to its module, which reseeds it in place in each run
    # (template/numpy_reseed.hpp): that path is the one taken, and no run starts with a normal
    # the legacy generator cached (get_state()'s has_gauss).
    sock, _ = serve(as_user, "--rootfs", "data", "--preload", "numpy.random")
    code = ("import json, sys, numpy; s = numpy.random.get_state(); "
            "print(json.dumps([numpy.random.random(), [int(x) for x in s[1][:4]], int(s[2]), int(s[3]), "
            "sys.modules['pyjail_template']._NUMPY_IN_PLACE]))")
    draws = []
    for _ in range(3):
        r = run_jail(["--quiet", "--via", sock, "--rootfs", "data", "--", "python", "-c", code],
                     user=as_user, timeout=TIMEOUT)
        assert r.returncode == 0, describe(r)
        draws.append(json.loads(r.stdout))
    firsts = [d[0] for d in draws]
    keys = [tuple(d[1]) for d in draws]
    assert len(set(firsts)) == 3 and len(set(keys)) == 3, draws
    assert all(d[1][0] == 0x80000000 and d[2] == 624 and d[3] == 0 and d[4] is True for d in draws), draws


def test_a_numpy_pandas_template_shares_its_memory_in_huge_pages(data_rootfs, run_jail, as_user, serve):
    """jail/template/huge_pages.hpp: the template's settled memory is collapsed into huge pages
    (each run's fork and exit cost less), and no run inherits a request for huge pages (each
    page it touched afresh would cost 2 MiB)."""
    # MADV_COLLAPSE does not depend on /sys/kernel/mm/transparent_hugepage/enabled (`never`
    # included), only on a kernel built with them.
    if not Path("/sys/kernel/mm/transparent_hugepage").is_dir():
        skip_or_fail("this kernel has no transparent huge pages (CONFIG_TRANSPARENT_HUGEPAGE)")
    if tuple(int(x) for x in re.match(r"(\d+)\.(\d+)", os.uname().release).groups()) < (6, 1):
        skip_or_fail("MADV_COLLAPSE needs Linux 6.1, this is " + os.uname().release)
    sock, server = serve(as_user, "--verbose", "--rootfs", "data", "--preload", "numpy", "--preload", "pandas",
                         quiet=False)
    templates = [pid for pid in process_tree(server.pid)
                 if os.path.basename(os.readlink(f"/proc/{pid}/exe")).startswith("python")]
    assert len(templates) == 1, templates
    collapsed = anon_huge_kib(templates[0])
    # --verbose says so, before its "ready" line.
    os.set_blocking(server.stderr.fileno(), False)
    said = (server.stderr.read() or b"").decode()
    note = re.search(r"^pyjail serve: the template's memory: (\d+) MiB in huge pages \(\d+ chunks?; "
                     r"\d+ mostly empty left alone(; \d+ refused: .*)?\)$", said, re.M)
    assert note and int(note.group(1)) >= 2, said
    # The interpreter's arenas, where most of the preloads' objects are, line up into whole
    # chunks (jail/template/arenas.hpp): about 34 MiB in huge pages, where one mmap per arena
    # left 14-16. Less only where the kernel refused a chunk (no free huge page).
    assert collapsed >= (24 << 10) or note.group(2), (said, Path(f"/proc/{templates[0]}/smaps_rollup").read_text())
    r = run_jail(["--quiet", "--via", sock, "--rootfs", "data", "--", "python", "-c",
                  "import pandas; df = pandas.DataFrame({'a': range(100000)}); big = bytearray(64 << 20); "
                  "flags = [l for l in open('/proc/self/smaps') if l.startswith('VmFlags')]; "
                  "print(int(df.a.sum()), len(flags), sum(' hg' in l for l in flags), sum(' nh' in l for l in flags))"],
                 user=as_user, timeout=TIMEOUT)
    assert r.returncode == 0, describe(r)
    total, mappings, asking, refusing = (int(x) for x in r.stdout.split())
    assert total == 4999950000 and mappings > 100
    assert asking == 0, "a run's mappings ask for huge pages (MADV_HUGEPAGE), as the template must not"
    # The arenas' blocks take no huge page at a run's fault, even where the host's THP is
    # `always` (each arena a run adds would cost a zeroed 2 MiB).
    assert refusing >= 1, "a run's arena blocks may take huge pages at a fault (no MADV_NOHUGEPAGE)"
    # They last: what the template writes after a fork (the next request, the last one wiped)
    # goes where no running program shares it, and splits no huge page. (Before, its steady
    # state was a quarter to a third of what it collapsed.)
    for _ in range(4):
        r = run_jail(["--quiet", "--via", sock, "--rootfs", "data", "--", "python", "-c", "print('ok')"],
                     user=as_user, timeout=TIMEOUT)
        assert r.returncode == 0, describe(r)
    assert anon_huge_kib(templates[0]) * 2 >= collapsed, (collapsed, anon_huge_kib(templates[0]))


def test_lock_has_the_pinned_versions(data_rootfs, run_jail, current_user):
    r = run_jail(["rootfs", "info", "data", "--json"], user=current_user)
    assert r.returncode == 0, describe(r)
    pins = {name.lower(): version for name, version in
            re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", REQUIREMENTS.read_text(), re.M)}
    got = {p["name"].lower(): p["version"] for p in json.loads(r.stdout)["lock"]["packages"]}
    # Every pin, and nothing else: the requirements file holds the whole closure.
    assert got == pins
