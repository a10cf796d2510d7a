#!/bin/sh
# lint.sh ROOT: shellcheck on every shell script of the project and a syntax check of every Python
# file. The real-GPU checks (tests/gpu/) and the benchmarks run nowhere in CI, so this is all CI
# sees of them; the rest is linted too. Files: what git tracks under ROOT, or, outside a checkout,
# every file below it except build directories.
set -eu
# A build dependency (scripts/deps.sh installs shellcheck): without it lint fails, it does not skip.
command -v shellcheck >/dev/null || { echo "lint: shellcheck is not installed (scripts/deps.sh installs it)"; exit 1; }
cd "$1"
list() { # GLOB
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git ls-files "$1"
    else
        find . -name "$1" -not -path './build*' -not -path '*/.*' | sed 's|^\./||' | sort
    fi
}
sh_files=$(list '*.sh')
py_files=$(list '*.py')
[ -n "$sh_files" ] || { echo "lint: no shell scripts found under $1"; exit 1; }
# shellcheck disable=SC2086 # one file per word: no tracked name has spaces
shellcheck $sh_files
# shellcheck disable=SC2086
python3 -c 'import ast, sys
for f in sys.argv[1:]:
    with open(f, encoding="utf-8") as fh:
        ast.parse(fh.read(), f)' $py_files
echo "lint: $(echo "$sh_files" | wc -l) shell scripts, $(echo "$py_files" | wc -l) Python files"
