"""No product Python file over 900 lines (issue 43 item 5): a file that grows past it is split by job
(as capture.py into capture_walk/capture_sources/capture, kubeadm.py into kubeadm_output/kubeadm_policy/
kubeadm), not left to become the next 1,300-line file. Product: everything under plugins/ and the
Python scripts roles ship to nodes."""

import os

from conftest import REPO

LIMIT = 900


def _product_python():
    for top in ("plugins", "roles"):
        for folder, dirs, files in os.walk(os.path.join(REPO, top)):
            dirs[:] = [d for d in dirs if d not in ("__pycache__", "molecule")]
            for name in files:
                path = os.path.join(folder, name)
                if name.endswith(".py"):
                    yield path
                elif top == "roles" and os.path.basename(folder) == "files":
                    with open(path, "rb") as handle:
                        first = handle.readline()
                    if first.startswith(b"#!") and b"python" in first:
                        yield path


def test_no_product_python_file_over_the_limit():
    paths = sorted(_product_python())
    assert any(p.endswith(os.path.join("module_utils", "capture", "capture.py")) for p in paths)
    over = []
    for path in paths:
        with open(path, "rb") as handle:
            lines = handle.read().count(b"\n")
        if lines > LIMIT:
            over.append("%s: %d lines" % (os.path.relpath(path, REPO), lines))
    assert over == []
