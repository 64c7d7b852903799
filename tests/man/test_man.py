"""The manual pages against the program they document.

man/pyjail.1 must have an entry for every option `pyjail --help` lists, and none that it does
not; man/pyjail-profile.5 an entry for every profile key of the option table
(jail/plan/options.cpp); pyjail.1 every field of the result report (README.md's table, and a real
report). Both pages must format without a single groff warning, and render with man(1).

Run with: /usr/bin/python3 -m pytest tests/man

Environment:
  PYJAIL_BIN=PATH       the binary whose --help is the reference (default: build/pyjail of
                        this checkout)
  PYJAIL_MUST_WORK=1    a test that would be skipped (no binary, no groff, no man) fails
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyjail_testing import skip_or_fail

ROOT = Path(__file__).resolve().parents[2]
MAN1 = ROOT / "man" / "pyjail.1"
MAN5 = ROOT / "man" / "pyjail-profile.5"
PAGES = sorted((ROOT / "man").glob("*.[1-8]"))  # every page, pyjail-server(1) too
OPTIONS_CPP = ROOT / "jail" / "plan" / "options.cpp"
README = ROOT / "README.md"
PROFILES = ROOT / "profiles"
SHIPPED_PROFILES = ["strict", "standard", "batch"]

# --------------------------------------------------------------------------------------------
# roff source, read as text

_ESCAPES = [
    (re.compile(r"\\f(\[[^\]]*\]|\(..|.)"), ""),  # font changes
    (re.compile(r"\\\(aq"), "'"),
    (re.compile(r"\\\(dq"), '"'),
    (re.compile(r"\\\((lq|rq)"), '"'),
    (re.compile(r"\\\(em"), "\u2014"),
    (re.compile(r"\\\(bu"), "\u2022"),
    (re.compile(r"\\[-]"), "-"),
    (re.compile(r"\\e"), lambda m: "\\"),
    (re.compile(r"\\[&%c]"), ""),
    (re.compile(r"\\ "), " "),
]

# Macros whose arguments alternate between two fonts, joined without spaces.
_ALTERNATING = {"BI", "IB", "BR", "RB", "IR", "RI"}
# Macros that set their arguments in one font, joined with spaces.
_JOINED = {"B", "I", "SM", "SB"}


def _macro_args(rest: str) -> list[str]:
    """Splits a macro line's arguments the way roff does: blanks separate, "..." groups."""
    args, cur, quoted, i = [], "", False, 0
    while i < len(rest):
        c = rest[i]
        if quoted:
            if c == '"':
                if rest[i + 1 : i + 2] == '"':  # "" inside quotes is a literal quote
                    cur += '"'
                    i += 1
                else:
                    quoted = False
            else:
                cur += c
        elif c == '"' and cur == "":
            quoted = True
        elif c in " \t":
            if cur:
                args.append(cur)
                cur = ""
        else:
            cur += c
        i += 1
    if cur or quoted:
        args.append(cur)
    return args


def unescape(text: str) -> str:
    for pattern, repl in _ESCAPES:
        text = pattern.sub(repl, text)
    return text


def line_text(line: str) -> str | None:
    """The text a source line contributes, or None for a request or a comment."""
    if line.startswith(('.\\"', "'\\\"")) or line.strip() == ".":
        return None
    if line.startswith((".", "'")):
        m = re.match(r"[.'](\S+)\s*(.*)$", line)
        if not m:
            return None
        name, rest = m.group(1), m.group(2)
        if name in _ALTERNATING:
            return unescape("".join(_macro_args(rest)))
        if name in _JOINED:
            return unescape(" ".join(_macro_args(rest)))
        return None
    return unescape(line)


@dataclass
class Entry:
    """A .TP entry: its tag line and its body, as text."""

    tag: str
    body: str


@dataclass
class Section:
    name: str
    lines: list[str]

    def text(self) -> str:
        return " ".join(t for t in (line_text(l) for l in self.lines) if t is not None)

    def entries(self) -> list[Entry]:
        out: list[Entry] = []
        i = 0
        while i < len(self.lines):
            if self.lines[i].strip() == ".TP" and i + 1 < len(self.lines):
                tag = line_text(self.lines[i + 1]) or ""
                j = i + 2
                body = []
                while j < len(self.lines) and not re.match(r"\.(TP|SS|SH|PP|IP|P|LP)\b",
                                                           self.lines[j]):
                    t = line_text(self.lines[j])
                    if t is not None:
                        body.append(t)
                    j += 1
                out.append(Entry(tag.strip(), " ".join(body)))
                i = j
            else:
                i += 1
        return out

    def subsections(self) -> dict[str, list[str]]:
        subs: dict[str, list[str]] = {}
        current = None
        for line in self.lines:
            if line.startswith(".SS"):
                current = " ".join(_macro_args(line[3:]))
                subs[current] = []
            elif current is not None:
                subs[current].append(line)
        return subs


