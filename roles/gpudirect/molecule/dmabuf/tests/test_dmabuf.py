"""gpudirect, mode dmabuf, module loading off, dgx-h100 fixture trees with open / proprietary banners."""
import json


def test_peermem_not_persisted(host):
    assert not host.file("/etc/modules-load.d/nvidia-peermem.conf").exists


def test_open_modules_accepted(host):
    data = json.loads(host.file("/var/lib/gpufleet-test/open.json").content_string)
    assert data["mode"] == "dmabuf"
    assert data["open_modules"] is True
    assert data["persisted"] is False
    assert data["rebuild_needed"] is False


def test_proprietary_modules_refused(host):
    text = host.file("/var/lib/gpufleet-test/proprietary.txt").content_string
    assert "gpudirect_mode=dmabuf needs NVIDIA's open kernel modules" in text
    assert "NVIDIA UNIX x86_64 Kernel Module  580.95.05" in text
