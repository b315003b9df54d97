#!/usr/bin/env python3
"""Checks that every relative link in the repository's Markdown docs resolves.

Scans README.md, docs/*.md, kernels/README.md and src/**/README.md for [text](target) links that
are not URLs; a target must name an existing file or folder, and a #fragment must match a heading
of the target file (GitHub's slug rules). Exit status 1 and one line per broken link otherwise.
Usage: scripts/check_doc_links.py (from anywhere in the repository)."""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.*)$", text, flags=re.M)}


def main():
    files = [ROOT / "README.md", ROOT / "kernels" / "README.md"]
    files += sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "src").glob("**/README.md"))
    bad = []
    for md in files:
        if not md.exists():
            continue
        text = re.sub(r"```.*?```", "", md.read_text(encoding="utf-8"), flags=re.S)
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, frag = target.partition("#")
            dest = (md.parent / path).resolve() if path else md
            where = f"{md.relative_to(ROOT)}: {target}"
            if not dest.exists():
                bad.append(f"{where}: no such file ({dest.relative_to(ROOT) if ROOT in dest.parents else dest})")
            elif frag and dest.suffix == ".md" and frag not in anchors(dest):
                bad.append(f"{where}: no heading #{frag} in {dest.relative_to(ROOT)}")
    for line in bad:
        print(line)
    if bad:
        print(f"{len(bad)} broken link(s); fix the target or the heading", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
