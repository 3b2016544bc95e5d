# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""nvidia_dra_device_cel: the CEL selector of a DeviceClass of NVIDIA's DRA driver for GPUs
(documentation: nvidia_dra_device_cel.yml). The driver name is module_utils/health/gate.py's
(DEVICE_TAINT_DEFAULTS["gpu_driver"]), the one the per-device DeviceTaintRules select: the
DeviceClasses role kubernetes_addons applies and the taints the health gate writes name the same
driver."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.module_utils.health.gate import DEVICE_TAINT_DEFAULTS

# Device types of the GPU kubelet plugin (attribute <driver>.type) that gpufleet gives a DeviceClass:
# a full GPU and a MIG device (static MIG: the instances that exist on a GPU in MIG mode). The third,
# vfio (a GPU bound to vfio-pci), needs the driver's PassthroughSupport feature gate, which is off.
NVIDIA_DRA_DEVICE_TYPES = ("gpu", "mig")


def nvidia_dra_device_cel(device_type):
    """``device_type``: gpu or mig -> the CEL expression selecting those devices."""
    if device_type not in NVIDIA_DRA_DEVICE_TYPES:
        raise AnsibleFilterError("nvidia_dra_device_cel: device type must be one of %s, got %r"
                                 % (", ".join(NVIDIA_DRA_DEVICE_TYPES), device_type))
    driver = DEVICE_TAINT_DEFAULTS["gpu_driver"]
    return "device.driver == '%s' && device.attributes['%s'].type == '%s'" % (driver, driver, device_type)


class FilterModule(object):
    def filters(self):
        return {"nvidia_dra_device_cel": nvidia_dra_device_cel}
