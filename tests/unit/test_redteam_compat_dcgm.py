"""Red team, issue 44 items 2-4 (area compat_dcgm): the compatibility rules `dcgm-3-end-of-support`
and `efa-grace-blackwell-driver-580` (docs/compatibility.md, docs/versions.md, roles/preflight/README.md)
driven with odd but real inputs, and the optional recording rules gpufleet:dcgm_*
(roles/node_health_agent/files/prometheus/dcgm-exporter-compat-rules.yml, docs/dcgm-exporter-metrics.md)
driven through `promtool test rules` with series shaped as a real fleet scrapes them (the scrape
labels job/instance/pod/namespace of a ServiceMonitor, a rollout with two exporter pods, MIG,
a renumbered GPU, counter resets, NaN).

Every test quotes the sentence of the docs it holds the code to. Written from the docs only."""

import os
import shutil
import subprocess

import pytest
import yaml
from conftest import REPO
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import compatibility

DCGM_RULE = "dcgm-3-end-of-support"
EFA_RULE = "efa-grace-blackwell-driver-580"
NVCR = "nvcr.io/nvidia/k8s/dcgm-exporter"
DIGEST = "sha256:" + "0123456789abcdef" * 4


def ids(facts):
    return [p["id"] for p in compatibility.evaluate(facts)]


# --------------------------------------------------------------------------------------------------
# dcgm-3-end-of-support
#
# docs/compatibility.md, rule: "an exporter image built on DCGM 3 (tag 3.x.y-...) is one of them";
# fact dcgm_exporter_dcgm: "DCGM version inside the DCGM exporter image (the first part of its tag);
# unknown for a digest or a tag of another form"; "A rule whose facts are not all known is not
# evaluated."; docs/versions.md: "the image tag is `<DCGM version>-<exporter version>` plus the
# variant ... Container image tags can append an image variant".
# --------------------------------------------------------------------------------------------------

# Real dcgm-exporter tags on DCGM 3 or older (NVIDIA's NGC catalogue nvcr.io/nvidia/k8s/dcgm-exporter
# and GPU Operator values files over the years: 3.3.9-3.6.1-ubuntu22.04 / -ubi9 are the last DCGM 3
# builds, 2.4.6-2.6.10-ubuntu20.04 of GPU Operator 1.x, 1.7.2-2.0.0-rc.12-ubuntu18.04 of the
# Docker Hub image nvidia/dcgm-exporter) under registries of every shape a site uses.
DCGM3_IMAGES = [
    NVCR + ":3.3.9-3.6.1-ubuntu22.04",
    NVCR + ":3.3.9-3.6.1-ubi9",
    NVCR + ":3.3.8-3.6.0-ubuntu22.04",
    NVCR + ":3.3.9-3.6.1",                                                # no variant
    NVCR + ":3.3.9-3.6.1-UBUNTU22.04",                                    # upper-case variant (a valid tag)
    NVCR + ":2.4.6-2.6.10-ubuntu20.04",                                   # DCGM 2
    "nvidia/dcgm-exporter:1.7.2-2.0.0-rc.12-ubuntu18.04",                 # DCGM 1, exporter pre-release
    "myreg:5000/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04",        # registry with a port
    "localhost:5000/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04",
    "[fd00::1]:5000/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04",    # IPv6 registry with a port
    "harbor.example.com/nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04",  # mirror rewrite (prefix)
    "harbor.example.com:8443/proxy-nvcr/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04",
    "dcgm-exporter:3.3.9-3.6.1-ubuntu22.04",                              # bare name (docker.io/library)
    "NVCR.IO/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04",           # registry host in capitals
]


@pytest.mark.parametrize("image", DCGM3_IMAGES)
def test_dcgm3_image_refused_whatever_the_registry(image):
    problems = compatibility.evaluate({"dcgm_exporter": True, "dcgm_exporter_image": image})
    assert [p["id"] for p in problems] == [DCGM_RULE], (image, problems)
    message = problems[0]["message"]
    dcgm = image.rsplit(":", 1)[1].split("-")[0]
    assert "dcgm_exporter_dcgm=%s" % dcgm in message
    # "Fix: set kubernetes_addons_dcgm_exporter_image to an image on DCGM 4 ..."
    assert "Fix: set kubernetes_addons_dcgm_exporter_image to an image on DCGM 4" in message


@pytest.mark.parametrize("image", [
    NVCR + ":4.7.0-4.9.0-distroless",          # the default (docs/versions.md)
    NVCR + ":4.6.1-4.8.4-distroless",          # "stay on exporter 4.8.4"
    NVCR + ":4.0.0-4.0.1-ubuntu22.04",         # the first DCGM 4
    NVCR + ":4.2.3-4.1.3-ubuntu22.04",
    "myreg:5000/nvidia/k8s/dcgm-exporter:4.7.0-4.9.0-distroless",
    "[fd00::1]:5000/dcgm-exporter:4.7.0-4.9.0-DISTROLESS",
])
def test_dcgm4_image_accepted(image):
    """"requires dcgm_exporter_dcgm >= 4": DCGM 4 under any registry passes."""
    assert ids({"dcgm_exporter": True, "dcgm_exporter_image": image}) == []


