"""Random and malformed sysfs trees: gather_mlx5_facts and validate_rdma never raise.

Two generators: trees built from scratch (random bytes, missing files, directories where files
are expected, broken and looping symlinks, plausible values in odd places), and real fixture
trees with random files replaced by such garbage.
"""

import json
import os
import shutil
import tempfile

from conftest import FIXTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runners import ScriptedRunner

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.checks import STATUSES
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.mlx5 import gather_mlx5_facts
from ansible_collections.gpufleet.cluster.plugins.module_utils.rdma.rdma_checks import LINK_LAYERS, validate_rdma
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.sysfs import SysfsReader

# Trees are built per example: use a RAM-backed directory when there is one (much faster than /tmp).
FAST_TMP = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
SETTINGS = settings(max_examples=100, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

PLAUSIBLE = [
    "4: ACTIVE", "2: INIT", "1: DOWN", "5: LinkUp", "2: Polling", "3: Disabled", "ACTIVE", "4:", ": ACTIVE",
    "400 Gb/sec (4X NDR)", "2.5 Gb/sec (1X SDR)", "Gb/sec", "-1 Gb/sec (0X)", "InfiniBand", "Ethernet",
    "RoCE v2", "IB/RoCE v1", "0000:0000:0000:0000:0000:ffff:0a00:0001", "fe80::1", "::ffff:10.0.0.1",
    "0x15b3", "0x15B3", "0x1021", "0x020700", "-1", "0", "1", "99999999999999999999", "0x", "0xffff",
    "N/A (no PMA)", "N/A", "(null)", "5.0-0", "24.10-1.1.4", "5.8-1.0.1", "uverbs0", "mlx5_0", "bond0",
    "b83f:d203:00a1:2b3c", "28.39.1002", "", " ", "\n", "\x00\x00", "\u00e9\u00e8",
]
NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-.:", min_size=1, max_size=10).filter(
    lambda n: n not in (".", ".."))

CONTENT = st.one_of(
    st.tuples(st.just("text"), st.sampled_from(PLAUSIBLE)),
    st.tuples(st.just("bytes"), st.binary(max_size=48)),
    st.tuples(st.just("text"), st.text(max_size=24).filter(lambda t: "\x00" not in t)),
    st.tuples(st.just("dir"), st.none()),
    st.tuples(st.just("broken"), st.none()),
    st.tuples(st.just("loop"), st.none()),
    st.tuples(st.just("missing"), st.none()),
)
# Containers: real directory most of the time, sometimes a file, a broken link or a loop.
CONTAINER = st.sampled_from(["dir", "dir", "dir", "dir", "file", "broken", "loop", "missing"])


def put(root, rel, content):
    kind, value = content
    path = os.path.join(root, rel)
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        return
    if os.path.lexists(path):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    if kind == "text":
        with open(path, "wb") as handle:
            handle.write(value.encode("utf-8", "surrogatepass"))
    elif kind == "bytes":
        with open(path, "wb") as handle:
            handle.write(value)
    elif kind == "dir":
        os.makedirs(os.path.join(path, "inner"), exist_ok=True)
    elif kind == "broken":
        os.symlink("../nowhere/at/all", path)
    elif kind == "loop":
        os.symlink(os.path.basename(path), path)


def container(root, rel, kind):
    """Create ``rel`` as a directory (True) or as something that is not one (False)."""
    path = os.path.join(root, rel)
    if not os.path.isdir(os.path.dirname(path)):
        return False
    if os.path.lexists(path):
        return os.path.isdir(path) and not os.path.islink(path)
    if kind == "dir":
        os.makedirs(path)
        return True
    put(root, rel, {"file": ("text", "not a dir"), "broken": ("broken", None), "loop": ("loop", None),
                    "missing": ("missing", None)}[kind])
    return False


