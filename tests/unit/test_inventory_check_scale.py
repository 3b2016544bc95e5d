# -*- coding: utf-8 -*-
"""The inventory check at fleet scale (issue 45 item 3): a role default templated with a host's values
is rendered once per distinct set of values, and the compatibility matrix is evaluated once per distinct
set of facts, with the same results as rendering / evaluating for every host."""
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import compatibility, inventory_check

DIGEST = "sha256:" + "a1" * 32


def _role(tmp_path):
    defaults = tmp_path / "roles" / "r" / "defaults"
    defaults.mkdir(parents=True)
    (defaults / "main.yml").write_text(
        "ver: v3.32.1\n"
        "sum: >-\n  {{ '%s'\n     if ver == 'v3.32.1' else 'other-' ~ ver }}\n"
        "alloc: \"{{ lookup('gpufleet.cluster.gpufleet_tier', 'gpufleet_gpu_allocation') }}\"\n" % DIGEST)
    return str(tmp_path)


def _counting(monkeypatch):
    calls = []
    render = compatibility._render

    def counted(*args):
        calls.append(args)
        return render(*args)

    monkeypatch.setattr(compatibility, "_render", counted)
    return calls


def test_a_templated_default_is_rendered_once_for_hosts_with_the_same_values(tmp_path, monkeypatch):
    root = _role(tmp_path)
    calls = _counting(monkeypatch)
    for _host in range(50):
        assert compatibility.role_value({}, "r", "sum", root=root) == DIGEST
        assert compatibility.role_value({"ver": "v3.28.2"}, "r", "sum", root=root) == "other-v3.28.2"
        assert compatibility.role_value({}, "r", "alloc", root=root) == "device_plugin"
        assert compatibility.role_value({"gpufleet_gpu_allocation": "dra"}, "r", "alloc", root=root) == "dra"
    assert len(calls) == 4


def test_values_with_template_text_or_of_other_shapes_are_rendered_every_time(tmp_path, monkeypatch):
    root = _role(tmp_path)
    calls = _counting(monkeypatch)
    for _host in range(3):
        assert compatibility.role_value({"ver": {"a": 1}}, "r", "sum", root=root) == "other-{'a': 1}"
    assert len(calls) == 3


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=True),
                          st.text(max_size=6), st.lists(st.integers(0, 3), max_size=2)), min_size=1, max_size=6))
def test_cached_renders_equal_fresh_renders(values):
    """Whatever the hosts' values (1 and 1.0 and True, "1" and 1, lists), each host gets what a fresh
    render gives it."""
    root = compatibility.COLLECTION_ROOT
    for value in values:
        variables = {} if value is None else {"kubernetes_cni_calico_version": value}
        cached = _value(variables, root)
        compatibility._RENDERED.clear()
        assert _value(variables, root) == cached
        assert type(_value(variables, root)) is type(cached)


def _value(variables, root):
    try:
        return compatibility.role_value(variables, "kubernetes_cni", "kubernetes_cni_calico_manifest_checksum",
                                        root=root)
    except compatibility.MatrixError as exc:
        return str(exc)


def test_the_matrix_is_evaluated_once_per_set_of_facts(monkeypatch):
    calls = []
    evaluate = compatibility.evaluate

    def counted(facts, matrix=None):
        calls.append(facts)
        return evaluate(facts, matrix=matrix)

    monkeypatch.setattr(compatibility, "evaluate", counted)
    monkeypatch.setattr(inventory_check, "_EVALUATED", [None, {}])
    bad = {"gpufleet_kubernetes_version": "1.37.1", "gpufleet_driver_branch": "390"}
    first_good = inventory_check._compatibility_problems({}, None)
    first_bad = inventory_check._compatibility_problems(bad, None)
    for _host in range(20):
        assert inventory_check._compatibility_problems({}, None) == first_good
        assert inventory_check._compatibility_problems(bad, None) == first_bad
    assert len(calls) == 2
    fresh = ["compatibility %s" % p["message"] for p in evaluate(compatibility.facts_from_vars(bad))]
    assert first_bad == fresh


def test_inventory_problems_name_every_host_as_before(tmp_path):
    """Hosts with the same values share their problems; a host with other values gets its own."""
    hosts = ["n%02d" % i for i in range(12)]
    hostvars = dict((h, {"gpufleet_gpu_count": "x"}) for h in hosts)
    hostvars["n11"] = {"gpufleet_gpu_count": 8}
    groups = {"all": hosts, "kube_node": hosts, "gpu_nodes": hosts}
    problems = inventory_check.inventory_problems(hostvars, groups, phases=["validate"])
    assert problems == ["gpufleet_gpu_count must be a whole number >= 0, got 'x' [n00, n01, n02, n03, n04 and 6 more]"]


def test_a_templated_default_is_worked_out_once_not_per_host(tmp_path, monkeypatch):
    """The names a templated default references and its tier lookups are found once per template (a regex
    over the text and a copy of the role's defaults per host and default were a fifth of the inventory
    check at 10,000 hosts); every host still gets its own value."""
    root = _role(tmp_path)
    scans = []
    findall = compatibility.re.findall

    def counted(pattern, text, *args):
        scans.append(text)
        return findall(pattern, text, *args)

    monkeypatch.setattr(compatibility.re, "findall", counted)
    for host in range(40):
        version = "v3.28.%d" % (host % 4)
        assert compatibility.role_value({"ver": version}, "r", "sum", root=root) == "other-" + version
        assert compatibility.role_value({}, "r", "sum", root=root) == DIGEST
        assert compatibility.role_value({"gpufleet_gpu_allocation": "dra"}, "r", "alloc", root=root) == "dra"
        assert compatibility.role_value({}, "r", "alloc", root=root) == "device_plugin"
    assert len(scans) == 2