@pytest.mark.parametrize("image", [
    NVCR + "@" + DIGEST,                       # "unknown for a digest"
    "myreg:5000/dcgm-exporter@" + DIGEST,
    NVCR + ":latest",                          # "a tag of another form"
    NVCR + ":4.9.0",                           # the short form: DCGM 4.9.0, not refused
    NVCR + ":distroless",
    "myreg:5000/dcgm-exporter",                # no tag at all: the port is no tag
    "myreg:3/dcgm-exporter",                   # a port that looks like a major version
])
def test_unknown_dcgm_is_not_evaluated(image):
    """"unknown for a digest or a tag of another form" + "A rule whose facts are not all known is not
    evaluated": neither refused nor a crash."""
    assert ids({"dcgm_exporter": True, "dcgm_exporter_image": image}) == []


@pytest.mark.parametrize("switch", [False, "false", "False", "no", 0, "0", "off", "OFF"])
def test_exporter_off_its_image_is_not_judged(switch):
    """when: "dcgm_exporter = true" (read as Ansible's bool): an exporter that is not deployed is not judged."""
    assert ids({"dcgm_exporter": switch, "dcgm_exporter_image": DCGM3_IMAGES[0]}) == []


@pytest.mark.parametrize("switch", [True, "true", "True", "yes", "1", 1, "on", "ON", "Yes", "TRUE"])
def test_exporter_on_spelled_as_listed_is_judged(switch):
    assert ids({"dcgm_exporter": switch, "dcgm_exporter_image": DCGM3_IMAGES[0]}) == [DCGM_RULE]


# Moved from the red team's failing attacks (fixed): ----------------------------------------------------------

# 1. The exporter switched on with a value Ansible reads as true. roles/kubernetes_addons/tasks/templated.yml
# deploys the exporter `when: lookup('ansible.builtin.vars', item.enabled) | bool`, and the argument spec
# (type bool) accepts these values. "1" is what `-e kubernetes_addons_dcgm_exporter=1` gives, 1 what an INI
# inventory line gives, "on"/"Yes"/"TRUE" what a quoted YAML value gives.

@pytest.mark.parametrize("switch", ["1", 1, "on", "ON", "Yes", "TRUE"])
def test_exporter_on_by_any_ansible_true_value_gets_dcgm3_refused(switch):
    from ansible.plugins.filter.core import to_bool
    from test_inventory_check import everywhere, inventory

    from ansible_collections.gpufleet.cluster.plugins.plugin_utils import inventory_check
    assert to_bool(switch) is True                       # the role deploys the exporter
    hostvars, groups = inventory(everywhere(kubernetes_addons_dcgm_exporter=switch,
                                            kubernetes_addons_dcgm_exporter_image=DCGM3_IMAGES[0]))
    problems = inventory_check.inventory_problems(hostvars, groups)
    assert any(DCGM_RULE in str(problem) for problem in problems), problems
    facts = compatibility.facts_from_vars({"kubernetes_addons_dcgm_exporter": switch,
                                           "kubernetes_addons_dcgm_exporter_image": DCGM3_IMAGES[0]})
    assert ids(facts) == [DCGM_RULE]


# the same conversion for every boolean-triggered rule of the matrix (one helper, ansible_boolean)
@pytest.mark.parametrize("facts, rule", [
    ({"nvidia_dra_driver": "on", "nvidia_device_plugin": "1", "gpu_allocation": "dra"},
     "nvidia-dra-driver-without-device-plugin"),
    ({"nvidia_dra_driver": 1, "nvidia_device_plugin": "No", "gpu_allocation": "device_plugin"},
     "nvidia-dra-driver-allocation"),
    ({"gpu_feature_discovery": "YES", "node_feature_discovery": "off", "nvidia_device_plugin_version": "v0.20.1"},
     "gfd-needs-nfd"),
    ({"gpu_feature_discovery": "1", "nvidia_device_plugin_version": "v0.14.0"}, "gfd-in-device-plugin-image"),
    ({"node_feature_discovery": "ON", "node_feature_discovery_version": "v0.17.0"}, "nfd-supported-release"),
    ({"gpu_allocation": "dra", "mig_layout": "all-1g.10gb", "device_failures_taint_node": "0"},
     "dra-mig-taints-node"),
])
def test_every_boolean_fact_read_as_ansible_bool(facts, rule):
    assert rule in ids(facts)