@st.composite
def port_spec(draw):
    attrs = {key: draw(CONTENT) for key in ("state", "phys_state", "rate", "link_layer", "lid", "sm_lid")}
    index = st.sampled_from(["0", "1", "3", "5", "x", "-1"])
    gids = draw(st.lists(st.tuples(index, CONTENT, CONTENT, CONTENT), max_size=4))
    counters = {key: draw(CONTENT) for key in ("symbol_error", "link_downed")}
    name = draw(st.sampled_from(["1", "2", "0", "x", "01"]))
    return {"name": name, "kind": draw(CONTAINER), "attrs": attrs, "gids": gids, "counters": counters}


@st.composite
def device_spec(draw):
    return {
        "name": draw(st.one_of(st.sampled_from(["mlx5_0", "mlx5_1", "mlx5_bond_0"]), NAMES)),
        "kind": draw(st.sampled_from(["dir", "dir", "dir", "file", "broken", "loop"])),
        "attrs": {key: draw(CONTENT) for key in ("node_guid", "fw_ver", "hca_type", "board_id")},
        "device_kind": draw(st.sampled_from(["link", "link", "dir", "broken", "loop", "file", "missing"])),
        "pci": draw(st.sampled_from(["0000:1a:00.0", "0000:aa:00.1", "1a:00.0", "zz"])),
        "numa": draw(CONTENT),
        "driver": draw(st.sampled_from(["link", "broken", "missing", "file"])),
        "netdevs": draw(st.lists(NAMES, max_size=2)),
        "uverbs": draw(st.lists(st.tuples(st.sampled_from(["uverbs0", "uverbs8", "umad0", "uverbsX"]),
                                          CONTENT), max_size=2)),
        "ports_kind": draw(CONTAINER),
        "ports": draw(st.lists(port_spec(), max_size=2)),
        "devnode": draw(CONTENT),
    }


@st.composite
def tree_spec(draw):
    return {
        "osrelease": draw(CONTENT),
        "mlx5_kind": draw(CONTAINER),
        "mlx5_version": draw(CONTENT),
        "mlx5_srcversion": draw(CONTENT),
        "modules": draw(st.lists(st.tuples(st.sampled_from(
            ["ib_core", "ib_uverbs", "rdma_ucm", "mlx5_ib", "nvidia_peermem", "nv_peer_mem"]), CONTAINER),
            max_size=6)),
        "holder": draw(CONTENT),
        "pci_kind": draw(CONTAINER),
        "pci": draw(st.lists(st.tuples(NAMES, st.sampled_from(["dir", "broken", "file", "loop"]), CONTENT),
                             max_size=3)),
        "class_kind": draw(CONTAINER),
        "devices": draw(st.lists(device_spec(), max_size=3)),
    }


OPTIONS = st.fixed_dictionaries({}, optional={
    "devices": st.lists(st.one_of(st.sampled_from(["mlx5_0", "1a:00.0", "0000:aa:00.1"]), NAMES), max_size=3),
    "link_layer": st.sampled_from(LINK_LAYERS),
    "expected_devices": st.integers(min_value=0, max_value=10),
    "min_rate_gbps": st.floats(min_value=0, max_value=1000, allow_nan=False),
    "required_modules": st.lists(NAMES, max_size=3),
    "require_peermem": st.booleans(),
    "min_ofed_version": st.sampled_from(["5.8", "24.10-1.1.4.0.200", "23.04"]),
    "require_roce_v2_gid": st.booleans(),
    "check_counters": st.booleans(),
    "max_symbol_errors": st.integers(min_value=0, max_value=100),
    "max_link_downed": st.integers(min_value=0, max_value=100),
})

OFED_OUTPUT = st.one_of(st.sampled_from(["MLNX_OFED_LINUX-5.8-1.0.1.1:", "OFED-internal-24.10-1.1.4.0.200:",
                                         "MLNX_OFED_LINUX-:", "OFED-internal-x:"]), st.text(max_size=40))


