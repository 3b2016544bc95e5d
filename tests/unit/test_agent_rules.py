"""The agent's Prometheus alert rules (roles/node_health_agent/files/prometheus/) with
`promtool test rules` (Debian package prometheus; skipped, saying so, when promtool is absent)
and the metric names they use are the ones the agent writes."""

import os
import re
import shutil
import subprocess

import pytest
from conftest import REPO

RULES = os.path.join(REPO, "roles", "node_health_agent", "files", "prometheus", "gpufleet-agent-rules.yml")
TESTS = os.path.join(REPO, "tests", "prometheus", "gpufleet-agent-rules.test.yml")
AGENT = os.path.join(REPO, "plugins", "module_utils", "agent", "agent_publish.py")  # prometheus_text


def test_rules_use_only_metrics_the_agent_writes():
    with open(RULES) as handle:
        used = set(re.findall(r"\bgpufleet_[a-z_]+\b", handle.read()))
    with open(AGENT) as handle:
        written = set(re.findall(r"\bgpufleet_[a-z_]+\b", handle.read()))
    assert used and used <= written, used - written


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool not installed (Debian package prometheus; scripts/setup.sh installs it when run as root)")
def test_promtool_test_rules():
    out = subprocess.run(["promtool", "test", "rules", TESTS], check=False, capture_output=True, text=True,
                         cwd=os.path.dirname(TESTS))
    assert out.returncode == 0, out.stdout + out.stderr
    check = subprocess.run(["promtool", "check", "rules", RULES], check=False, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
