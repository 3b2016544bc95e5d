"""Make the checkout importable as ansible_collections.gpufleet.cluster for unit tests."""

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(REPO, ".collections")
TESTS = os.path.join(REPO, "tests")
FIXTURES = os.path.join(TESTS, "fixtures")

for path in (COLLECTIONS, TESTS):
    if path not in sys.path:
        sys.path.insert(0, path)
