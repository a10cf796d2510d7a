"""Bounded waits for tests, instead of fixed sleeps: until(pred) polls until pred() is true,
steady(get) until get() has returned the same value for `polls` polls in a row. Both fail with
`what` and the last value seen when the deadline passes; neither sleeps longer than it must."""
import time


def until(pred, timeout=5.0, interval=0.05, what="the condition"):
    """Polls pred() until it returns a true value (returned), at most timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not reached in {timeout} s (last: {got!r})")
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
