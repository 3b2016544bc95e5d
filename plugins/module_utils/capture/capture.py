# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node's state as gpufleet reads it, in one archive that replays (module node_capture, docs/capture.md).

This file collects and packs (``capture_node``, ``Capture``, ``write_archive``); the walk of the tree
is ``capture_walk.py``, the NVML recording, kernel log and ``ofed_info`` are ``capture_sources.py``,
the pseudonyms ``capture_pseudonym.py``.

What is recorded is exactly what the read-only modules read (gpu_facts, mlx5_facts, topology_facts,
node_validate's gpu, rdma and tuning families):

- the files and directories below ``root`` matched by ``ALLOW`` (``capture_patterns``): glob
  patterns over paths relative to root. ``tests/unit/test_node_capture.py`` runs every reader over
  every fixture node with a reader that records each path it looks at and fails when one is not
  covered by these patterns, so the list cannot drift from the code;
- every NVML query the GPU family makes, with its answer or error (``NvmlRecorder``: the family is
  run over a recording proxy of the binding), written in the scenario format of the fake NVML
  (``tests/fake_nvml/pynvml.py``, loaded with ``GPUFLEET_FAKE_NVML_SCENARIO``);
- the kernel-log lines the XID reader uses (the ``NVRM`` lines of the window), as
  ``var/log/kern.log`` below the captured root, where ``xid_source: auto`` finds them;
- the output of ``ofed_info -s`` when root is ``/`` and it is installed (``commands/``).

Bounded: a path is resolved component by component below root, every access through directory
descriptors opened from root with ``O_NOFOLLOW`` (a directory swapped for a link while the capture
runs is refused, never followed); a file cut at ``max_file_bytes`` loses the token the cut split; a
name over 255 bytes once pseudonymised is shortened (MANIFEST ``shortened``); the kernel log file
obeys the link rule; a symbolic link is stored relative
and inside root (an absolute target below root is rewritten relative; a link out of root, into a
loop or through a file is an empty placeholder, listed in the MANIFEST) so that the archive unpacks
with tarfile's ``data`` filter, and followed only inside ``TREES``; each file is read
once (at most ``max_file_bytes``, the sysfs reader's own limit by default); FIFOs and sockets are
skipped, device nodes get an empty stand-in; the number of entries and the total size are capped
(a capture over a cap fails naming the option: an incomplete capture would not replay).

Safe to share: ``Pseudonymiser`` (capture_pseudonym.py) replaces serial numbers, GUIDs, MAC and
hardware addresses, UUIDs, host names and IP addresses by stable pseudonyms of the same shape (the
same value gets the same pseudonym within a capture, in file contents, path names, link targets,
the NVML scenario, the log lines, MANIFEST and capture.json); serials are collected from files, the
kernel log (the driver's ``NVRM: GPU Board Serial Number``) and NVML alike; nothing else is read
(no environment, no credentials).
"""


from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import io
import json
import os
import shutil
import socket
import tarfile
import tempfile
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.capture.capture_pseudonym import Pseudonymiser
from ansible_collections.gpufleet.cluster.plugins.module_utils.capture.capture_sources import (
    kernel_log_lines, ofed_info_output, record_nvml)
from ansible_collections.gpufleet.cluster.plugins.module_utils.capture.capture_walk import (
    DEFAULT_KUBELET_CONFIG, DEFAULT_KUBELET_CONFIG_DIR, DEFAULT_MAX_ENTRIES, DEFAULT_MAX_TOTAL_BYTES, CaptureError,
    TreeWalker, _relative, capture_patterns, capture_trees, log_host_names, root_host_names)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import checked_root
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.gpu import gather_gpu_facts
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import MAX_READ, SysfsReader

FORMAT = 1
ARCHIVE_TOP = "gpufleet-capture"
KERN_LOG = "var/log/kern.log"
NVML_FILE = "nvml.json"
NO_GPU = "no NVIDIA GPU on the PCI bus: the GPU family queries neither NVML nor the kernel log"
# Names the readers look up: a path component equal to a literal component of the capture patterns
# (``sys``, ``dev``, ``node``, ``nvidia``, ``config.d``), or below one of these trees (kernel module
# and driver names): host names and redact values are not applied to it, only shapes and serials are.
LAYOUT_TREES = (("sys", "module"), ("sys", "bus", "pci", "drivers"))
# Files holding a version: every dotted quad in them is a version (``1.14.9.2``), not an address.
VERSION_FILES = frozenset(["version", "srcversion", "fw_ver", "osrelease"])
# A name component is at most NAME_MAX bytes once pseudonymised (else shortened, listed in MANIFEST);
# a member whose path would exceed PATH_LIMIT bytes is left out (listed in MANIFEST).
NAME_MAX = 255
PATH_LIMIT = 3800


# -- the capture --------------------------------------------------------------------------------
def host_names():
    """This host's names (short and full) as the kernel knows them: replaced wherever they appear."""
    name = socket.gethostname()
    return sorted(set(n for n in (name, name.split(".")[0]) if n))


def capture_node(params, runner=None, binding=None, now=None):
    """Capture the node below ``params['root']``; returns a Capture (nothing written yet)."""
    started = time.time()
    now = started if now is None else now
    root = checked_root(params)
    patterns = capture_patterns(params.get("kubelet_config", DEFAULT_KUBELET_CONFIG),
                                params.get("kubelet_config_dir", DEFAULT_KUBELET_CONFIG_DIR))
    walker = TreeWalker(root, capture_trees(patterns), params.get("max_file_bytes") or MAX_READ,
                        params.get("max_entries") or DEFAULT_MAX_ENTRIES,
                        params.get("max_total_bytes") or DEFAULT_MAX_TOTAL_BYTES)
    try:
        for pattern in patterns:
            walker.expand(pattern)
    finally:
        walker.close()
    walker.settle_links()
    pseudo = Pseudonymiser()
    for name in host_names() + root_host_names(root):
        pseudo.add_literal(name, "hostname")
    for value in params.get("redact") or []:
        pseudo.add_literal(value)
    for key, entry in walker.nodes.items():
        if entry[0] != "file":
            continue
        pseudo.collect_serials(entry[1].decode("utf-8", "replace"), whole=os.path.basename(key).endswith("serial"))
    capture = Capture(walker, pseudo, patterns, now)
    staging = tempfile.mkdtemp(prefix="gpufleet-capture-")
    try:
        os.chmod(staging, 0o700)
        walker.materialise(os.path.join(staging, "root"))
        reader = SysfsReader(os.path.join(staging, "root"))
        facts = gather_gpu_facts(reader)
        if not facts["gpu_count"]:
            capture.nvml = {"recorded": False, "reason": NO_GPU}
        elif params.get("nvml", True):
            scenario, capture.nvml = record_nvml(reader, facts, params.get("nvml_binding_path"), binding,
                                                 "captured by gpufleet.cluster.node_capture")
            if scenario is not None:
                for device in scenario["devices"]:
                    pseudo.add_literal(device.get("serial"), "serial")
                pseudo.value(scenario, collect=True)
                capture.scenario = scenario
        else:
            capture.nvml = {"recorded": False, "reason": "option nvml is false"}
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if facts["gpu_count"]:
        capture.kernel_log, capture.xid_status = kernel_log_lines(
            root, runner, params.get("xid_source") or "auto", params.get("xid_window_hours") or 24.0, now)
        for line in capture.kernel_log or ():
            pseudo.collect_serials(line)  # NVRM: GPU Board Serial Number: …, … GPU serial number is ….
        for name in log_host_names(capture.kernel_log):
            pseudo.add_literal(name, "hostname")
    else:
        capture.xid_status = {"recorded": False, "reason": NO_GPU}
    capture.ofed_info = ofed_info_output(root, runner, params.get("ofed_info"))
    if capture.ofed_info is not None:
        pseudo.collect_serials(capture.ofed_info["stdout"])
    reserve_present(pseudo, capture)
    capture.elapsed_s = time.time() - started
    return capture


def reserve_present(pseudo, capture):
    """Every string of a literal pseudonym's form already in what is captured is reserved (a host
    really named ``host-1`` keeps that name; the node's own host name gets another number)."""
    for key, entry in capture.walker.nodes.items():
        pseudo.reserve(key)
        if entry[0] == "file":
            pseudo.reserve(entry[1])
        elif entry[0] == "link":
            pseudo.reserve(entry[1])
    for table in (capture.walker.skipped, capture.walker.unreadable):
        for key, reason in table.items():
            pseudo.reserve(key)
            pseudo.reserve(reason)
    for line in capture.kernel_log or ():
        pseudo.reserve(line)
    if capture.scenario is not None:
        pseudo.reserve(json.dumps(capture.scenario))
    pseudo.reserve(json.dumps(capture.nvml, default=str))
    pseudo.reserve(json.dumps(capture.xid_status, default=str))
    if capture.ofed_info is not None:
        pseudo.reserve(capture.ofed_info["stdout"])


class Capture(object):
    """What a capture holds before it is pseudonymised and packed."""

    def __init__(self, walker, pseudo, patterns, now):
        self.walker = walker
        self.pseudo = pseudo
        self.patterns = patterns
        self.now = now
        self.scenario = None
        self.nvml = {"recorded": False}
        self.kernel_log = None
        self.xid_status = {"recorded": False}
        self.ofed_info = None
        self.elapsed_s = 0.0
        self.shortened = {}
        self.too_long = []
        self._names = {}
        self.layout_words = frozenset(
            comp for pattern in list(patterns) + [KERN_LOG] for comp in pattern.split("/")
            if comp and not any(ch in comp for ch in "*?["))

    def shown(self, parts):
        """The archive's components for the real components ``parts`` (relative to root): each
        pseudonymised (``Pseudonymiser.name``; a name of the layout keeps its host-name-like and
        redacted words) and at most ``NAME_MAX`` bytes (a longer one is shortened to a prefix and a
        hash of the pseudonymised name, listed in MANIFEST)."""
        parts = tuple(parts)
        if parts in self._names:
            return self._names[parts]
        if not parts:
            return ()
        head = self.shown(parts[:-1])
        comp = parts[-1]
        layout = comp in self.layout_words or any(parts[:len(tree)] == tree for tree in LAYOUT_TREES)
        name = self.pseudo.name(comp, layout)
        raw = name.encode("utf-8", "surrogateescape")
        if len(raw) > NAME_MAX:
            digest = hashlib.sha256(raw).hexdigest()[:16]
            short = raw[:NAME_MAX - 40].decode("utf-8", "ignore")
            short = short.encode("utf-8", "surrogateescape")[:NAME_MAX - 40].decode("utf-8", "surrogateescape")
            shortened = "%s~%s" % (short, digest)
            self.shortened["/".join(head + (shortened,))] = name
            name = shortened
        self._names[parts] = head + (name,)
        return self._names[parts]

    def members(self):
        """(archive path, kind, payload) of every member, pseudonymised, sorted: kind ``dir``,
        ``file`` (bytes), ``link`` (target)."""
        pseudo = self.pseudo
        tree = {}
        self.too_long = []
        for key, entry in self.walker.nodes.items():
            name = "/".join(self.shown(key.split("/")))
            if len(("%s/root/%s" % (ARCHIVE_TOP, name)).encode("utf-8", "surrogateescape")) > PATH_LIMIT:
                self.too_long.append(name[:200] + "…")
                continue
            if entry[0] == "file":
                tree[name] = ("file", pseudo.data(entry[1], versions=key.rsplit("/", 1)[-1] in VERSION_FILES),
                              "file")
            elif entry[0] == "device":
                tree[name] = ("file", b"", "%s device (empty stand-in)" % entry[1]
                              if entry[1] in ("char", "block") else "placeholder (%s)" % entry[1])
            elif entry[0] == "link":
                parts = key.split("/")
                tree[name] = ("link", _relative(self.shown(entry[2]), self.shown(parts[:-1])), "link")
            else:
                tree[name] = ("dir", None, "dir")
        if self.kernel_log is not None:
            text = "".join(pseudo.text(line) + "\n" for line in self.kernel_log)
            for parent in ("var", "var/log"):
                tree.setdefault(parent, ("dir", None, "dir"))
            tree[KERN_LOG] = ("file", text.encode("utf-8"), "kernel log (NVRM lines)")
        members = [("root/" + name, kind, payload, what) for name, (kind, payload, what) in tree.items()]
        members.append(("root", "dir", None, "dir"))
        if self.scenario is not None:
            scenario = pseudo.value(self.scenario)
            members.append((NVML_FILE, "file", (json.dumps(scenario, indent=2, sort_keys=True) + "\n").encode(),
                            "NVML scenario"))
        if self.ofed_info is not None:
            members.append(("commands", "dir", None, "dir"))
            members.append(("commands/ofed_info-s.txt", "file", pseudo.data(self.ofed_info["stdout"].encode(
                "utf-8", "surrogateescape")), "ofed_info -s output (rc %s)" % self.ofed_info["rc"]))
        return sorted(members)

    def metadata(self, members):
        walker = self.walker
        return {
            "format": FORMAT,
            "captured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.now)),
            "captured_at_epoch": int(self.now),
            "host": self.pseudo.text(host_names()[0]) if host_names() else None,
            "root_is_host": walker.host_root,
            "patterns": self.pseudo.value(list(self.patterns)),
            "trees": self.pseudo.value(list(walker.trees)),
            "counts": {"entries": len(members), "files_read": walker.reads, "bytes": walker.total_bytes,
                       "skipped": len(walker.skipped), "unreadable": len(walker.unreadable),
                       "truncated": len(walker.truncated), "links_rewritten": len(walker.rewritten)},
            "limits": {"max_file_bytes": walker.max_file_bytes, "max_entries": walker.max_entries,
                       "max_total_bytes": walker.max_total_bytes},
            "pseudonymised": self.pseudonym_counts(),
            # the reasons and errors quote what NVML and the log readers said: pseudonymised too
            "nvml": self.pseudo.value(dict(self.nvml, file=NVML_FILE if self.scenario is not None else None)),
            "kernel_log": self.pseudo.value(dict(self.xid_status, file=("root/" + KERN_LOG)
                                                 if self.kernel_log is not None else None)),
            "ofed_info": None if self.ofed_info is None else {"rc": self.ofed_info["rc"],
                                                              "file": "commands/ofed_info-s.txt"},
            "elapsed_s": round(self.elapsed_s, 3),
        }

    def pseudonym_counts(self):
        return dict(self.pseudo.counts)

    def manifest(self, members):
        walker, pseudo = self.walker, self.pseudo
        lines = ["# gpufleet node capture, format %d: every member of this archive, then what was left out" % FORMAT,
                 "# <type> <bytes> <sha256 or -> <path> [-> link target]"]
        for path, kind, payload, what in members:
            if kind == "file":
                kind_shown = "device" if "device" in what else "placeholder" if "placeholder" in what else "file"
                lines.append("%s %d %s %s" % (kind_shown, len(payload),
                                              hashlib.sha256(payload).hexdigest(), path))
            elif kind == "link":
                lines.append("link 0 - %s -> %s" % (path, payload))
            else:
                lines.append("dir 0 - %s" % path)

        def shown(key):
            return "/".join(self.shown(key.split("/")))

        for title, table in (("skipped", walker.skipped), ("unreadable", walker.unreadable),
                             ("rewritten", walker.rewritten)):
            for key in sorted(table):
                lines.append("%s - - root/%s: %s" % (title, shown(key), pseudo.text(table[key])))
        for key in walker.truncated:
            lines.append("truncated %d - root/%s: cut at max_file_bytes, kept %d bytes (the token the cut "
                         "split dropped)" % (walker.max_file_bytes, shown(key), walker.cut.get(key, 0)))
        for key in sorted(self.shortened):
            lines.append("shortened - - root/%s: name longer than %d bytes once pseudonymised: %s"
                         % (key, NAME_MAX, self.shortened[key]))
        for name in self.too_long:
            lines.append("skipped - - root/%s: path longer than %d bytes once pseudonymised: left out"
                         % (name, PATH_LIMIT))
        return ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape")


def write_archive(capture, dest):
    """Pack ``capture`` into the gzip'ed tar ``dest`` (written beside it, then renamed; mode 0600).
    Returns (members, metadata)."""
    members = capture.members()
    meta = capture.metadata(members)
    extra = [("capture.json", "file", (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode(), "metadata"),
             ("MANIFEST", "file", None, "manifest")]
    listed = sorted(members + extra[:1])
    manifest = capture.manifest(listed)
    directory = os.path.dirname(os.path.abspath(dest))
    if not os.path.isdir(directory):
        raise CaptureError("option dest: directory %s does not exist" % directory)
    handle, temp = tempfile.mkstemp(prefix=".capture-", dir=directory)
    try:
        with os.fdopen(handle, "wb") as raw:
            with tarfile.open(fileobj=raw, mode="w:gz") as tar:
                _add(tar, ARCHIVE_TOP, "dir", None, capture.now)
                _add(tar, ARCHIVE_TOP + "/MANIFEST", "file", manifest, capture.now)
                for path, kind, payload, _what in listed:
                    _add(tar, ARCHIVE_TOP + "/" + path, kind, payload, capture.now)
        os.chmod(temp, 0o600)
        os.rename(temp, dest)
    except Exception:
        if os.path.exists(temp):
            os.unlink(temp)
        raise
    return listed, meta


def _add(tar, name, kind, payload, mtime):
    info = tarfile.TarInfo(name)
    info.mtime = int(mtime)
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    if kind == "dir":
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
    elif kind == "link":
        info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, payload
        tar.addfile(info)
    else:
        info.size, info.mode = len(payload), 0o644
        tar.addfile(info, io.BytesIO(payload))


def node_capture_work(module, binding=None):
    """``work`` of module node_capture (framework.run_module)."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.gpu_checks import validate_options

    params = module.params
    checked_root(params)
    errors = validate_options({"root": params["root"], "xid_source": params.get("xid_source"),
                               "xid_window_hours": params.get("xid_window_hours"),
                               "nvml_binding_path": params.get("nvml_binding_path")})
    path = params.get("ofed_info")
    if path and not (os.path.isfile(path) and os.access(path, os.X_OK)):
        errors.append("option ofed_info: %s is not an executable file" % path)
    for name in ("max_file_bytes", "max_entries", "max_total_bytes"):
        if params.get(name) is not None and params[name] < 1:
            errors.append("option %s must be >= 1, got %s" % (name, params[name]))
    dest = params["dest"]
    if dest and os.path.isdir(dest):
        errors.append("option dest: %s is a directory (give the archive's file name)" % dest)
    if errors:
        raise CaptureError("; ".join(errors))
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core.runner import ModuleRunner

    capture = capture_node(params, ModuleRunner(module), binding)
    members = capture.members()
    meta = capture.metadata(members)
    if not module.check_mode:
        members, meta = write_archive(capture, dest)
    # changed in check mode too: an archive would be written
    return {"changed": True, "dest": dest, "entries": len(members),
            "files_read": meta["counts"]["files_read"], "bytes": meta["counts"]["bytes"],
            "pseudonymised": meta["pseudonymised"], "nvml": meta["nvml"], "kernel_log": meta["kernel_log"],
            "skipped_paths": meta["counts"]["skipped"], "unreadable": meta["counts"]["unreadable"],
            "captured_at": meta["captured_at"], "elapsed_ms": round(capture.elapsed_s * 1000.0, 1)}