def sections(page: Path) -> dict[str, Section]:
    out: dict[str, Section] = {}
    current = None
    for line in page.read_text().splitlines():
        if line.startswith(".SH"):
            current = Section(" ".join(_macro_args(line[3:])), [])
            out[current.name] = current
        elif current is not None:
            current.lines.append(line)
    return out


def page_text(page: Path) -> str:
    return " ".join(t for t in (line_text(l) for l in page.read_text().splitlines())
                    if t is not None)


def long_options(tag: str) -> list[str]:
    return re.findall(r"(?<![\w-])--([a-z][a-z0-9-]*)", tag)


def nofill_blocks(lines: list[str]) -> list[str]:
    """The text of each .nf ... .fi block."""
    blocks, cur = [], None
    for line in lines:
        if line.strip() == ".nf":
            cur = []
        elif line.strip() == ".fi" and cur is not None:
            blocks.append("\n".join(cur) + "\n")
            cur = None
        elif cur is not None:
            t = line_text(line)
            if t is not None:
                cur.append(t)
    return blocks


# --------------------------------------------------------------------------------------------
# The references: the binary's --help, the option table, README's report table


def pyjail_bin() -> Path:
    env = os.environ.get("PYJAIL_BIN")
    return Path(env) if env else ROOT / "build" / "pyjail"


@dataclass
class HelpOption:
    name: str  # long name, without dashes
    short: str | None
    value: str | None  # e.g. NAME|FILE
    default: str | None


@pytest.fixture(scope="session")
def help_options() -> list[HelpOption]:
    binary = pyjail_bin()
    if not os.access(binary, os.X_OK):
        skip_or_fail(f"no pyjail binary at {binary} (build it, or set PYJAIL_BIN)")
    r = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, f"pyjail --help failed: {r.stderr}"
    out: list[HelpOption] = []
    in_options = False
    lines = r.stdout.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "Options:":
            in_options = True
            continue
        if in_options and not line.strip():
            break
        # An option too long for its column has its help on the next line.
        if in_options and re.match(r"^\s+--\S+(?: \S+)?$", line) and i + 1 < len(lines):
            line = line + "  " + lines[i + 1].strip()
        m = re.match(r"^\s+(?:(-[A-Za-z]),)?--([a-z][a-z0-9-]*)(?: (\S+))?\s{2,}(.*)$", line)
        if in_options and m:
            d = re.search(r"\[default: (.*)\]\s*$", m.group(4))
            out.append(HelpOption(m.group(2), m.group(1), m.group(3), d.group(1) if d else None))
    assert len(out) >= 20, f"could not parse pyjail --help:\n{r.stdout}"
    return out


@dataclass
class TableOption:
    name: str
    kind: str
    default: str
    value: str
    profile_key: bool


@pytest.fixture(scope="session")
def option_table() -> list[TableOption]:
    src = OPTIONS_CPP.read_text()
    start = src.index("kOptions[] = {")
    end = src.index("};", start)
    rows = re.findall(
        r'\{\s*"([a-z0-9-]+)",\s*OptKind::(\w+),\s*"([^"]*)",\s*"([^"]*)",.*?,\s*(true|false)\s*\}',
        src[start:end], re.S)
    table = [TableOption(n, k, d, v, p == "true") for n, k, d, v, p in rows]
    assert len(table) >= 20, "could not parse the option table in jail/plan/options.cpp"
    return table


@pytest.fixture(scope="session")
def readme_report() -> tuple[list[str], set[str]]:
    """README's result report table: the field names (first column, in order), and the other
    names its rows mention (status values, mechanisms, sub-fields, sources)."""
    lines = README.read_text().splitlines()
    start = next(i for i, l in enumerate(lines) if re.match(r"#+\s+The result report", l))
    fields: list[str] = []
    words: set[str] = set()
    in_table = False
    for line in lines[start + 1 :]:
        if line.startswith("|"):
            in_table = True
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) < 2 or set(cells[0]) <= set("-: ") or cells[0] == "field":
                continue
            fields += re.findall(r"`([^`]+)`", cells[0])
            for w in re.findall(r"`([^`]+)`", " ".join(cells[1:])):
                if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", w):
                    words.add(w)
        elif in_table:
            break
    assert len(fields) >= 15, "could not parse README.md's result report table"
    return fields, words


# --------------------------------------------------------------------------------------------
# (a) pyjail.1's OPTIONS against --help


def man_option_entries() -> list[tuple[list[str], Entry]]:
    entries = sections(MAN1)["OPTIONS"].entries()
    return [(long_options(e.tag), e) for e in entries]


