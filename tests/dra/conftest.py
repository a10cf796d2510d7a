"""pytest hooks of tests/dra: each test's report on its item (rep_call), so a fixture can print
the agent's log for a failed test."""
import pytest


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    rep = (yield).get_result()
    setattr(item, "rep_" + rep.when, rep)
