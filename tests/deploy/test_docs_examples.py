"""The documentation's runnable examples run as written: each fenced `sh` block that follows a
`<!-- tests/deploy/test_docs_examples.py runs this block as written -->` marker in docs/*.md is
run line by line with `gpuslice` replaced by the built binary (and a private --sim-state), and
must exit 0 without a warning.

Environment (set by meson): GPUSLICE, GS_SOURCE_ROOT."""
import glob
import os
import re
import shlex
import subprocess

import pytest

ROOT = os.environ.get("GS_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPUSLICE = os.environ.get("GPUSLICE") or os.path.join(ROOT, "build", "gpuslice")
MARKER = "<!-- tests/deploy/test_docs_examples.py runs this block as written -->"


def blocks():
    found = []
    for path in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        with open(path) as f:
            text = f.read()
        for m in re.finditer(re.escape(MARKER) + r"\n```sh\n(.*?)```", text, re.S):
            line = text[:m.start()].count("\n") + 1
            found.append(pytest.param(m.group(1), id=f"{os.path.basename(path)}:{line}"))
    return found


def test_marked_blocks_exist():
    assert blocks(), f"no block marked {MARKER!r} in docs/"


@pytest.mark.parametrize("block", blocks())
def test_doc_block_runs_as_written(block, tmp_path):
    for line in block.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        argv = shlex.split(line, comments=True)
        assert argv[0] == "gpuslice", f"only gpuslice commands can run here: {line}"
        assert argv[1] == "--sim", f"examples that run in the tests use a simulated node: {line}"
        argv = [GPUSLICE, "--sim-state", str(tmp_path / "state"), *argv[1:]]
        p = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert p.returncode == 0, f"{line}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
        out = p.stdout + p.stderr
        assert not re.search(r"warning", out, re.I), f"{line}: warns\n{out}"
