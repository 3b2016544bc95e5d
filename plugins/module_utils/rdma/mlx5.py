# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""mlx5_core driver, OFED user space and RDMA devices as facts (docs/contracts.md, "Facts").

Pure logic over a SysfsReader (rooted, tolerant, memoised) and a command runner, so that unit
tests feed fixture trees and scripted ``ofed_info`` output. A malformed or unreadable sysfs
file makes only its own field null.
"""

from __future__ import absolute_import, division, print_function


import os
import re

from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.ofed import (
    loaded_matches_installed,
    parse_ofed_info,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import is_index

MELLANOX_VENDOR = 0x15B3
INBOX_VERSIONS = frozenset(["5.0-0"])
IB_CLASS = "sys/class/infiniband"
VERBS_CLASS = "sys/class/infiniband_verbs"
PCI_DEVICES = "sys/bus/pci/devices"
MLX5_MODULE = "sys/module/mlx5_core"
OFED_INFO_TIMEOUT = 30

# Control characters other than tab and newline (clean_text).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f]")
# ASCII digits only, bounded: a state id or rate never becomes a huge or non-finite number.
_STATE = re.compile(r"^\s*([0-9]{1,6})\s*:\s*(\S.{0,63}?)\s*$", re.ASCII)
_RATE = re.compile(r"^\s*([0-9]{1,7}(?:\.[0-9]{1,6})?)\s*Gb/sec"
                   r"(?:\s*\(\s*([0-9]{1,3}X)\s*([A-Za-z0-9]{0,16})\s*\))?\s*$", re.ASCII)


def parse_state(text):
    """``4: ACTIVE`` -> (4, "ACTIVE"); a bare name -> (None, name); garbage/None -> (None, None)."""
    if text is None:
        return None, None
    match = _STATE.match(text)
    if match:
        return int(match.group(1)), match.group(2)
    if re.match(r"^[A-Za-z][A-Za-z_ ]{0,63}$", text.strip()):
        return None, text.strip()
    return None, None


def parse_rate(text):
    """``400 Gb/sec (4X NDR)`` -> (400.0, "4X", "NDR"); None fields where it does not parse."""
    if not isinstance(text, str):
        return None, None, None
    match = _RATE.match(text)
    if not match:
        return None, None, None
    return float(match.group(1)), match.group(2), (match.group(3) or None)


def is_ipv4_mapped(gid):
    """Whether a sysfs GID (``0000:0000:0000:0000:0000:ffff:c0a8:6401``) is IPv4-mapped.

    ``::ffff:0.0.0.0`` (an unpopulated entry) is not."""
    if not gid:
        return False
    import ipaddress  # here: only RoCE GIDs need it (1 ms of every agent cycle's start-up)

    try:
        mapped = ipaddress.IPv6Address(gid.strip()).ipv4_mapped
    except ValueError:
        return False
    return mapped is not None and int(mapped) != 0


def roce_v2_ipv4_gid_index(reader, device, port):
    """First GID index of ``<device>/<port>`` whose type is ``RoCE v2`` and whose GID is
    IPv4-mapped, else None (docs/contracts.md ``roce_v2_gid_index``; also perftest's default ``-x``).

    The one implementation of this rule: mlx5 facts, rdma_validate (through the facts) and
    rdma_bandwidth use it. It reads the GID table whatever the link layer; callers that only
    want RoCE ports check ``link_layer`` first. Unpopulated entries (``types/<i>`` answering
    EINVAL, GID all zeros) and non-numeric entries are skipped.
    """
    base = "%s/%s/ports/%s" % (IB_CLASS, device, port)
    names = set(reader.listdir(base + "/gids")) | set(reader.listdir(base + "/gid_attrs/types"))
    for name in sorted(names, key=_port_sort_key):
        if not is_index(name):  # '²'.isdigit() is True, int('²') raises
            continue
        if not is_ipv4_mapped(clean_text(reader.read("%s/gids/%s" % (base, name)))):
            continue
        kind = clean_text(reader.read("%s/gid_attrs/types/%s" % (base, name)))
        if kind is not None and kind.strip().lower() == "roce v2":
            return int(name)
    return None


def clean_text(value):
    """``value`` unless it holds undecodable bytes or control characters (then None)."""
    if value is None:
        return None
    if not isinstance(value, str):  # callers pass text; anything else is judged as before 8d8295c (a loop)
        return None if "\ufffd" in value or any(ord(ch) < 32 and ch not in "\t\n" for ch in value) else value
    if "\ufffd" in value or _CONTROL.search(value):
        return None
    return value


def _port_sort_key(name):
    if is_index(name):
        return (0, int(name), name)
    return (1, 0, name)


class Mlx5Gatherer(object):
    """Collects the ``ansible_facts.mlx5`` dict from a SysfsReader."""

    def __init__(self, reader, runner=None, ofed_info=None):
        self.reader = reader
        self.runner = runner
        self.ofed_info = ofed_info

    def _read(self, rel):
        return clean_text(self.reader.read(rel))

    # -- driver ------------------------------------------------------------------------------
    def driver(self):
        loaded = self.reader.isdir(MLX5_MODULE)
        version = self._read(MLX5_MODULE + "/version") if loaded else None
        srcversion = self._read(MLX5_MODULE + "/srcversion") if loaded else None
        kernel = self._read("proc/sys/kernel/osrelease")
        if not loaded:
            source = "absent"
        elif version is None or version in INBOX_VERSIONS or (kernel is not None and version == kernel):
            source = "inbox"
        else:
            source = "ofed"
        return {"loaded": loaded, "version": version, "srcversion": srcversion, "driver_source": source}

    # -- OFED user space ---------------------------------------------------------------------
    def _ofed_info_path(self):
        if self.ofed_info:
            return self.ofed_info
        if self.runner is None:
            return None
        # Only the host's own PATH makes sense for the host's own root; a fixture tree or a
        # mounted image must not be described by the controller's ofed_info.
        if os.path.realpath(self.reader.root) != os.path.realpath("/"):
            return None
        return self.runner.which("ofed_info")

    def ofed(self, driver):
        result = {"installed": False, "package_version": None, "flavor": None,
                  "loaded_matches_installed": None}
        path = self._ofed_info_path()
        if not path or self.runner is None:
            return result
        result["installed"] = True
        answer = self.runner.run([path, "-s"], timeout=OFED_INFO_TIMEOUT)
        if answer.rc == 0:
            version, flavor = parse_ofed_info(answer.stdout)
            result["package_version"] = version
            result["flavor"] = flavor
        if result["package_version"] and driver["loaded"]:
            if driver["driver_source"] == "ofed":
                result["loaded_matches_installed"] = loaded_matches_installed(
                    driver["version"], result["package_version"])
            else:
                result["loaded_matches_installed"] = False
        return result

    # -- PCI ---------------------------------------------------------------------------------
    def pci_functions(self):
        count = 0
        for address in self.reader.listdir(PCI_DEVICES):
            if self.reader.read_int("%s/%s/vendor" % (PCI_DEVICES, address), 16) == MELLANOX_VENDOR:
                count += 1
        return count

    # -- devices -----------------------------------------------------------------------------
    def devices(self):
        return [self.device(name) for name in self.reader.listdir(IB_CLASS)]

    def device(self, name):
        base = "%s/%s" % (IB_CLASS, name)
        numa = self.reader.read_int(base + "/device/numa_node")
        ports = [self.port(name, port)
                 for port in sorted(self.reader.listdir(base + "/ports"), key=_port_sort_key)]
        return {
            "name": name,
            "driver": self.reader.link_name(base + "/device/driver"),
            "pci_address": self._pci_address(base),
            "hca_type": self._read(base + "/hca_type"),
            "board_id": self._read(base + "/board_id"),
            "fw_ver": self._read(base + "/fw_ver"),
            "node_guid": self._read(base + "/node_guid"),
            "numa_node": numa if numa is not None and numa >= 0 else None,
            "netdevs": self._netdevs(base, ports),
            "uverbs": self._uverbs(name, base),
            "ports": [port for port, _ndevs in ports],
        }

    def _pci_address(self, base):
        address = self.reader.real_name(base + "/device")
        if address and re.match(r"^[0-9a-fA-F]{4,}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$", address):
            return address
        return None

    def _netdevs(self, base, ports):
        names = []
        for netdev in self.reader.listdir(base + "/device/net"):
            if netdev not in names:
                names.append(netdev)
        for _port, ndevs in ports:
            for netdev in ndevs:
                if netdev not in names:
                    names.append(netdev)
        return names

    def _uverbs(self, name, base):
        for entry in self.reader.listdir(base + "/device/infiniband_verbs"):
            if not entry.startswith("uverbs"):
                continue
            ibdev = self._read("%s/device/infiniband_verbs/%s/ibdev" % (base, entry))
            if ibdev is None or ibdev == name:
                return entry
        for entry in self.reader.listdir(VERBS_CLASS):
            if entry.startswith("uverbs") and self._read("%s/%s/ibdev" % (VERBS_CLASS, entry)) == name:
                return entry
        return None

    def port(self, device, port):
        base = "%s/%s/ports/%s" % (IB_CLASS, device, port)
        state_id, state = parse_state(self._read(base + "/state"))
        phys_id, phys = parse_state(self._read(base + "/phys_state"))
        rate, width, speed = parse_rate(self._read(base + "/rate"))
        link_layer = self._read(base + "/link_layer")
        gid_index, ndevs = None, []
        if link_layer != "InfiniBand":
            gid_index = roce_v2_ipv4_gid_index(self.reader, device, port)
            ndevs = self._gid_netdevs(base)
        number = int(port) if is_index(port) else port
        entry = {
            "port": number,
            "state": state,
            "state_id": state_id,
            "phys_state": phys,
            "phys_state_id": phys_id,
            "rate_gbps": rate,
            "width": width,
            "speed": speed,
            "link_layer": link_layer,
            "lid": self.reader.read_int(base + "/lid", 16),
            "sm_lid": self.reader.read_int(base + "/sm_lid", 16),
            "roce_v2_gid_index": gid_index,
        }
        return entry, ndevs

    def _gid_netdevs(self, base):
        """Netdevs the GID table of a RoCE port names (``gid_attrs/ndevs/<i>``), in index order."""
        ndevs = []
        for index in sorted(self.reader.listdir(base + "/gids"), key=_port_sort_key):
            gid = self._read("%s/gids/%s" % (base, index))
            if not gid or set(gid.replace(":", "")) <= set("0"):
                continue
            ndev = self._read("%s/gid_attrs/ndevs/%s" % (base, index))
            if ndev and re.match(r"^[\w.@:-]+$", ndev) and ndev not in ndevs:
                ndevs.append(ndev)
        return ndevs

    # -- all ---------------------------------------------------------------------------------
    def gather(self):
        driver = self.driver()
        facts = dict(driver)
        facts["ofed"] = self.ofed(driver)
        facts["pci_functions"] = self.pci_functions()
        facts["devices"] = self.devices()
        return facts


def gather_mlx5_facts(reader, runner, ofed_info=None):
    """The ``ansible_facts.mlx5`` dict (docs/contracts.md, "Facts") for the tree below ``reader.root``.

    ``ofed_info`` is the path of the ofed_info executable; when None it is searched on PATH
    through ``runner.which``, but only when ``reader.root`` is ``/`` (a fixture tree or mounted
    image is never described by the controller's own OFED).
    """
    return Mlx5Gatherer(reader, runner, ofed_info).gather()


def check_mlx5_options(params):
    """Errors (each naming its option) in mlx5_facts options beyond what types catch and the
    framework's root check (framework.checked_root)."""
    errors = []
    path = params.get("ofed_info")
    if path:
        if not os.path.isfile(path):
            errors.append("option ofed_info: %s does not exist or is not a file" % path)
        elif not os.access(path, os.X_OK):
            errors.append("option ofed_info: %s is not executable" % path)
    return errors