def build(root, spec):
    os.makedirs(os.path.join(root, "proc/sys/kernel"))
    os.makedirs(os.path.join(root, "sys/module"))
    os.makedirs(os.path.join(root, "sys/bus/pci"))
    os.makedirs(os.path.join(root, "sys/class"))
    os.makedirs(os.path.join(root, "sys/devices/pci0000:00"))
    os.makedirs(os.path.join(root, "dev/infiniband"))
    put(root, "proc/sys/kernel/osrelease", spec["osrelease"])
    if container(root, "sys/module/mlx5_core", spec["mlx5_kind"]):
        put(root, "sys/module/mlx5_core/version", spec["mlx5_version"])
        put(root, "sys/module/mlx5_core/srcversion", spec["mlx5_srcversion"])
    for name, kind in spec["modules"]:
        container(root, "sys/module/" + name, kind)
    if container(root, "sys/module/ib_core/holders", "dir"):
        put(root, "sys/module/ib_core/holders/nvidia_peermem", spec["holder"])
    if container(root, "sys/bus/pci/devices", spec["pci_kind"]):
        for name, kind, vendor in spec["pci"]:
            target = "sys/devices/pci0000:00/" + name
            if os.path.lexists(os.path.join(root, "sys/bus/pci/devices", name)):
                continue
            if kind == "dir":
                os.makedirs(os.path.join(root, target), exist_ok=True)
                put(root, target + "/vendor", vendor)
                link = os.path.join(root, "sys/bus/pci/devices", name)
                os.symlink("../../../devices/pci0000:00/" + name, link)
            else:
                put(root, "sys/bus/pci/devices/" + name, {"broken": ("broken", None), "file": vendor,
                                                          "loop": ("loop", None)}[kind])
    if container(root, "sys/class/infiniband", spec["class_kind"]):
        for dev in spec["devices"]:
            build_device(root, dev)


def build_device(root, dev):
    pci = "sys/devices/pci0000:00/" + dev["pci"]
    os.makedirs(os.path.join(root, pci), exist_ok=True)
    base = "%s/infiniband/%s" % (pci, dev["name"])
    link = os.path.join(root, "sys/class/infiniband", dev["name"])
    if os.path.lexists(link):
        return
    if dev["kind"] != "dir":
        put(root, "sys/class/infiniband/" + dev["name"], {"file": ("text", "x"), "broken": ("broken", None),
                                                          "loop": ("loop", None)}[dev["kind"]])
        return
    os.makedirs(os.path.join(root, base), exist_ok=True)
    os.symlink(os.path.relpath(os.path.join(root, base), os.path.dirname(link)), link)
    for key, content in dev["attrs"].items():
        put(root, base + "/" + key, content)
    if dev["device_kind"] == "link":
        os.symlink("../..", os.path.join(root, base, "device"))
    elif dev["device_kind"] == "dir":
        os.makedirs(os.path.join(root, base, "device"))
    else:
        other = {"broken": ("broken", None), "loop": ("loop", None), "file": ("text", "x"),
                 "missing": ("missing", None)}
        put(root, base + "/device", other[dev["device_kind"]])
    put(root, pci + "/numa_node", dev["numa"])
    if dev["driver"] == "link":
        os.makedirs(os.path.join(root, "sys/bus/pci/drivers/mlx5_core"), exist_ok=True)
        if not os.path.lexists(os.path.join(root, pci, "driver")):
            os.symlink("../../../bus/pci/drivers/mlx5_core", os.path.join(root, pci, "driver"))
    else:
        put(root, pci + "/driver", {"broken": ("broken", None), "missing": ("missing", None),
                                    "file": ("text", "mlx5_core")}[dev["driver"]])
    for netdev in dev["netdevs"]:
        os.makedirs(os.path.join(root, pci, "net", netdev), exist_ok=True)
    for name, ibdev in dev["uverbs"]:
        os.makedirs(os.path.join(root, pci, "infiniband_verbs", name), exist_ok=True)
        put(root, "%s/infiniband_verbs/%s/ibdev" % (pci, name), ibdev)
        put(root, "dev/infiniband/" + name, dev["devnode"])
    if not container(root, base + "/ports", dev["ports_kind"]):
        return
    for port in dev["ports"]:
        pbase = "%s/ports/%s" % (base, port["name"])
        if not container(root, pbase, port["kind"]):
            continue
        for key, content in port["attrs"].items():
            put(root, pbase + "/" + key, content)
        for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs", "counters"):
            os.makedirs(os.path.join(root, pbase, sub), exist_ok=True)
        for index, gid, kind, ndev in port["gids"]:
            put(root, "%s/gids/%s" % (pbase, index), gid)
            put(root, "%s/gid_attrs/types/%s" % (pbase, index), kind)
            put(root, "%s/gid_attrs/ndevs/%s" % (pbase, index), ndev)
        for key, content in port["counters"].items():
            put(root, "%s/counters/%s" % (pbase, key), content)


