"""Filter nvidia_dra_device_cel (plugins/filter/dra.py): the DeviceClass selectors of NVIDIA's DRA
driver name the driver of module_utils/health/gate.py's DeviceTaintRules. The rendered DeviceClasses are
checked (schema, CEL on published devices) in test_k8s_render.py."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.filter.dra import FilterModule, nvidia_dra_device_cel
from ansible_collections.gpufleet.cluster.plugins.module_utils.health import gate


def test_selector_names_the_driver_the_device_taints_select(monkeypatch):
    assert nvidia_dra_device_cel("gpu") == (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'")
    assert nvidia_dra_device_cel("mig").endswith(".type == 'mig'")
    # one place: the expression follows gate.py's driver name
    monkeypatch.setitem(gate.DEVICE_TAINT_DEFAULTS, "gpu_driver", "gpu.example.com")
    assert nvidia_dra_device_cel("gpu").startswith("device.driver == 'gpu.example.com' && "
                                                   "device.attributes['gpu.example.com']")


@pytest.mark.parametrize("device_type", ["vfio", "GPU", "", None, ["gpu"]])
def test_other_device_types_are_refused(device_type):
    with pytest.raises(AnsibleFilterError, match="nvidia_dra_device_cel: device type must be one of gpu, mig"):
        nvidia_dra_device_cel(device_type)


def test_registered():
    assert FilterModule().filters() == {"nvidia_dra_device_cel": nvidia_dra_device_cel}
