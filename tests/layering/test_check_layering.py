"""The layering check's own rules on made-up call graphs: a call into a folder above (or beside)
the caller's is a violation, down or within a folder is not; nested folders count as their top
folder; a circle is found."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_layering as c  # noqa: E402


def test_upward_and_sideways_calls_are_violations():
    assert c.upward_calls({"src/agent/agent.c": {"src/util/util.c", "src/agent/loop.c"}}) == []
    up = c.upward_calls({"src/util/util.c": {"src/agent/agent.c"}})
    assert len(up) == 1 and "util/ (rank 0) may not depend on agent/ (rank 7)" in up[0], up
    beside = c.upward_calls({"src/gpu/nvml.c": {"src/kube/kube.c"}})  # both rank 5
    assert len(beside) == 1, beside


def test_nested_folders_belong_to_their_top_folder():
    assert c.folder_of("src/agent/sub/x.c") == "agent"
    assert c.folder_of("sim/extra/y.c") == "sim"
    assert len(c.upward_calls({"src/core/deep/z.c": {"src/agent/agent.c"}})) == 1


def test_a_circle_is_found():
    assert c.cycles({"src/a/x.c": {"src/a/y.c"}, "src/a/y.c": {"src/a/x.c"}}) == [["src/a/x.c", "src/a/y.c"]]
    assert c.cycles({"src/a/x.c": {"src/a/y.c"}}) == []