def test_every_help_option_has_a_man_entry(help_options):
    documented = {n for names, _ in man_option_entries() for n in names}
    missing = [f"--{o.name}" for o in help_options if o.name not in documented]
    assert not missing, f"options in pyjail --help without an entry in man/pyjail.1: {missing}"


def test_no_man_entry_for_an_option_that_does_not_exist(help_options):
    known = {o.name for o in help_options}
    stale = [f"--{n}" for names, _ in man_option_entries() for n in names if n not in known]
    assert not stale, f"man/pyjail.1 documents options pyjail --help does not have: {stale}"


def test_every_options_entry_names_an_option():
    bad = [e.tag for names, e in man_option_entries() if not names]
    assert not bad, f"OPTIONS entries in man/pyjail.1 that name no --option: {bad}"


def test_man_entries_are_in_help_order(help_options):
    man_order = [names[0] for names, _ in man_option_entries() if names]
    assert man_order == [o.name for o in help_options]


def test_man_entry_shows_the_options_argument(help_options):
    tags = {names[0]: e.tag for names, e in man_option_entries() if names}
    for o in help_options:
        want = (f"{o.short}, " if o.short else "") + f"--{o.name}" + (f" {o.value}" if o.value else "")
        assert re.sub(r"\s+", " ", tags[o.name]) == want, f"tag of --{o.name}"


def test_man_entry_gives_the_default(help_options, option_table):
    # The entries give the built-in defaults (the option table's); --help shows a profile's.
    built_in = {o.name: o.default for o in option_table if o.kind == "Text" and o.default}
    bodies = {names[0]: e.body for names, e in man_option_entries() if names}
    for o in help_options:
        if o.value is None:  # a flag
            continue
        body = bodies[o.name]
        assert "Default:" in body, f"the entry of --{o.name} gives no default"
        default = built_in.get(o.name)
        if default is not None and o.name != "profile":
            tail = body[body.index("Default:") :]
            assert re.search(rf"(?<![\w.-]){re.escape(default)}(?![\w-])", tail), (
                f"the entry of --{o.name} does not give the default {default!r}: {tail!r}")


def test_command_line_only_options_say_so(option_table):
    bodies = {names[0]: e.body for names, e in man_option_entries() if names}
    for o in option_table:
        says = "Command line only" in bodies[o.name]
        assert says == (not o.profile_key), (
            f"--{o.name}: {'a profile key, yet documented' if says else 'not a profile key, yet not documented'} "
            "as command line only")


def test_option_table_and_help_agree(option_table, help_options):
    # A sanity check of the two parsers above: the table is what --help shows.
    assert [o.name for o in option_table] == [
        o.name for o in help_options if o.name not in ("help", "version")]


# --------------------------------------------------------------------------------------------
# (b) pyjail-profile.5's KEYS against the option table


def profile_page_keys() -> list[str]:
    keys = []
    for e in sections(MAN5)["KEYS"].entries():
        m = re.match(r"([a-z][a-z0-9-]*) =", e.tag)
        assert m, f"a KEYS entry of man/pyjail-profile.5 that is not `key = ...`: {e.tag!r}"
        keys.append(m.group(1))
    return keys


def test_every_profile_key_in_profile_page(option_table):
    keys = set(profile_page_keys())
    missing = [o.name for o in option_table if o.profile_key and o.name not in keys]
    assert not missing, f"profile keys without an entry in man/pyjail-profile.5: {missing}"


def test_profile_page_documents_no_other_keys(option_table):
    real = {o.name for o in option_table if o.profile_key}
    stale = [k for k in profile_page_keys() if k not in real]
    assert not stale, f"man/pyjail-profile.5 documents keys a profile may not set: {stale}"


def test_profile_page_keys_in_table_order(option_table):
    assert profile_page_keys() == [o.name for o in option_table if o.profile_key]


def test_profile_page_names_the_command_line_only_options(option_table):
    text = sections(MAN5)["KEYS"].text()
    cli_only = [o.name for o in option_table if not o.profile_key] + ["help", "version"]
    missing = [n for n in cli_only if f"--{n}" not in text]
    assert not missing, f"KEYS of man/pyjail-profile.5 does not call these command line only: {missing}"


@pytest.mark.parametrize("name", SHIPPED_PROFILES)
def test_shipped_profile_values_match_the_files(name):
    subs = sections(MAN5)["SHIPPED PROFILES"].subsections()
    assert name in subs, f"man/pyjail-profile.5 has no subsection for the profile {name}"
    blocks = nofill_blocks(subs[name])
    assert len(blocks) == 1, f"the {name} subsection should show the profile's values once"
    documented = tomllib.loads(blocks[0])
    shipped = tomllib.loads((PROFILES / f"{name}.toml").read_text())
    assert documented == shipped