@pytest.mark.parametrize("facts, rule", [
    ({"nvidia_dra_driver": "on", "nvidia_device_plugin": "off", "gpu_allocation": "dra"},
     "nvidia-dra-driver-without-device-plugin"),
    ({"gpu_feature_discovery": "YES", "node_feature_discovery": "1", "nvidia_device_plugin_version": "v0.20.1"},
     "gfd-needs-nfd"),
    ({"gpu_feature_discovery": "on", "node_feature_discovery": "external", "nvidia_device_plugin_version": "v0.20.1"},
     "gfd-needs-nfd"),
    ({"gpu_allocation": "dra", "mig_layout": "all-1g.10gb", "device_failures_taint_node": "yes"},
     "dra-mig-taints-node"),
])
def test_boolean_facts_satisfied_by_any_ansible_spelling(facts, rule):
    assert rule not in ids(facts)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.booleans(), st.integers(-3, 3), st.text(max_size=6),
                 st.sampled_from(["1", "0", "on", "OFF", "Yes", "no", "TRUE", "false", "y", "t", " true"])))
def test_ansible_boolean_is_ansibles_bool_filter(value):
    """The matrix's conversion gives what ansible-core's `bool` filter gives for every value that filter
    recognises, and no verdict (the value left as it is) for the rest, which the filter only coerces
    with a deprecation warning."""
    from ansible.plugins.filter import core
    mine = compatibility.ansible_boolean(value)
    lowered = value.lower() if isinstance(value, str) else str(value).lower() if isinstance(value, int) else value
    recognised = lowered in core._valid_bool_true or lowered in core._valid_bool_false
    if recognised:
        assert mine is core.to_bool(value)
    else:
        assert mine is None


# 2. A folded scalar's trailing newline: the template renders `image: {{ ... }}` and the manifest holds the
# value without it (templates/dcgm-exporter.yaml.j2).

def test_folded_scalar_image_is_judged_as_deployed():
    import jinja2
    group_vars = yaml.safe_load("kubernetes_addons_dcgm_exporter: true\n"
                                "kubernetes_addons_dcgm_exporter_image: >\n  %s\n" % DCGM3_IMAGES[0])
    value = group_vars["kubernetes_addons_dcgm_exporter_image"]
    assert value == DCGM3_IMAGES[0] + "\n"
    with open(os.path.join(REPO, "roles", "kubernetes_addons", "templates", "dcgm-exporter.yaml.j2")) as handle:
        (line,) = [x for x in handle if "image: {{ kubernetes_addons_dcgm_exporter_image }}" in x]
    rendered = yaml.safe_load(jinja2.Template(line.strip() + "\n").render(kubernetes_addons_dcgm_exporter_image=value))
    assert rendered["image"] == DCGM3_IMAGES[0]          # what the kubelet pulls
    assert compatibility.image_as_deployed(value) == rendered["image"]
    assert ids(compatibility.facts_from_vars(group_vars)) == [DCGM_RULE]


# 3. tag@digest: the tag names DCGM 3 (the digest pins the content; the tag still names the DCGM it was built on)

@pytest.mark.parametrize("image", [
    DCGM3_IMAGES[0] + "@" + DIGEST,
    "myreg:5000/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubi9@" + DIGEST,
])
def test_tag_and_digest_reference_judged_by_its_tag(image):
    assert ids({"dcgm_exporter": True, "dcgm_exporter_image": image}) == [DCGM_RULE]


def test_tag_and_digest_of_dcgm4_accepted():
    assert ids({"dcgm_exporter": True, "dcgm_exporter_image": NVCR + ":4.7.0-4.9.0-distroless@" + DIGEST}) == []


# 4. The short tag form upstream documents is the DCGM version (NVIDIA/dcgm-exporter RELEASE.md, "Versioning":
# "The long form: ${DCGM_VERSION}-${EXPORTER_VERSION}-${PLATFORM}; The short form: ${DCGM_VERSION}; The latest
# tag: latest").

@pytest.mark.parametrize("image", [
    NVCR + ":3.3.9",
    NVCR + ":3.6.1",
    "nvidia/dcgm-exporter:2.4.6",
    NVCR + ":3.3.9@" + DIGEST,
])
def test_short_form_tag_of_dcgm_3_refused(image):
    assert ids({"dcgm_exporter": True, "dcgm_exporter_image": image}) == [DCGM_RULE]


@pytest.mark.parametrize("image", [NVCR + ":4.8.4", NVCR + ":4.7.0"])
def test_short_form_tag_of_dcgm_4_accepted(image):
    """`:4.8.4` in the short form is DCGM 4.8.4, not the exporter 4.8.4: DCGM 4, not refused."""
    assert compatibility.dcgm_exporter_tag(image) == (image.rsplit(":", 1)[1], None)
    assert ids({"dcgm_exporter": True, "dcgm_exporter_image": image}) == []


