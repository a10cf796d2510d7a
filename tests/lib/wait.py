"""Bounded waits for tests, instead of fixed sleeps: until(pred) polls until pred() is true,
steady(get) until get() has returned the same value for `polls` polls in a row, holds(pred)
checks that pred() stays true at each of `polls` polls (something that must not happen, watched
for a while). They fail with `what` and the last value seen; none sleeps longer than it must."""
import time


def until(pred, timeout=5.0, interval=0.05, what="the condition", detail=None):
    """Polls pred() until it returns a true value (returned), at most timeout seconds. detail: a
    function whose text is added to the failure (e.g. a process's log)."""
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() >= deadline:
            extra = f"\n{detail()}" if detail else ""
            raise AssertionError(f"{what}: not reached in {timeout} s (last: {got!r}){extra}")
        time.sleep(interval)


def steady(get, polls=4, interval=0.1, timeout=5.0, what="the state"):
    """Polls get() until the same value comes back polls times in a row (returned): a state that
    has settled, not one still changing. At most timeout seconds."""
    deadline = time.monotonic() + timeout
    last, same = get(), 1
    while same < polls:
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: still changing after {timeout} s (last: {last!r})")
        time.sleep(interval)
        now = get()
        same = same + 1 if now == last else 1
        last = now
    return last


def holds(pred, polls=4, interval=0.1, what="the condition", detail=None):
    """Checks pred() at each of polls polls, interval seconds apart: it must be true every time
    (the first false one fails at once). Bounded by polls × interval."""
    for i in range(polls):
        got = pred()
        if not got:
            extra = f"\n{detail()}" if detail else ""
            raise AssertionError(f"{what}: false at poll {i + 1} of {polls} (got {got!r}){extra}")
        if i + 1 < polls:
            time.sleep(interval)
    return got