def exercise(root, options, ofed_output, ofed_rc):
    runner = ScriptedRunner(script={"/opt/ofed_info": (ofed_rc, ofed_output, "")})
    reader = SysfsReader(root)
    facts = gather_mlx5_facts(reader, runner, "/opt/ofed_info")
    json.dumps(facts)  # module results must serialise
    assert facts["driver_source"] in ("ofed", "inbox", "absent")
    assert isinstance(facts["pci_functions"], int)
    for dev in facts["devices"]:
        assert dev["numa_node"] is None or dev["numa_node"] >= 0
        for port in dev["ports"]:
            assert port["rate_gbps"] is None or isinstance(port["rate_gbps"], float)
            assert port["roce_v2_gid_index"] is None or isinstance(port["roce_v2_gid_index"], int)
    results = validate_rdma(facts, reader, options)
    json.dumps(results.result())
    for check in results:
        assert check["status"] in STATUSES
        assert check["id"].startswith("rdma.")
    return facts, results


@SETTINGS
@given(spec=tree_spec(), options=OPTIONS, ofed_output=OFED_OUTPUT, ofed_rc=st.sampled_from([0, 1, 127]))
def test_random_trees_never_raise(spec, options, ofed_output, ofed_rc):
    with tempfile.TemporaryDirectory(dir=FAST_TMP) as root:
        build(root, spec)
        exercise(root, options, ofed_output, ofed_rc)


def _files(node):
    base = os.path.join(FIXTURES, "nodes", node)
    found = []
    for dirpath, dirnames, filenames in os.walk(base):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            found.append(os.path.relpath(os.path.join(dirpath, name), base))
    return sorted(found)


MUTABLE_NODES = ["inbox-noversion", "hdr-degraded", "port-init"]
NODE_FILES = {node: _files(node) for node in MUTABLE_NODES}


@settings(SETTINGS, max_examples=60)
@given(data=st.data(), node=st.sampled_from(MUTABLE_NODES), options=OPTIONS)
def test_mutated_fixture_trees_never_raise(data, node, options):
    files = NODE_FILES[node]
    mutations = data.draw(st.lists(st.tuples(st.sampled_from(files), CONTENT), min_size=1, max_size=12))
    with tempfile.TemporaryDirectory(dir=FAST_TMP) as tmp:
        root = os.path.join(tmp, node)
        shutil.copytree(os.path.join(FIXTURES, "nodes", node), root, symlinks=True)
        for rel, content in mutations:
            put(root, rel, content)
        exercise(root, options, "MLNX_OFED_LINUX-5.8-1.0.1.1:", 0)


def test_unmutated_copy_gives_the_same_facts_as_the_fixture(tmp_path):
    root = str(tmp_path / "node")
    shutil.copytree(os.path.join(FIXTURES, "nodes", "inbox-noversion"), root, symlinks=True)
    copied, _ = exercise(root, {}, "", 1)
    original, _ = exercise(os.path.join(FIXTURES, "nodes", "inbox-noversion"), {}, "", 1)
    assert copied == original
    assert len(copied["devices"]) == 2


