"""check_layering.py ROOT BUILD: the layering rules of HACKING.md, checked on the tree and its build.

1. Folders depend one way. Each folder has a rank; a file may include headers of its own folder
   and of folders of a lower rank only. (src/place/frag.h, the fragmentation measure, is its own
   library below src/core/; the rest of src/place/ is above it.)
2. Calls point the same way: a source file may call functions of its own folder and of folders
   of a lower rank only (a prototype written by hand does not get around rule 1).
3. No circle between source files: A.c calls B.c when A.c's object needs a symbol B.c's object
   defines (nm, on the objects of BUILD's libraries and executables, tests and benchmarks
   excepted). A cycle (A -> B -> ... -> A) is an error, inside a folder too: two files that call
   each other belong together, or one of them holds something that belongs in a third.

Prints each violation and exits 1; prints a summary and exits 0 when there is none.
"""
import os
import re
import subprocess
import sys

RANKS = {
    "util": 0, "catalog": 1, "config": 2, "frag": 3, "core": 4,
    "gpu": 5, "cdi": 5, "kubelet": 5, "mps": 5, "place": 5, "guard": 5, "kube": 5, "httpd": 5,
    "sim": 6, "consolidate": 6, "mig": 6, "cdihook": 6, "dra": 6,
    "agent": 7, "doctor": 7, "extender": 7, "cli": 8, "main": 9,
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def folder_of(rel):
    """The folder (rank key) of a path relative to the root, or None outside the checked code."""
    parts = rel.split("/")
    if rel == "src/gpuslice.c":
        return "main"
    if rel == "src/place/frag.h" or rel == "src/place/frag.c":
        return "frag"
    if parts[0] == "src" and len(parts) >= 3:  # nested folders belong to their top folder
        return parts[1]
    if parts[0] in ("sim", "guard") and len(parts) >= 2:
        return parts[0]
    return None


def resolve(root, rel, inc):
    """The root-relative path an #include "inc" in file rel names (the build adds src/ and the
    root to the include path, and the file's own directory comes first)."""
    for base in (os.path.dirname(rel), "src", ""):
        cand = os.path.normpath(os.path.join(base, inc))
        if os.path.isfile(os.path.join(root, cand)):
            return cand
    return None


def source_of(obj):
    """The source file of a meson object: DIR/libNAME.a.p/FILE.c.o -> DIR/FILE.c;
    gpuslice.p/src_cli_node.c.o -> src/cli/node.c (meson flattens the path with '_')."""
    d, b = os.path.split(obj)
    b = b[:-2]
    parent = os.path.dirname(d)
    if parent:
        return os.path.join(parent, b)
    # an executable at the build root: the source path with '/' written as '_'
    for top in ("src_", "sim_", "guard_"):
        if b.startswith(top):
            rest = b[len(top):]
            for folder in sorted(RANKS, key=len, reverse=True):
                if rest.startswith(folder + "_"):
                    return f"{top[:-1]}/{folder}/{rest[len(folder) + 1:]}"
            return f"{top[:-1]}/{rest}"
    return b


def calls(build):
    """source file -> the source files whose symbols it uses."""
    defs, undefs = {}, {}
    for d, _, names in os.walk(build):
        rel = os.path.relpath(d, build)
        if rel.split(os.sep)[0] in ("tests", "bench", "meson-private", "meson-logs"):
            continue
        for n in names:
            if not n.endswith(".c.o") or ".pb-c." in n:
                continue
            obj = os.path.normpath(os.path.join(rel, n))
            src = source_of(obj)
            out = subprocess.run(["nm", "-P", os.path.join(d, n)], capture_output=True, text=True,
                                 check=True).stdout
            for line in out.splitlines():
                f = line.split()
                if len(f) < 2:
                    continue
                if f[1] in "TDBRCVW":
                    defs.setdefault(f[0], set()).add(src)
                elif f[1] == "U":
                    undefs.setdefault(src, set()).add(f[0])
    deps = {}
    for src, names in undefs.items():
        for name in names:
            for other in defs.get(name, ()):
                if other != src and os.path.dirname(other) != "" and other.split("/")[0] == src.split("/")[0]:
                    deps.setdefault(src, set()).add(other)
    return deps


def upward_calls(deps):
    """Rule 2: the calls (source file -> the files it calls) into a folder not below the caller's."""
    errors = []
    for src in sorted(deps):
        folder = folder_of(src)
        for other in sorted(deps[src]):
            tfolder = folder_of(other)
            if folder in RANKS and tfolder in RANKS and tfolder != folder and RANKS[tfolder] >= RANKS[folder]:
                errors.append(f"{src}: calls {other}: {folder}/ (rank {RANKS[folder]}) may not depend on "
                              f"{tfolder}/ (rank {RANKS[tfolder]})")
    return errors


def cycles(deps):
    """The strongly connected components of more than one file (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(deps):
        if root in index:
            continue
        work = [(root, iter(sorted(deps.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(deps.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def main(root, build):
    files = []
    for top in ("src", "sim", "guard"):
        for d, _, names in os.walk(os.path.join(root, top)):
            for n in names:
                if n.endswith((".c", ".h")):
                    files.append(os.path.relpath(os.path.join(d, n), root))
    errors = []
    for rel in sorted(files):
        folder = folder_of(rel)
        if folder is None:
            continue
        with open(os.path.join(root, rel), errors="replace") as f:
            text = f.read()
        for inc in INCLUDE.findall(text):
            target = resolve(root, rel, inc)
            if target is None:
                continue  # a generated header (protobuf-c) or a system one
            tfolder = folder_of(target)
            if tfolder is None:
                continue
            unranked = [f for f in (folder, tfolder) if f not in RANKS]
            if unranked:
                errors.append(f"{rel}: folder {unranked[0]}/ has no rank: add it to RANKS in {__file__} "
                              "and to HACKING.md's layout")
                continue
            if tfolder != folder and RANKS[tfolder] >= RANKS[folder]:
                errors.append(f"{rel}: includes {target}: {folder}/ (rank {RANKS[folder]}) may not depend on "
                              f"{tfolder}/ (rank {RANKS[tfolder]})")
    deps = calls(build)
    errors += upward_calls(deps)
    for cyc in cycles(deps):
        errors.append("circle: " + " <-> ".join(cyc))
    for e in errors:
        print(e)
    if errors:
        print(f"{len(errors)} layering violation(s)")
        return 1
    print(f"layering: {len(files)} files, {sum(len(v) for v in deps.values())} calls between source files, "
          "no violation")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: check_layering.py ROOT BUILD")
    sys.exit(main(sys.argv[1], sys.argv[2]))