def test_from_variables_default_image_passes_and_site_image_is_judged():
    """Fact dcgm_exporter_image: "read from kubernetes_addons_dcgm_exporter_image; default: role
    kubernetes_addons"; the default is DCGM 4.7.0 (docs/versions.md) and passes, under a mirror too;
    the site's DCGM 3 image under a port-bearing mirror is refused, naming the variable."""
    for extra in ({}, {"gpufleet_registry_mirror": "mirror.example.com:5000"}):
        facts = compatibility.facts_from_vars(dict({"kubernetes_addons_dcgm_exporter": True}, **extra))
        assert compatibility.dcgm_exporter_tag(facts["dcgm_exporter_image"]["value"])[0] == "4.7.0"
        assert [p["id"] for p in compatibility.evaluate(facts) if p["id"] == DCGM_RULE] == []
    image = "mirror.example.com:5000/nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04"
    facts = compatibility.facts_from_vars({"kubernetes_addons_dcgm_exporter": "yes",
                                           "kubernetes_addons_dcgm_exporter_image": image})
    (problem,) = [p for p in compatibility.evaluate(facts) if p["id"] == DCGM_RULE]
    assert "kubernetes_addons_dcgm_exporter_image" in problem["message"]


_version = st.tuples(st.integers(0, 12), st.integers(0, 12), st.integers(0, 12)).map(
    lambda t: "%d.%d.%d" % t)
_registry = st.sampled_from(["", "nvcr.io/nvidia/k8s/", "myreg:5000/", "localhost:5000/nvidia/k8s/",
                             "[fd00::1]:5000/", "harbor.example.com:8443/proxy/nvcr.io/nvidia/k8s/"])
_variant = st.sampled_from(["", "-distroless", "-ubuntu22.04", "-ubi9", "-UBUNTU22.04", "-ubuntu20.04-amd64"])


@settings(max_examples=200, deadline=None)
@given(_registry, _version, _version, _variant)
def test_documented_tag_form_judged_by_its_first_part(registry, dcgm, exporter, variant):
    """Any image in the documented tag form "<DCGM version>-<exporter version>" plus a variant, under
    any registry (with or without a port): refused exactly when the DCGM part is below 4."""
    image = "%sdcgm-exporter:%s-%s%s" % (registry, dcgm, exporter, variant)
    refused = ids({"dcgm_exporter": True, "dcgm_exporter_image": image}) == [DCGM_RULE]
    assert refused == (int(dcgm.split(".")[0]) < 4), image


# --------------------------------------------------------------------------------------------------
# efa-grace-blackwell-driver-580
#
# docs/compatibility.md: when "efa = present and cpu_architecture = aarch64 and gpu_architectures has
# one of blackwell, blackwell-ultra", requires "driver < 595"; "Fix: set nvidia_driver_branch to "580"
# (the default) for these nodes (and no nvidia_driver_version of 595 or later)"; "Versions compare
# numerically part by part ... 580 < 580.95.05".
# --------------------------------------------------------------------------------------------------

GB200 = ["0x2941"] * 4          # P6e-GB200: 4 GB200 GPUs per Grace pair (table: blackwell 0x2900-0x2fff)
GB300 = ["0x31c2"] * 4          # P6e-GB300 (blackwell-ultra 0x3180-0x31ff)
GRACE_EFA = {"efa": "present", "cpu_architecture": "aarch64", "kernel_modules": "open"}


@pytest.mark.parametrize("driver", ["595", 595, "595.91.07", "595.58.03", "610", 610, "610.57.04", "615"])
@pytest.mark.parametrize("gpus", [GB200, GB300, ["0x31C2"] * 4], ids=["gb200", "gb300", "gb300-upper"])
def test_grace_blackwell_efa_refuses_595_and_later(driver, gpus):
    problems = compatibility.evaluate(dict(GRACE_EFA, gpu_device_ids=gpus, driver=driver))
    assert [p["id"] for p in problems] == [EFA_RULE], problems
    assert 'Fix: set nvidia_driver_branch to "580"' in problems[0]["message"]


@pytest.mark.parametrize("driver", ["580", 580, "580.173.02", "580.95.05", "590", "594.99"])
def test_grace_blackwell_efa_accepts_below_595(driver):
    assert ids(dict(GRACE_EFA, gpu_device_ids=GB200, driver=driver)) == []


@pytest.mark.parametrize("change", [
    {"gpu_device_ids": ["0x2342"]},             # GH200 (Grace Hopper): hopper, not in the rule
    {"gpu_device_ids": ["0x2348"]},             # GH200 144G
    {"cpu_architecture": "x86_64"},             # P6-B200: x86 with EFA
    {"efa": "absent"},                          # GB200 NVL72 outside AWS
    {"gpu_device_ids": ["0x2330"] * 8},         # H100 (P5) - and not aarch64 anyway
])
def test_efa_rule_only_for_grace_blackwell_with_efa(change):
    facts = dict(GRACE_EFA, gpu_device_ids=GB200, driver="595")
    facts.update(change)
    assert EFA_RULE not in ids(facts)


