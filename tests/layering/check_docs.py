"""check_docs.py ROOT: the written layout agrees with the tree.

1. docs/architecture.md's Modules table is the one table of the folders: every folder of src/,
   and guard/ and sim/, has a row, and every source file a row names (`x.c`, `x.h`: in the row's
   folder unless the name has a folder) exists.
2. HACKING.md's dependency chain is the one check_layering.py enforces: the text below is made
   from its RANKS, and HACKING.md must hold it as it is.
Exit 0 when both hold; 1 with one line per disagreement."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_layering import RANKS  # noqa: E402


def chain():
    """The dependency chain from RANKS: `a` ← `b` ← (`c`, `d`) ..., lowest rank first."""
    levels = {}
    for folder, rank in RANKS.items():
        levels.setdefault(rank, []).append(folder)
    parts = []
    for rank in sorted(levels):
        names = [f"`{f}`" for f in sorted(levels[rank])]
        parts.append(names[0] if len(names) == 1 else "(" + ", ".join(names) + ")")
    return " ← ".join(parts)


def module_rows(text):
    lines = text.splitlines()
    try:
        start = lines.index("## Modules")
    except ValueError:
        return None
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        if line.startswith("| `"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def check(root):
    errors = []
    arch = os.path.join(root, "docs", "architecture.md")
    rows = module_rows(open(arch, encoding="utf-8").read())
    if not rows:
        return [f"{arch}: no table under '## Modules'"]
    listed = set()
    for row in rows:
        names = re.findall(r"`([^`]+)`", row[0])
        listed.update(n.rstrip("/") for n in names)
        base = names[0] if names else ""
        folder = base if base.endswith("/") else os.path.dirname(base) + "/"
        for cell in row[:2]:
            for name in re.findall(r"`([^`\s]+\.[ch])`", cell):
                path = name if "/" in name else folder + name
                if not os.path.isfile(os.path.join(root, path)):
                    errors.append(f"{arch}: the row of {base} names {name}, but {path} does not exist")
    folders = ["guard", "sim"] + sorted("src/" + d for d in os.listdir(os.path.join(root, "src"))
                                        if os.path.isdir(os.path.join(root, "src", d)))
    for f in folders:
        if f not in listed:
            errors.append(f"{arch}: the Modules table has no row for {f}/")
    hacking = os.path.join(root, "HACKING.md")
    want = chain()
    if want not in " ".join(open(hacking, encoding="utf-8").read().split()):
        errors.append(f"{hacking}: the dependency chain is not check_layering.py's RANKS; write it as: {want}")
    return errors


def main():
    errors = check(sys.argv[1] if len(sys.argv) > 1 else ".")
    for e in errors:
        print(e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