def test_example_profile_is_valid_toml_with_real_keys(option_table):
    keys = {o.name for o in option_table if o.profile_key}
    blocks = nofill_blocks(sections(MAN5)["EXAMPLES"].lines)
    profiles = [tomllib.loads(b) for b in blocks]
    assert profiles, "man/pyjail-profile.5 has no example profile"
    example = profiles[0]
    # `extends` names the profile's base: a key of profiles, not an option.
    assert example and set(example) <= keys | {"extends"}, set(example) - keys
    seccomp_set = profiles[1]
    assert set(seccomp_set) <= {"allow", "deny"}


# --------------------------------------------------------------------------------------------
# (c) both pages format without a warning


def groff_or_skip() -> str:
    groff = shutil.which("groff")
    if groff is None:
        skip_or_fail("groff is not installed (Debian: apt-get install groff-base)")
    return groff


@pytest.mark.parametrize("macros", ["-man", "-mandoc"])
@pytest.mark.parametrize("device", [None, "utf8"])
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_formats_without_warnings(page, macros, device):
    cmd = [groff_or_skip(), macros, "-ww", "-z"] + ([f"-T{device}"] if device else []) + [str(page)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stderr == "", f"{' '.join(cmd)}:\n{r.stderr}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_has_no_raw_requests_in_text(page):
    # A text line starting with . or ' is a request to roff; one that is not a known macro
    # vanishes silently from the output under some formatters.
    known = {"TH", "SH", "SS", "TP", "PP", "IP", "RS", "RE", "nf", "fi", "br", "nh", "ad", "B", "I",
             "BI", "IB", "BR", "RB", "IR", "RI", "SM", "SB"}
    for n, line in enumerate(page.read_text().splitlines(), 1):
        if line.startswith('.\\"'):
            continue
        m = re.match(r"[.'](\S*)", line)
        if m:
            assert m.group(1) in known, f"{page.name}:{n}: unexpected request {line!r}"


# --------------------------------------------------------------------------------------------
# (d) the result report


def test_every_readme_report_field_in_man_page(readme_report):
    fields, words = readme_report
    section = sections(MAN1)["THE RESULT REPORT"]
    tagged = [f.strip() for e in section.entries() for f in e.tag.split(",")]
    missing = [f for f in fields if f not in tagged]
    assert not missing, f"report fields in README.md without an entry in man/pyjail.1: {missing}"
    stale = [f for f in tagged if f not in fields]
    assert not stale, f"man/pyjail.1 documents report fields README.md does not have: {stale}"
    text = section.text()
    missing_words = sorted(w for w in words if not re.search(rf"(?<![\w.-]){re.escape(w)}(?![\w-])", text))
    assert not missing_words, (
        f"names from README.md's report table missing in man/pyjail.1's report section: {missing_words}")


def test_real_report_fields_documented(tmp_path, help_options):
    # A run that fails at its first set-up step (a missing rootfs) still writes a complete
    # report, without needing namespaces: its fields must be the documented ones.
    report = tmp_path / "report.json"
    r = subprocess.run([str(pyjail_bin()), "--quiet", "--rootfs", str(tmp_path / "no-rootfs"),
                        "--report", str(report), "--", "python3", "-c", "pass"],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 125, r.stderr
    data = json.loads(report.read_text())
    text = sections(MAN1)["THE RESULT REPORT"].text()
    section_tags = [f.strip() for e in sections(MAN1)["THE RESULT REPORT"].entries()
                    for f in e.tag.split(",")]
    assert list(data) == section_tags, "the report's fields, in order, as man/pyjail.1 lists them"
    assert data["status"] == "setup-error"
    for sub in data["error"]:
        assert re.search(rf"\b{re.escape(sub)}\b", text), f"error.{sub} is not documented"


# --------------------------------------------------------------------------------------------
# (e) man(1) renders the pages


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_man_renders_page(page):
    man = shutil.which("man")
    if man is None:
        skip_or_fail("man is not installed (Debian: apt-get install man-db)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAN", "LC_", "LANG"))}
    env.update(MANWIDTH="80", LANG="C.UTF-8", MANPAGER="cat", PAGER="cat")
    r = subprocess.run([man, "-l", str(page)], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    out = re.sub(r".\x08", "", r.stdout)  # overstrike, should man keep formatting
    lines = out.splitlines()
    heads = [l for l in lines if re.match(r"^[A-Z][A-Z ]+$", l)]
    assert heads[:3] == ["NAME", "SYNOPSIS", "DESCRIPTION"], heads
    too_long = [l for l in lines if len(l.expandtabs()) > 80]
    assert not too_long, f"lines wider than MANWIDTH=80: {too_long}"
    leftovers = [l for l in lines if re.search(r"\\[-f(e&]", l)]
    assert not leftovers, f"unformatted roff escapes in the output: {leftovers}"