@pytest.mark.parametrize("missing", ["efa", "cpu_architecture", "gpu_device_ids", "driver"])
def test_efa_rule_not_evaluated_without_its_facts(missing):
    """"A rule whose facts are not all known is not evaluated." (the first play of site.yml has no
    node facts: the rule is the preflight's)."""
    facts = dict(GRACE_EFA, gpu_device_ids=GB200, driver="610")
    del facts[missing]
    assert EFA_RULE not in ids(facts)


def _node(variables):
    facts = compatibility.facts_from_vars(variables)
    facts.update({"efa": {"value": "present", "origin": "/sys/bus/pci/drivers/efa"},
                  "cpu_architecture": {"value": "aarch64", "origin": "CPU architecture of the node"},
                  "gpu_device_ids": {"value": GB200, "origin": "GPUs on the PCI bus"}})
    return [p for p in compatibility.evaluate(facts) if p["id"] == EFA_RULE]


def test_driver_unset_is_the_default_580_and_passes():
    """"set nvidia_driver_branch to "580" (the default)": a node with no driver variable passes."""
    assert _node({}) == []
    assert _node({"nvidia_driver_branch": None}) == []


@pytest.mark.parametrize("variables", [
    {"nvidia_driver_branch": "595"},
    {"nvidia_driver_branch": 595},                                          # an int from YAML
    {"nvidia_driver_branch": "610"},
    {"nvidia_driver_version": "595.91.07"},
    {"nvidia_driver_version": "595.58.03", "nvidia_driver_branch": "580"},  # "and no nvidia_driver_version of 595 or later"
    {"nvidia_driver_version": "", "nvidia_driver_branch": "610"},
])
def test_driver_from_variables_refused(variables):
    (problem,) = _node(variables)
    origin = "nvidia_driver_version" if variables.get("nvidia_driver_version") else "nvidia_driver_branch"
    assert "(from %s)" % origin in problem["message"], problem["message"]


# --------------------------------------------------------------------------------------------------
# gpufleet:dcgm_* recording rules (promtool)
#
# docs/dcgm-exporter-metrics.md: "Each records gpufleet:dcgm_* in the 4.9 unit from the 4.9 series of a
# GPU, else from its old series converted; the label Hostname of exporters before 4.8.3 becomes
# hostname, both driver-version labels are dropped, and a GPU that exports both generations at once
# (a rollout) is counted once, with the 4.9 value."  Units: "clocks x10^6, utilization /100".
# Series below carry the scrape labels a Prometheus ServiceMonitor adds (job, instance, pod,
# namespace), which the project's own promtool test leaves out.
# --------------------------------------------------------------------------------------------------

RULES = os.path.join(REPO, "roles", "node_health_agent", "files", "prometheus", "dcgm-exporter-compat-rules.yml")
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="promtool not installed (Debian package prometheus)")


def _labels(**labels):
    return ",".join('%s="%s"' % item for item in sorted(labels.items()))


def _scrape(pod, ip, node):
    return {"job": "dcgm-exporter", "namespace": "gpu-operator", "pod": pod, "instance": "%s:9400" % ip,
            "container": "exporter", "node": node}


OLD_482 = "580.95.05"   # driver label values
NEW_DRV = "595.91.07"


def _old(metric, uuid, gpu, host, scrape, capital=False, **extra):
    """A series of exporter <= 4.8 (4.5.3-4.8.2 with label Hostname when capital)."""
    labels = dict(scrape, UUID=uuid, gpu=gpu, DCGM_FI_DRIVER_VERSION=OLD_482, modelName="NVIDIA H100 80GB HBM3",
                  device="nvidia%s" % gpu, pci_bus_id="00000000:18:00.0", **extra)
    labels["Hostname" if capital else "hostname"] = host
    return "%s{%s}" % (metric, _labels(**labels))


def _new(metric, uuid, gpu, host, scrape, **extra):
    labels = dict(scrape, UUID=uuid, gpu=gpu, hostname=host, DCGM_FI_SYSTEM_DRIVER_VERSION=NEW_DRV,
                  modelName="NVIDIA H100 80GB HBM3", device="nvidia%s" % gpu, pci_bus_id="00000000:18:00.0", **extra)
    return "%s{%s}" % (metric, _labels(**labels))


def _out(record, uuid, gpu, host, scrape, **extra):
    labels = dict(scrape, UUID=uuid, gpu=gpu, hostname=host, modelName="NVIDIA H100 80GB HBM3",
                  device="nvidia%s" % gpu, pci_bus_id="00000000:18:00.0", **extra)
    return "%s{%s}" % (record, _labels(**labels))


