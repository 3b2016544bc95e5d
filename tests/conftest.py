"""Make the checkout importable as ansible_collections.gpufleet.cluster for unit tests."""

import os
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(REPO, ".collections")
TESTS = os.path.join(REPO, "tests")
FIXTURES = os.path.join(TESTS, "fixtures")

for path in (COLLECTIONS, TESTS):
    if path not in sys.path:
        sys.path.insert(0, path)


@pytest.fixture
def utc(monkeypatch):
    """Local time is UTC for the test (dmesg --ctime and syslog lines print the host's local time;
    the captures' clocks are read as UTC)."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def local_tz():
    """A function that sets the process's TZ (os.environ + time.tzset) for the test; the TZ of
    before is restored after it (time is checked in several zones: docs/contracts.md, "Time")."""
    saved = os.environ.get("TZ")

    def use(zone):
        os.environ["TZ"] = zone
        time.tzset()

    yield use
    if saved is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = saved
    time.tzset()
