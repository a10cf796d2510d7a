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


def _tree(tmp, table_rows, chain):
    import check_docs
    for d in ("src/agent", "src/util", "guard", "sim", "docs"):
        os.makedirs(tmp / d, exist_ok=True)
    (tmp / "src/agent/loop.c").write_text("")
    (tmp / "docs/architecture.md").write_text("# x\n\n## Modules\n\n| folder | what |\n|---|---|\n" +
                                              "".join(f"| {a} | {b} |\n" for a, b in table_rows) + "\n## Tests\n")
    (tmp / "HACKING.md").write_text(f"Dependencies: {chain}.\n")
    return check_docs.check(str(tmp))


def test_docs_tables_agree_with_the_tree(tmp_path):
    import check_docs
    rows = [("`src/agent/`", "the loop (`loop.c`)"), ("`src/util/`", "x"), ("`guard/`", "y"), ("`sim/`", "z")]
    assert _tree(tmp_path, rows, check_docs.chain()) == []


def test_docs_tables_find_a_missing_row_a_missing_file_and_a_wrong_chain(tmp_path):
    rows = [("`src/agent/`", "the loop (`loop.c`), `gone.c`"), ("`guard/`", "y"), ("`sim/`", "z")]
    errors = _tree(tmp_path, rows, "`util` ← `agent`")
    assert any("names gone.c, but src/agent/gone.c does not exist" in e for e in errors), errors
    assert any("no row for src/util/" in e for e in errors), errors
    assert any("dependency chain is not check_layering.py's RANKS" in e for e in errors), errors
    assert len(errors) == 3, errors