# -- field-by-field tolerance, one class at a time (the fuzz target in tests/fuzz mixes them) ----
def _port_tree(tmp_path, name=b"mlx5_0"):
    root = os.fsencode(str(tmp_path / "node"))
    port = os.path.join(root, b"sys/class/infiniband", name, b"ports/1")
    os.makedirs(os.path.join(port, b"gids"))
    os.makedirs(os.path.join(port, b"gid_attrs/types"))
    for attr, value in ((b"state", b"4: ACTIVE"), (b"phys_state", b"5: LinkUp"), (b"link_layer", b"Ethernet"),
                        (b"rate", b"400 Gb/sec (4X NDR)")):
        with open(os.path.join(port, attr), "wb") as handle:
            handle.write(value + b"\n")
    return root, port


def _deliverable(facts):
    from ansible.module_utils.common.text.converters import jsonify

    json.dumps(facts, allow_nan=False).encode("utf-8")
    jsonify(facts).encode("utf-8")


def test_a_fifo_or_socket_where_an_attribute_should_be_is_not_read(tmp_path, monkeypatch):
    import socket

    root, port = _port_tree(tmp_path)
    os.unlink(os.path.join(port, b"state"))
    os.mkfifo(os.path.join(port, b"state"))  # opening this for reading would block forever
    sock = socket.socket(socket.AF_UNIX)
    monkeypatch.chdir(port)  # a relative name: socket paths are limited to 108 bytes
    sock.bind(b"lid")
    try:
        facts = gather_mlx5_facts(SysfsReader(os.fsdecode(root)), None)
    finally:
        sock.close()
    entry = facts["devices"][0]["ports"][0]
    assert entry["state"] is None and entry["lid"] is None and entry["phys_state"] == "LinkUp"
    _deliverable(facts)


def test_names_of_any_bytes_give_a_deliverable_result(tmp_path):
    root, _port = _port_tree(tmp_path, name=b"mlx5_\xff\xfe")
    facts = gather_mlx5_facts(SysfsReader(os.fsdecode(root)), None)
    device = facts["devices"][0]
    assert device["name"] == "mlx5_\\xff\\xfe"
    # the escaped name still reads the device's files
    assert device["ports"][0]["state"] == "ACTIVE"
    _deliverable(facts)


def test_unicode_digits_in_gid_index_names_and_values(tmp_path):
    root, port = _port_tree(tmp_path)
    for name in ("\u00b2", "\u0663", "1_0", "3"):
        raw = name.encode("utf-8")
        with open(os.path.join(port, b"gids", raw), "wb") as handle:
            handle.write(b"0000:0000:0000:0000:0000:ffff:0a00:0001\n")
        with open(os.path.join(port, b"gid_attrs/types", raw), "wb") as handle:
            handle.write(b"RoCE v2\n")
    with open(os.path.join(port, b"lid"), "wb") as handle:
        handle.write("\u0661\u0662".encode("utf-8"))  # Arabic-Indic digits: int() would accept them
    os.makedirs(os.path.join(os.path.dirname(port), "\u00b9".encode("utf-8")))  # port named '¹'
    facts = gather_mlx5_facts(SysfsReader(os.fsdecode(root)), None)
    ports = facts["devices"][0]["ports"]
    assert [p["port"] for p in ports] == [1, "\u00b9"]
    assert ports[0]["roce_v2_gid_index"] == 3 and ports[0]["lid"] is None
    _deliverable(facts)


