"""A small simulated fleet for real ansible-playbook runs of playbooks/validate.yml: local connection,
each host reading its own fixture tree (tests/fixtures/nodes) with the fake NVML binding
(tests/fake_nvml) and an NVML scenario (tests/fixtures/nvml), as bench/fleet_validate.py builds it;
and AWX's job slicing of an inventory.

Slicing as AWX does it (ansible/awx, awx/main/models/inventory.py: get_script_data() orders the
hosts by name, get_sliced_hosts() keeps ``hosts[slice_number - 1::slice_count]``; each slice job gets
an inventory of its hosts only, and awx/main/models/unified_jobs.py awx_meta_vars() gives every job
of the workflow a sliced job becomes the same ``awx_workflow_job_id``)."""

import json
import os

# (fixture node, NVML scenario, gpu options, rdma options): healthy, failing and degraded hosts
FLEET = {
    "node-01": ("dgx-h100", "h100-healthy", {"expected_count": 8, "expected_driver_version": "580"},
                {"expected_devices": 9, "min_rate_gbps": 200}),
    "node-02": ("dgx-h100", "h100-gpu-fell-off-bus", {"expected_count": 8}, {"expected_devices": 9}),
    "node-03": ("hdr-degraded", "h100-healthy", {}, {"expected_devices": 4, "min_rate_gbps": 200}),
    "node-04": ("empty", "h100-healthy", {}, {}),
    "node-05": ("dgx-h100", "h100-fabric-not-started", {"expected_count": 8}, {"expected_devices": 9}),
    "node-06": ("dgx-h100", "h100-row-remap-pending", {"expected_count": 8}, {"expected_devices": 9}),
}


def inventory(tests_dir, python, hosts=None):
    """The inventory (a dict) of ``hosts`` (default all of FLEET) with the fixtures below
    ``tests_dir`` (the repository's tests/ as the controller sees it) and ``python`` as the
    hosts' interpreter."""
    entries = {}
    for name in sorted(hosts if hosts is not None else FLEET):
        node, scenario, gpu, rdma = FLEET[name]
        entries[name] = {
            "gpufleet_validate_root": os.path.join(tests_dir, "fixtures", "nodes", node),
            "gpufleet_validate_gpu": dict(gpu, xid_source="none",
                                          nvml_binding_path=os.path.join(tests_dir, "fake_nvml")),
            "gpufleet_validate_rdma": rdma,
            "gpufleet_validate_environment": {
                "GPUFLEET_FAKE_NVML_SCENARIO": os.path.join(tests_dir, "fixtures", "nvml", scenario + ".json")},
        }
    return {"all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": python,
                             "ansible_pipelining": True, "gpufleet_validate_fail_on": "never"},
                    "hosts": entries}}


def awx_slices(hosts, count):
    """The host names of each of ``count`` slices (AWX: ordered by name, slice k gets every
    count-th host from the k-th)."""
    ordered = sorted(hosts)
    return [ordered[number - 1::count] for number in range(1, count + 1)]


def write(path, document):
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=1)
    return str(path)


def report_checks(report_dir):
    """{(host, check id, target): check} of the fleet picture, without the fields that name a run
    (failing_since: the id of the run that began a failing streak)."""
    with open(os.path.join(str(report_dir), "fleet-report.json"), encoding="utf-8") as handle:
        document = json.load(handle)
    checks = {}
    for host, entry in document["hosts"].items():
        for original in entry["checks"]:
            check = dict(original)
            check.pop("failing_since", None)
            checks[(host, check["id"], check["target"])] = check
    return document, checks
