#!/usr/bin/env python3
"""Size check (scripts/lint_check.sh, check "size"): fails on a C++ function of 80 lines or more
and on a markdown document over 400 lines, unless scripts/lint_exceptions.txt lists it; fails too
when a listed entry is no longer over its limit (or gone), so that the list only shrinks.

A function's size is its lines from the line of its name to its closing brace (lizard's length);
lambdas and local classes count toward the function around them. The C++ is read by a small
brace scanner (comments, strings and preprocessor lines blanked), not a compiler: it finds
function bodies at namespace and class scope, TEST()-style macros included.

Usage: size_check.py ROOT   (prints one line per finding; exit status 1 if any)
"""
import re
import sys
from pathlib import Path

FUNCTION_LIMIT = 80  # lines; a function of this many or more fails
DOC_LIMIT = 400  # lines; a document of more fails
CPP_DIRS = ["src", "include", "kernels", "tests", "bench"]
CPP_SUFFIXES = {".cpp", ".hpp", ".cu", ".cuh", ".h", ".cc"}
EXCEPTIONS = "scripts/lint_exceptions.txt"

BODY_AFTER_WORD = {"const", "override", "final", "noexcept", "mutable", "try"}
SCOPE_WORDS = re.compile(r"^(?:template\s*<.*>\s*)?(?:class|struct|union|namespace|extern)\b", re.S)
NOT_NAMES = {"decltype", "alignas", "noexcept", "__attribute__", "sizeof", "alignof", "__declspec"}


def blank(text):
    """The text with comments, string and character literals, and preprocessor lines replaced by
    spaces (newlines kept, so offsets keep their line numbers)."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#":  # a preprocessor line, with its continuations
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        if c == "/" and text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
            continue
        if c == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
            continue
        m = re.match(r'R"([^(\s]*)\(', text[i:i + 20]) if c == "R" and (i == 0 or not text[i - 1].isalnum()) else None
        if m:
            end = text.find(")" + m.group(1) + '"', i)
            end = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
            continue
        if c in "\"'" and not (c == "'" and i > 0 and text[i - 1].isalnum() and text[i - 1] not in "uUL8"):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n else ""))
            i = j + 1
            continue
        out.append(c)
        line_start = c == "\n" or (line_start and c in " \t")
        i += 1
    return "".join(out)


def function_name(head):
    """The name of the function whose head (the text before its body's brace) is `head`."""
    m = re.search(r"((?:[\w~]+\s*::\s*)*operator\s*(?:\(\s*\)|[^\s(]+))\s*\(", head)
    if m:
        return re.sub(r"\s+", "", m.group(1))
    for m in re.finditer(r"((?:[\w~]+\s*::\s*)*[\w~]+)\s*\(", head):
        name = re.sub(r"\s+", "", m.group(1))
        if name in NOT_NAMES:
            continue
        if name.isupper() or name.startswith("TEST"):  # a macro: TEST(Suite, Name)
            close = head.find(")", m.end())
            return name + "(" + re.sub(r"\s+", " ", head[m.end():close]).strip() + ")"
        return name
    return None


def matching_brace(text, i):
    """The offset of the brace closing the one at offset i."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1


def functions(text):
    """(name, first line, lines) of each function defined in C++ source `text`."""
    code = blank(text)
    found = []
    head_start = 0
    i = 0
    while i < len(code):
        c = code[i]
        if c in ";}":
            head_start = i + 1
        elif c == "{":
            head = code[head_start:i]
            stripped = head.strip()
            if SCOPE_WORDS.match(stripped) or re.search(r"\b(?:class|struct|union)\b[^(]*$", stripped):
                head_start = i + 1  # a namespace or class body: functions may be defined inside
            elif "(" not in stripped or re.search(r"(?<![=!<>\w])=(?!=)", re.sub(r"operator\s*\S+", "", stripped)):
                i = matching_brace(code, i)  # an initializer, enum or the like
                head_start = i + 1
            else:
                last = re.search(r"(\w+)\s*$", stripped)
                if last and last.group(1) not in BODY_AFTER_WORD:
                    i = matching_brace(code, i)  # member{init} in a constructor's initializer list
                    i += 1
                    continue
                end = matching_brace(code, i)
                name = function_name(stripped)
                if name:
                    name_at = head_start + head.find(name.split("(")[0].split("::")[0])
                    first = code.count("\n", 0, max(name_at, head_start + len(head) - len(head.lstrip()))) + 1
                    last_line = code.count("\n", 0, end) + 1
                    found.append((name, first, last_line - first + 1))
                i = end
                head_start = i + 1
        i += 1
    return found


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    listed = {}
    for number, line in enumerate((root / EXCEPTIONS).read_text().splitlines(), 1):
        entry = line.split("#", 1)[0].strip()
        if entry:
            listed[entry] = number
    over = {}  # entry -> (where, lines, limit, what)
    for top in CPP_DIRS:
        for path in sorted((root / top).rglob("*")):
            if path.suffix not in CPP_SUFFIXES or not path.is_file():
                continue
            rel = path.relative_to(root).as_posix()
            for name, first, lines in functions(path.read_text(errors="replace")):
                if lines >= FUNCTION_LIMIT:
                    entry = f"{rel}:{name}"
                    if entry not in over or over[entry][1] < lines:
                        over[entry] = (f"{rel}:{first}", lines, f"under {FUNCTION_LIMIT}", "function " + name)
    docs = [root / "README.md", root / "bench" / "RESULTS.md"] + sorted((root / "docs").glob("*.md"))
    docs += sorted((root / "src").rglob("README.md"))
    for path in docs:
        if path.is_file():
            lines = len(path.read_text(errors="replace").splitlines())
            if lines > DOC_LIMIT:
                rel = path.relative_to(root).as_posix()
                over[rel] = (rel, lines, f"at most {DOC_LIMIT}", "document")
    failed = 0
    for entry, (where, lines, limit, what) in sorted(over.items()):
        if entry in listed:
            continue
        failed += 1
        fix = ("split it into pieces that have names of their own"
               if what.startswith("function") else "move sections to documents of their own and link them")
        print(f"size_check: {where}: {what} is {lines} lines (limit: {limit}); {fix}. "
              f"{EXCEPTIONS} lists today's exceptions and may only shrink: do not add to it.")
    for entry, number in sorted(listed.items(), key=lambda e: e[1]):
        if entry not in over:
            failed += 1
            print(f"size_check: {EXCEPTIONS}:{number}: {entry} is no longer over its limit (or is gone): "
                  "remove the line, so the list shrinks.")
    print(f"size_check: {len(over)} over the limits, {len(listed)} listed exceptions, {failed} finding(s)",
          file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
