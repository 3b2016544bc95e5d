"""gpudirect, mode peermem, module loading off, sysfs from dgx-h100 fixture trees.

"stale": nvidia_peermem loaded but not in /sys/module/ib_core/holders (built before OFED);
"legacy": nv_peer_mem loaded, its (stand-in) service enabled and running. dkms is a recording
stand-in: the rebuild commands are asserted, no module is built.
"""
import json


def report(host, name):
    return json.loads(host.file("/var/lib/gpufleet-test/%s.json" % name).content_string)


def test_peermem_persisted(host):
    conf = host.file("/etc/modules-load.d/nvidia-peermem.conf")
    assert conf.mode == 0o644
    assert "\nnvidia-peermem\n" in conf.content_string


def test_stale_build_detected_and_rebuilt(host):
    data = report(host, "stale-rebuild")
    assert data["state"] == "not_registered"
    assert data["peermem"] == {"nvidia_peermem": True, "nv_peer_mem": False, "registered": False}
    assert data["rebuild_needed"] is True
    assert data["rebuilt"] is True
    assert any("built before OFED; rebuilt, reload it or reboot" in m for m in data["messages"])


def test_rerun_does_not_rebuild_again(host):
    data = report(host, "stale-rerun")
    assert data["state"] == "not_registered"
    assert data["rebuilt"] is False
    assert not any("rebuild nvidia-peermem" in m for m in data["messages"])


def test_rebuilt_once_with_dkms(host):
    kernel = host.check_output("uname -r")
    log = host.file("/var/lib/gpufleet-test/dkms.log").content_string.splitlines()
    # converge rebuilt; the idempotence run found the stack unchanged and did not.
    assert log == [
        "dkms remove -m nvidia-current -v 535.261.03 -k %s" % kernel,
        "dkms install -m nvidia-current -v 535.261.03 -k %s" % kernel,
    ]
    stamp = json.loads(host.file("/var/lib/gpufleet/peermem-rebuild.json").content_string)
    assert stamp == {"kernel": kernel, "driver": "580.95.05", "ofed": ""}


def test_check_mode_changed_nothing_but_reported(host):
    data = report(host, "stale-check")
    assert data["state"] == "not_registered"
    assert data["rebuilt"] is False
    assert any(m.startswith("would rebuild nvidia-peermem") for m in data["messages"])


def test_legacy_nv_peer_mem_stopped_and_disabled(host):
    data = report(host, "legacy")
    assert data["legacy_nv_peer_mem"] is True
    assert data["peermem"]["nv_peer_mem"] is True
    assert any("stopped and disabled" in m for m in data["messages"])
    service = host.service("nv_peer_mem")
    assert not service.is_running
    assert not service.is_enabled
