"""No function in jail/ is longer than a reader can hold: 80 lines.

What counts as a function's lines: every line from the first line of its declaration (the line
its return type or `template <...>` starts on, after the comment above it) to the line of its
closing brace, blank and comment lines inside included. A lambda or a local class is part of
the function it is written in. Functions defined in a class body count as functions.

How functions are found, by brace matching (no C++ parser): comments, string and character
literals and preprocessor lines are blanked out first (their lines kept); then a `{` at
namespace or class scope opens a function's body when the text before it, since the last `;`,
`{` or `}`, ends with a parameter list `(...)` and its qualifiers (`const`, `noexcept`,
`override`, `-> T`), or with a constructor's initializer list. Namespace and class bodies are
entered; any other brace there (an initializer such as `T x = {...};`) is skipped whole.

    python3 tests/test_function_length.py [N]     # the N (default 10) longest functions
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JAIL = ROOT / "jail"
LIMIT = 80



@dataclass(frozen=True)
class Function:
    path: Path
    name: str
    first: int  # 1-based line numbers, both included
    last: int

    @property
    def lines(self) -> int:
        return self.last - self.first + 1


def blank_out(text: str) -> str:
    """The text with comments, literals and preprocessor lines replaced by spaces (newlines and
    the literals' quotes kept), so that only code's braces and parentheses remain."""
    out = list(text)
    i, n = 0, len(text)

    def blank(a: int, b: int) -> None:
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c == "#":
            j = i
            while j < n and text[j] != "\n":  # a preprocessor line, with its continuations
                j = j + 2 if text.startswith("\\\n", j) else j + 1
            blank(i, j)
            i = j
            continue
        if c == "\n":
            at_line_start = True
            i += 1
            continue
        if not c.isspace():
            at_line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
        elif c == "R" and text.startswith('"', i + 1) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i + m.end())
            end = n if end < 0 else end + len(m.group(1)) + 2
            blank(i + 2, end - 1)
            i = end
        elif c in "\"'":
            if c == "'" and digit_separator(text, i):
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            blank(i + 1, j)
            i = j + 1
        else:
            i += 1
    return "".join(out)


def digit_separator(text: str, i: int) -> bool:
    """Whether the ' at i separates digits (1'000) rather than opening a character literal."""
    j = i
    while j > 0 and (text[j - 1].isalnum() or text[j - 1] in "_'"):
        j -= 1
    return j < i and text[j].isdigit()


QUALIFIERS = re.compile(r"(\s|const\b|noexcept\b(\s*\([^()]*\))?|override\b|final\b|mutable\b|volatile\b|&|->[^;{}]*)*")


def match_close(code: str, open_at: int) -> int:
    """The index of the bracket closing the one at open_at."""
    pairs = {"{": "}", "(": ")", "[": "]"}
    stack = []
    for k in range(open_at, len(code)):
        ch = code[k]
        if ch in pairs:
            stack.append(pairs[ch])
        elif ch in ")]}":
            if not stack or stack.pop() != ch:
                raise ValueError(f"unbalanced {ch!r} at offset {k}")
            if not stack:
                return k
    raise ValueError(f"unclosed bracket at offset {open_at}")


def last_top_level_paren(header: str) -> tuple[int, int] | None:
    """The (open, close) of the header's last parenthesised group at depth 0, if any."""
    depth, close = 0, None
    for k in range(len(header) - 1, -1, -1):
        ch = header[k]
        if ch in ")]}":
            if depth == 0 and ch == ")" and close is None:
                close = k
            depth += 1
        elif ch in "([{":
            depth -= 1
            if depth == 0 and close is not None:
                return k, close
    return None


def has_top_level_assignment(header: str) -> bool:
    depth = 0
    for k, ch in enumerate(header):
        if ch in "([{<":
            depth += ch != "<"
        elif ch in ")]}":
            depth -= 1
        elif ch == "=" and depth == 0:
            before, after = header[max(0, k - 8) : k], header[k + 1 : k + 2]
            if after != "=" and not re.search(r"(operator\s*\W?|[=!<>+\-*/%&|^])$", before):
                return True
    return False