def test_huge_numbers_read_as_null(tmp_path):
    root, port = _port_tree(tmp_path)
    with open(os.path.join(port, b"lid"), "wb") as handle:
        handle.write(b"0x" + b"f" * 5000)
    with open(os.path.join(port, b"sm_lid"), "wb") as handle:
        handle.write(b"9" * 5000)
    with open(os.path.join(port, b"rate"), "wb") as handle:
        handle.write(b"9" * 400 + b" Gb/sec (4X NDR)")  # float() would give inf
    facts = gather_mlx5_facts(SysfsReader(os.fsdecode(root)), None)
    entry = facts["devices"][0]["ports"][0]
    assert entry["lid"] is None and entry["sm_lid"] is None and entry["rate_gbps"] is None
    _deliverable(facts)


def test_symlinks_escaping_the_root_are_not_followed(tmp_path):
    root, port = _port_tree(tmp_path)
    outside = tmp_path / "outside"
    outside.write_text("4: ACTIVE\n")
    os.unlink(os.path.join(port, b"state"))
    os.symlink(os.fsencode(str(outside)), os.path.join(port, b"state"))  # absolute link out of root
    os.symlink(b"../../../../../../../../outside", os.path.join(port, b"phys_state.tmp"))
    os.unlink(os.path.join(port, b"phys_state"))
    os.rename(os.path.join(port, b"phys_state.tmp"), os.path.join(port, b"phys_state"))
    reader = SysfsReader(os.fsdecode(root))
    entry = gather_mlx5_facts(reader, None)["devices"][0]["ports"][0]
    assert entry["state"] is None and entry["phys_state"] is None
    assert not reader.exists("sys/class/infiniband/mlx5_0/ports/1/state")


def test_looping_symlinks_and_directory_file_swaps(tmp_path):
    root, port = _port_tree(tmp_path)
    os.unlink(os.path.join(port, b"state"))
    os.symlink(b"state", os.path.join(port, b"state"))  # loop
    os.unlink(os.path.join(port, b"rate"))
    os.makedirs(os.path.join(port, b"rate"))  # a directory where a file should be
    gids = os.path.join(port, b"gids")
    os.rmdir(gids)
    with open(gids, "wb") as handle:  # a file where a directory should be
        handle.write(b"x")
    facts = gather_mlx5_facts(SysfsReader(os.fsdecode(root)), None)
    entry = facts["devices"][0]["ports"][0]
    assert entry["state"] is None and entry["rate_gbps"] is None and entry["roce_v2_gid_index"] is None
    _deliverable(facts)


def _every_path(root):
    for base, dirs, files in os.walk(root):
        for name in dirs + files + ["missing", "..", "."]:
            yield os.path.join(base, name)
            yield os.path.join(base, name, "..", "x")


def test_cached_realpath_is_os_realpath_on_real_fixtures_and_odd_links(tmp_path):
    """SysfsReader resolves each path component once (cache); the result must be os.path.realpath's
    for every path of the real fixture trees (relative links into ../../devices) and for loops,
    absolute links, dangling links, chains and links through '..'."""
    odd = tmp_path / "odd"
    (odd / "a" / "b").mkdir(parents=True)
    os.symlink("loop", odd / "loop")
    os.symlink("x/../../a", odd / "a" / "b" / "up")
    os.symlink(str(tmp_path), odd / "absolute")
    os.symlink("nowhere/at/all", odd / "dangling")
    os.symlink("chain2", odd / "chain1")
    os.symlink("a/b/up/b", odd / "chain2")
    os.symlink("ping", odd / "pong")
    os.symlink("pong", odd / "ping")
    roots = [str(odd)] + [os.path.join(FIXTURES, "nodes", name) for name in ("dgx-h100", "hdr-degraded")]
    checked = 0
    for root in roots:
        reader = SysfsReader(root)
        for path in _every_path(root):
            assert reader._realpath(path) == os.path.realpath(path), path
            checked += 1
    for name in ("loop", "absolute", "dangling", "chain1", "ping", "a/b/up/b/up"):
        path = os.path.join(str(odd), name, "file")
        assert SysfsReader(str(odd))._realpath(path) == os.path.realpath(path), name
    assert checked > 1000