def _promtool(tmp_path, tests):
    doc = {"rule_files": [RULES], "evaluation_interval": "1m", "tests": tests}
    path = tmp_path / "redteam.test.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = subprocess.run(["promtool", "test", "rules", str(path)], check=False, capture_output=True, text=True,
                         cwd=str(tmp_path), timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


OLD_POD = _scrape("dcgm-exporter-7xk2p", "10.42.1.17", "gpu-n1")
NEW_POD = _scrape("dcgm-exporter-q9v4d", "10.42.1.23", "gpu-n1")
N2 = _scrape("dcgm-exporter-bb1zz", "10.42.2.5", "gpu-n2")
N3 = _scrape("dcgm-exporter-cc2yy", "10.42.3.5", "gpu-n3")


# (record, old metric, new metric, old value, new value, expected from old, expected from new)
PAIRS = [
    ("gpufleet:dcgm_gpu_temp:celsius", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP_CELSIUS", 61, 48, 61, 48),
    ("gpufleet:dcgm_board_power:watts", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_BOARD_POWER_WATTS", 512.5, 301.25,
     512.5, 301.25),
    ("gpufleet:dcgm_sm_clock:hertz", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_SM_CLOCK_HERTZ", 1980, 1.41e9,
     1.98e9, 1.41e9),
    ("gpufleet:dcgm_memory_clock:hertz", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", 2619, 1.593e9,
     2.619e9, 1.593e9),
    ("gpufleet:dcgm_gpu_util:ratio", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO", 55, 0.25, 0.55, 0.25),
    ("gpufleet:dcgm_xid_error", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERROR", 79, 48, 79, 48),
    ("gpufleet:dcgm_tensor_util:ratio", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_TENSOR_UTIL_RATIO",
     0.5, 0.125, 0.5, 0.125),
]


@needs_promtool
def test_mixed_fleet_rollout_with_scrape_labels(tmp_path):
    """A fleet mid-move: gpu-n1 runs the old pod (4.8.4) and the new pod (4.9) at once (a DaemonSet
    rollout: different pod names and IPs), gpu-n2 still runs 4.5.3-4.8.2 (label Hostname), gpu-n3 runs
    4.9 only. One series per GPU, in the 4.9 unit, hostname everywhere, no driver label, the 4.9 value
    for the GPU exporting both; the scrape labels of the series kept are those of the 4.9 pod."""
    tests = []
    for record, old, new, old_value, new_value, from_old, from_new in PAIRS:
        tests.append({
            "interval": "1m",
            "input_series": [
                {"series": _old(old, "GPU-1", "0", "gpu-n1", OLD_POD), "values": "%sx4" % old_value},
                {"series": _new(new, "GPU-1", "0", "gpu-n1", NEW_POD), "values": "%sx4" % new_value},
                {"series": _old(old, "GPU-2", "0", "gpu-n2", N2, capital=True), "values": "%sx4" % old_value},
                {"series": _new(new, "GPU-3", "0", "gpu-n3", N3), "values": "%sx4" % new_value},
            ],
            "promql_expr_test": [{
                "expr": record, "eval_time": "3m",
                "exp_samples": [
                    {"labels": _out(record, "GPU-1", "0", "gpu-n1", NEW_POD), "value": from_new},
                    {"labels": _out(record, "GPU-2", "0", "gpu-n2", N2), "value": from_old},
                    {"labels": _out(record, "GPU-3", "0", "gpu-n3", N3), "value": from_new},
                ]}],
        })
    _promtool(tmp_path, tests)


@needs_promtool
def test_rollout_in_time_no_gap_no_double(tmp_path):
    """The old pod stops at 3m, the new pod starts at 2m: at every minute one series for the GPU,
    the old value converted until the new one exists, the 4.9 value from then on."""
    record = "gpufleet:dcgm_sm_clock:hertz"
    tests = [{
        "interval": "1m",
        "input_series": [
            {"series": _old("DCGM_FI_DEV_SM_CLOCK", "GPU-1", "0", "gpu-n1", OLD_POD, capital=True),
             "values": "1980 1980 1980 1980 stale"},
            {"series": _new("DCGM_FI_DEV_SM_CLOCK_HERTZ", "GPU-1", "0", "gpu-n1", NEW_POD),
             "values": "_ _ 1.755e9 1.755e9 1.755e9 1.755e9"},
        ],
        "promql_expr_test": [
            {"expr": "count by (UUID) (%s)" % record, "eval_time": "%dm" % minute,
             "exp_samples": [{"labels": '{UUID="GPU-1"}', "value": 1}]} for minute in range(6)
        ] + [
            {"expr": "max by (UUID) (%s)" % record, "eval_time": "1m",
             "exp_samples": [{"labels": '{UUID="GPU-1"}', "value": 1.98e9}]},
            {"expr": "max by (UUID) (%s)" % record, "eval_time": "2m",
             "exp_samples": [{"labels": '{UUID="GPU-1"}', "value": 1.755e9}]},
            {"expr": "max by (UUID) (%s)" % record, "eval_time": "5m",
             "exp_samples": [{"labels": '{UUID="GPU-1"}', "value": 1.755e9}]},
        ],
    }]
    _promtool(tmp_path, tests)


@needs_promtool
def test_mig_instances_in_a_rollout_each_counted_once(tmp_path):
    """"one gpufleet:dcgm_* series per GPU (per MIG instance)" (the rules' header): two MIG instances
    of one GPU exported by both generations give two series, each with its 4.9 value."""
    record = "gpufleet:dcgm_gpu_util:ratio"
    mig = [("1", "3g.40gb"), ("2", "3g.40gb")]
    series = []
    expected = []
    for (gi, profile), old_value, new_value in zip(mig, (90, 10), (0.875, 0.125)):
        extra = {"GPU_I_ID": gi, "GPU_I_PROFILE": profile}
        series.append({"series": _old("DCGM_FI_DEV_GPU_UTIL", "GPU-m", "0", "gpu-n1", OLD_POD, **extra),
                       "values": "%sx3" % old_value})
        series.append({"series": _new("DCGM_FI_DEV_GPU_UTIL_RATIO", "GPU-m", "0", "gpu-n1", NEW_POD, **extra),
                       "values": "%sx3" % new_value})
        expected.append({"labels": _out(record, "GPU-m", "0", "gpu-n1", NEW_POD, **extra), "value": new_value})
    _promtool(tmp_path, [{"interval": "1m", "input_series": series,
                          "promql_expr_test": [{"expr": record, "eval_time": "2m", "exp_samples": expected}]}])


@needs_promtool
def test_renumbered_gpu_counted_once_by_uuid(tmp_path):
    """A GPU renumbered across the exporter change (gpu 0 before, 3 after: the index follows the PCI
    enumeration, the UUID the board) is still "counted once, with the 4.9 value"."""
    record = "gpufleet:dcgm_gpu_temp:celsius"
    _promtool(tmp_path, [{
        "interval": "1m",
        "input_series": [
            {"series": _old("DCGM_FI_DEV_GPU_TEMP", "GPU-1", "0", "gpu-n1", OLD_POD), "values": "70x3"},
            {"series": _new("DCGM_FI_DEV_GPU_TEMP_CELSIUS", "GPU-1", "3", "gpu-n1", NEW_POD), "values": "44x3"},
        ],
        "promql_expr_test": [{"expr": record, "eval_time": "2m",
                              "exp_samples": [{"labels": _out(record, "GPU-1", "3", "gpu-n1", NEW_POD),
                                               "value": 44}]}],
    }])


@needs_promtool
def test_nan_of_the_new_series_wins_over_the_old_value(tmp_path):
    """"counted once, with the 4.9 value", even when that value is NaN: no second series from the old
    generation, and the old value (40 %) does not leak into the record."""
    record = "gpufleet:dcgm_gpu_util:ratio"
    _promtool(tmp_path, [{
        "interval": "1m",
        "input_series": [
            {"series": _new("DCGM_FI_DEV_GPU_UTIL_RATIO", "GPU-1", "0", "gpu-n1", NEW_POD), "values": "NaN NaN NaN"},
            {"series": _old("DCGM_FI_DEV_GPU_UTIL", "GPU-1", "0", "gpu-n1", OLD_POD), "values": "40 40 40"},
        ],
        "promql_expr_test": [
            {"expr": "count by (UUID) (%s)" % record, "eval_time": "2m",
             "exp_samples": [{"labels": '{UUID="GPU-1"}', "value": 1}]},
            {"expr": "count by (UUID, pod) (%s != %s)" % (record, record), "eval_time": "2m",   # NaN != NaN
             "exp_samples": [{"labels": '{UUID="GPU-1",pod="%s"}' % NEW_POD["pod"], "value": 1}]},
            {"expr": "%s == 0.4" % record, "eval_time": "2m", "exp_samples": []},
        ],
    }])


@needs_promtool
def test_counter_reset_kept_and_driver_labels_dropped(tmp_path):
    """PCIe replay and row remap counters: "none (counter)": the record follows the counter through an
    exporter restart (a reset stays a reset), and carries neither DCGM_FI_DRIVER_VERSION nor
    DCGM_FI_SYSTEM_DRIVER_VERSION nor Hostname."""
    record = "gpufleet:dcgm_pcie_replay:total"
    _promtool(tmp_path, [{
        "interval": "1m",
        "input_series": [
            {"series": _old("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "GPU-2", "0", "gpu-n2", N2, capital=True),
             "values": "10 20 30 2 12 22"},
            {"series": _new("DCGM_FI_DEV_PCIE_REPLAY_TOTAL", "GPU-3", "0", "gpu-n3", N3),
             "values": "100 110 5 15 25 35"},
        ],
        "promql_expr_test": [
            {"expr": "resets(%s[6m])" % record, "eval_time": "5m",
             "exp_samples": [{"labels": _out("", "GPU-2", "0", "gpu-n2", N2), "value": 1},
                             {"labels": _out("", "GPU-3", "0", "gpu-n3", N3), "value": 1}]},
            {"expr": record, "eval_time": "5m",
             "exp_samples": [{"labels": _out(record, "GPU-2", "0", "gpu-n2", N2), "value": 22},
                             {"labels": _out(record, "GPU-3", "0", "gpu-n3", N3), "value": 35}]},
            {"expr": '{__name__=~"gpufleet:dcgm_.*", DCGM_FI_DRIVER_VERSION!=""}', "eval_time": "5m",
             "exp_samples": []},
            {"expr": '{__name__=~"gpufleet:dcgm_.*", DCGM_FI_SYSTEM_DRIVER_VERSION!=""}', "eval_time": "5m",
             "exp_samples": []},
            {"expr": '{__name__=~"gpufleet:dcgm_.*", Hostname!=""}', "eval_time": "5m", "exp_samples": []},
        ],
    }])


# Moved from the red team's failing attacks (fixed): two exporters of one generation on one GPU ------------------

@needs_promtool
@pytest.mark.parametrize("first, second", [
    (lambda m, n: _old(m, "GPU-1", "0", "gpu-n1", N2, capital=True), lambda m, n: _old(m, "GPU-1", "0", "gpu-n1", N3)),
    (lambda m, n: _new(n, "GPU-1", "0", "gpu-n1", N2), lambda m, n: _new(n, "GPU-1", "0", "gpu-n1", N3)),
])
def test_two_exporters_of_one_generation_one_record_per_gpu(tmp_path, first, second):
    """The rules' header: "Each rule below records one gpufleet:dcgm_* series per GPU (per MIG instance)".
    GPU Operator's exporter (4.6.0-4.8.3, label hostname) beside an older one of the site's (4.5.3-4.8.2,
    label Hostname) on the same GPU from another pod, or two 4.9 exporters: one record, the higher value,
    a second GPU beside them its own."""
    record = "gpufleet:dcgm_gpu_temp:celsius"
    old, new = "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP_CELSIUS"
    _promtool(tmp_path, [{
        "interval": "1m",
        "input_series": [
            {"series": first(old, new), "values": "50x3"},
            {"series": second(old, new), "values": "51x3"},
            {"series": _new(new, "GPU-2", "1", "gpu-n1", N3), "values": "40x3"},
        ],
        "promql_expr_test": [
            {"expr": "count by (UUID) (%s)" % record, "eval_time": "2m",
             "exp_samples": [{"labels": '{UUID="GPU-1"}', "value": 1}, {"labels": '{UUID="GPU-2"}', "value": 1}]},
            {"expr": "max by (UUID) (%s)" % record, "eval_time": "2m",
             "exp_samples": [{"labels": '{UUID="GPU-1"}', "value": 51}, {"labels": '{UUID="GPU-2"}', "value": 40}]},
        ],
    }])


# Moved from the red team's failing attacks (fixed): the rolling upgrade of the driver evaluates the node rules
# (end to end: tests/integration/test_rolling_upgrade_compatibility.py) -------------------------------------------

def test_rolling_upgrade_of_the_driver_evaluates_the_node_rules():
    """The first play's inventory check sees variables only (nvidia_driver_branch "595" passes there); the
    driver component runs role preflight's compatibility check on the node before it is touched."""
    from test_inventory_check import everywhere, inventory

    from ansible_collections.gpufleet.cluster.plugins.plugin_utils import inventory_check
    hostvars, groups = inventory(everywhere(nvidia_driver_branch="595"))
    assert inventory_check.inventory_problems(hostvars, groups) == []
    tasks = os.path.join(REPO, "roles", "rolling_upgrade", "tasks")
    with open(os.path.join(tasks, "plan.yml")) as handle:
        plan = yaml.safe_load(handle)
    (step,) = [task for task in plan if task.get("ansible.builtin.include_tasks") == "compatibility.yml"]
    assert "'driver' in rolling_upgrade_components" in step["when"]
    with open(os.path.join(tasks, "compatibility.yml")) as handle:
        check = yaml.safe_load(handle)
    assert check[0]["ansible.builtin.include_role"] == {"name": "gpufleet.cluster.preflight", "tasks_from": "compatibility"}
    with open(os.path.join(REPO, "roles", "preflight", "tasks", "compatibility.yml")) as handle:
        entry = yaml.safe_load(handle)
    assert "check_compatibility.yml" in [task.get("ansible.builtin.include_tasks") for task in entry]