def body_kind(header: str) -> str:
    """What the { after `header` opens: "scope" (namespace, class), "function", "item" (a brace
    inside a constructor's initializer list) or "other" (an initializer)."""
    h = re.sub(r"^\s*template\s*<[^{};]*?>\s*(?=\w)", "", header).strip()
    if re.match(r"(inline\s+)?namespace\b|extern\s+\"", h):
        return "scope"
    if re.match(r"(class|struct|union)\b", h) and not has_top_level_assignment(h):
        return "scope"
    if re.match(r"enum\b", h):
        return "other"
    lambda_at = re.search(r"=\s*\[", h)
    group = last_top_level_paren(h)
    if group is None:
        return "other"
    opened, closed = group
    if has_top_level_assignment(h[:opened]) and not lambda_at:
        return "other"
    rest = h[closed + 1 :]
    if QUALIFIERS.fullmatch(rest):
        return "function"
    m = re.match(QUALIFIERS.pattern + r":(?!:)", rest)
    if m:  # a constructor's initializer list: `) : a_(x), b_{y} {`
        items = rest[m.end() :].strip()
        return "function" if not items or items[-1] in ")}" else "item"
    return "other"


def function_name(header: str) -> str:
    """The name before the parameter list: the first top-level (...) followed only by
    qualifiers, or by a constructor's initializer list."""
    h = header.strip()
    before, depth = h, 0
    for k, ch in enumerate(h):
        if ch == "(" and depth == 0:
            rest = h[match_close(h, k) + 1 :]
            m = QUALIFIERS.match(rest)
            if m.end() == len(rest) or re.match(r":(?!:)", rest[m.end() :]):
                before = h[:k].rstrip()
                break
        depth += (ch in "([{") - (ch in ")]}")
    m = re.search(r"(operator\s*(\(\)|[^\s(]+)|[~\w:]+)$", before)
    return m.group(1) if m else "?"


def functions_in(path: Path) -> list[Function]:
    text = path.read_text()
    code = blank_out(text)
    line_of = [0] * (len(code) + 1)
    line = 1
    for k, ch in enumerate(code):
        line_of[k] = line
        line += ch == "\n"
    found: list[Function] = []
    scopes = [""]  # enclosing namespace and class names
    header_start = 0
    k = 0
    while k < len(code):
        ch = code[k]
        if ch in "([":
            k = match_close(code, k) + 1
            continue
        if ch == ";":
            header_start = k + 1
        elif ch == "}":
            scopes.pop()
            header_start = k + 1
        elif ch == "{":
            header = code[header_start:k]
            kind = body_kind(header)
            if kind == "scope":
                scopes.append(header)
                header_start = k + 1
            elif kind == "item":
                k = match_close(code, k) + 1
                continue
            else:
                end = match_close(code, k)
                if kind == "function":
                    first = header_start + len(header) - len(header.lstrip())
                    found.append(Function(path, function_name(header), line_of[first], line_of[end]))
                k = end + 1
                header_start = k
                continue
        k += 1
    return found


def jail_functions() -> list[Function]:
    return sorted(
        (f for p in sorted(JAIL.rglob("*")) if p.suffix in (".cpp", ".hpp") for f in functions_in(p)),
        key=lambda f: -f.lines,
    )


def qualified(f: Function) -> str:
    return f"{f.path.relative_to(JAIL)}:{f.first} {f.name}"


def test_functions_fit_in_80_lines():
    too_long = [
        f"{qualified(f)}: {f.lines} lines"
        for f in jail_functions()
        if f.lines > LIMIT
    ]
    assert not too_long, f"functions over {LIMIT} lines; split them by what they do:\n" + "\n".join(too_long)


def test_the_counting_on_a_sample(tmp_path):
    sample = tmp_path / "sample.cpp"
    sample.write_text(
        "#include <x>\n"                               # 1
        "namespace a {\n"                              # 2
        "// one { brace in a comment\n"                # 3
        "int f(int x) {\n"                             # 4  f: 4-8
        "    auto g = [&](int y) { return y; };\n"     # 5
        "    const char* s = \"}}\"; char c = '{';\n"  # 6
        "    return g(x) + 1'000;\n"                   # 7
        "}\n"                                          # 8
        "const int table[] = {1, 2};\n"                # 9
        "struct S {\n"                                 # 10
        "    S(int v) : v_{v}, w_(v) {}\n"             # 11 S::S: 11
        "    int get() const noexcept {\n"             # 12 get: 12-14
        "        return v_;\n"                         # 13
        "    }\n"                                      # 14
        "    int v_, w_;\n"                            # 15
        "};\n"                                         # 16
        "}  // namespace a\n"                          # 17
    )
    got = sorted((f.name, f.first, f.last) for f in functions_in(sample))
    assert got == [("S", 11, 11), ("f", 4, 8), ("get", 12, 14)]


if __name__ == "__main__":
    for f in jail_functions()[: int(sys.argv[1]) if len(sys.argv) > 1 else 10]:
        print(f"{f.lines:5d}  {qualified(f)}")
