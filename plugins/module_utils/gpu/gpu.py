# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA GPU facts read from sysfs only (docs/contracts.md, "Facts"), without NVML.

``gather_gpu_facts(reader)`` returns the ``ansible_facts.nvidia`` dict. Every PCI function
below ``<root>/sys/bus/pci/devices`` is looked at once (vendor and class), through the
memoised, tolerant SysfsReader: an unreadable attribute only drops that field from the facts;
``pci_read_problems`` names the vendor / class files that could not be read, so gpu.count can
fail closed (a PCI function whose class is unknown may be a GPU NVML no longer sees).
"""

from __future__ import absolute_import, division, print_function

NVIDIA_VENDOR = 0x10DE
# PCI class codes (base class << 8 | subclass); the low byte is the programming interface.
CLASS_VGA = 0x0300  # GeForce / workstation boards with a display engine
CLASS_3D = 0x0302  # data-centre boards (A100, H100, ...)
CLASS_BRIDGE_OTHER = 0x0680  # NVSwitch

PCI_DEVICES = "sys/bus/pci/devices"


def pci_functions(reader):
    """(address, vendor, class, device_id) of every PCI function; unreadable ones are None."""
    functions = []
    for address in reader.listdir(PCI_DEVICES):
        base = "%s/%s/" % (PCI_DEVICES, address)
        functions.append((address, reader.read_int(base + "vendor", 16),
                          reader.read_int(base + "class", 16), reader.read(base + "device")))
    return functions


def pci_read_problems(reader):
    """``/<file>: <reason>`` of every listed PCI function's ``vendor`` / ``class`` that could not
    be read (unreadable, vanished, empty, not a number): whether it is an NVIDIA GPU is unknown.
    A function whose vendor reads as another vendor needs no class."""
    problems = []
    for address in reader.listdir(PCI_DEVICES):
        base = "%s/%s/" % (PCI_DEVICES, address)
        vendor = reader.read_int(base + "vendor", 16)
        if vendor is None:
            problems.append(reader.required_problem(base + "vendor") or "/%svendor: not a number" % base)
            continue
        if vendor == NVIDIA_VENDOR and reader.read_int(base + "class", 16) is None:
            problems.append(reader.required_problem(base + "class") or "/%sclass: not a number" % base)
    return problems


def _numa_node(reader, address):
    value = reader.read_int("%s/%s/numa_node" % (PCI_DEVICES, address))
    if value is None or value < 0:
        return None
    return value


def nvidia_pci_functions(reader):
    """(gpus, nvswitches): PCI addresses of NVIDIA GPUs and NVSwitches, sorted."""
    gpus, switches = [], []
    for address, vendor, pci_class, _device in pci_functions(reader):
        if vendor != NVIDIA_VENDOR or pci_class is None:
            continue
        base_sub = pci_class >> 8
        if base_sub in (CLASS_VGA, CLASS_3D):
            gpus.append(address)
        elif base_sub == CLASS_BRIDGE_OTHER:
            switches.append(address)
    return gpus, switches


def gather_gpu_facts(reader):
    """The ``ansible_facts.nvidia`` dict (docs/contracts.md, "Facts")."""
    gpus, switches = nvidia_pci_functions(reader)
    pci_gpus = []
    for address in gpus:
        device_id = reader.read("%s/%s/device" % (PCI_DEVICES, address))
        pci_gpus.append({
            "pci_address": address,
            "device_id": device_id.lower() if device_id else None,
            "numa_node": _numa_node(reader, address),
        })
    driver_loaded = reader.isdir("sys/module/nvidia")
    return {
        "pci_gpus": pci_gpus,
        "gpu_count": len(pci_gpus),
        "nvswitch_count": len(switches),
        "driver": {
            "loaded": driver_loaded,
            "version": reader.read("sys/module/nvidia/version") if driver_loaded else None,
        },
        "nouveau_loaded": reader.isdir("sys/module/nouveau"),
        "peermem": {
            "nvidia_peermem": reader.isdir("sys/module/nvidia_peermem"),
            "nv_peer_mem": reader.isdir("sys/module/nv_peer_mem"),
            # ib_core lists the peer-memory client among its holders once it registered.
            "registered": reader.exists("sys/module/ib_core/holders/nvidia_peermem"),
        },
        "fabricmanager_required": len(switches) > 0,
    }


def pci_link(reader, address):
    """Link attributes of a PCI function from sysfs (the device's own capability is max_*)."""
    base = "%s/%s/" % (PCI_DEVICES, address)
    return {
        "max_width": reader.read_int(base + "max_link_width"),
        "max_speed": reader.read(base + "max_link_speed"),
        "current_width": reader.read_int(base + "current_link_width"),
        "current_speed": reader.read(base + "current_link_speed"),
    }
