"""The agent's Prometheus alert rules (roles/node_health_agent/files/prometheus/) with
`promtool test rules` (Debian package prometheus; skipped, saying so, when promtool is absent)
and the metric names they use are the ones the agent writes."""

import glob
import os
import re
import shutil
import subprocess

import pytest
import yaml
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


# dcgm-exporter 4.9 renamed metrics (docs/dcgm-exporter-metrics.md); the recording rules that read
# both generations ship beside the agent's rules
PROMETHEUS_DIR = os.path.dirname(RULES)
COMPAT_RULES = os.path.join(PROMETHEUS_DIR, "dcgm-exporter-compat-rules.yml")
COMPAT_TESTS = os.path.join(REPO, "tests", "prometheus", "dcgm-exporter-compat-rules.test.yml")
METRICS_DOC = os.path.join(REPO, "docs", "dcgm-exporter-metrics.md")


def _doc_table():
    """Rows of the table "Old name -> new name": (old, new, recording rule or None)."""
    with open(METRICS_DOC) as handle:
        section = handle.read().split("\n## Old name → new name\n", 1)[1]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.split("|")[1:-1]]
        if len(cells) != 5 or not cells[0].startswith("`DCGM_FI_"):
            continue
        (old,), (new,) = re.findall(r"`(DCGM_FI_\w+)`", cells[0])[:1], re.findall(r"`(DCGM_FI_\w+)`", cells[1])[:1]
        record = re.findall(r"`(gpufleet:[\w:]+)`", cells[3])
        rows.append((old, new, record[0] if record else None))
    return rows


def _compat_rules():
    with open(COMPAT_RULES) as handle:
        (group,) = yaml.safe_load(handle)["groups"]
    return group["rules"]


def test_shipped_alert_rules_read_no_dcgm_exporter_metric():
    """gpufleet's alert rules read no dcgm-exporter series, by old or new name, nor its host label:
    a rule added later that reads one must go through the gpufleet:dcgm_* recording rules (both
    exporter generations) and say so here."""
    for path in glob.glob(os.path.join(PROMETHEUS_DIR, "*.yml")):
        if path == COMPAT_RULES:
            continue
        with open(path) as handle:
            text = handle.read()
        assert not re.search(r"\bDCGM_(FI|EXP)_\w+", text), path
        assert "Hostname" not in text, path


def test_compat_rules_are_the_documented_mapping():
    """Every recording rule reads the new name of one table row, falls back to its old name, and the
    table names that rule; every row with a rule has one (docs/dcgm-exporter-metrics.md, one mapping)."""
    rows = _doc_table()
    assert len(rows) >= 14
    documented = {record: (old, new) for old, new, record in rows if record}
    rules = {rule["record"]: rule["expr"] for rule in _compat_rules()}
    assert set(rules) == set(documented)
    for record, expr in rules.items():
        old, new = documented[record]
        names = re.findall(r"\bDCGM_FI_\w+\b", expr)
        assert names[:2] == ["DCGM_FI_DRIVER_VERSION", "DCGM_FI_SYSTEM_DRIVER_VERSION"], record  # both dropped
        assert names[2:] == [new, old], (record, names)  # the new series first, the old one as fallback
        assert "or on (UUID, GPU_I_ID)" in expr, record


def test_compat_rules_tested_with_both_generations():
    """The promtool test feeds every rule its old and its new series."""
    with open(COMPAT_TESTS) as handle:
        tests = yaml.safe_load(handle)["tests"]
    for rule in _compat_rules():
        old, new = [n for n in re.findall(r"\bDCGM_FI_\w+\b", rule["expr"]) if "DRIVER_VERSION" not in n]
        fed = [{s["series"].split("{", 1)[0] for s in t["input_series"]} for t in tests
               if any(e["expr"] == rule["record"] for e in t.get("promql_expr_test", []))]
        assert fed and all({old, new} <= names for names in fed), rule["record"]


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool not installed (Debian package prometheus; scripts/setup.sh installs it when run as root)")
def test_promtool_compat_rules():
    out = subprocess.run(["promtool", "test", "rules", COMPAT_TESTS], check=False, capture_output=True, text=True,
                         cwd=os.path.dirname(COMPAT_TESTS))
    assert out.returncode == 0, out.stdout + out.stderr
    check = subprocess.run(["promtool", "check", "rules", COMPAT_RULES], check=False, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
