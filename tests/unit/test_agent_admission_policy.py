"""The node health agent's taint-mode admission policy (roles/kubernetes_addons/templates/
gpufleet-agent-rbac.yaml.j2), its CEL expressions evaluated with cel-python (celpy) on admission
requests as the API server builds them: matchConditions, then the variables in order, then every
validation. (The API server's own CEL, with its type checking and cost limits, is not run here:
no API server in this repository's tests. Schema validation of the rendered manifests is
tests/unit/test_k8s_render.py.)"""

import copy
import os

import celpy
import jinja2
import kubernetes_validate
import pytest
import yaml
from ansible.plugins.filter.core import FilterModule
from conftest import REPO

from ansible_collections.gpufleet.cluster.plugins.module_utils.health import gate
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.gpufleet_tier import tier_default

TEMPLATE = os.path.join(REPO, "roles", "kubernetes_addons", "templates", "gpufleet-agent-rbac.yaml.j2")
NAMESPACE = "kube-system"
AGENT = "system:serviceaccount:kube-system:gpufleet-health-agent"
KEY = "gpufleet.io/unhealthy"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
FOREIGN = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
OURS = {"key": KEY, "value": "gpu.ecc.volatile_uncorrectable", "effect": "NoSchedule"}


def render(namespace=NAMESPACE, allocation=None):
    """The template's documents, the tier at its defaults (``allocation``: gpufleet_gpu_allocation)."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    filters = FilterModule().filters()
    env.filters.update({"comment": filters["comment"], "to_json": filters["to_json"]})

    def lookup(name, term):
        assert name == "gpufleet.cluster.gpufleet_tier"
        if term == "gpufleet_gpu_allocation" and allocation is not None:
            return allocation
        return tier_default(term)

    with open(TEMPLATE) as handle:
        text = env.from_string(handle.read()).render(
            ansible_managed="Ansible managed", lookup=lookup, kubernetes_addons_namespace=namespace)
    return [doc for doc in yaml.safe_load_all(text) if doc]


@pytest.fixture(scope="module")
def documents():
    return render()


@pytest.fixture(scope="module")
def policy(documents):
    return next(d for d in documents if d["kind"] == "ValidatingAdmissionPolicy")


class Policy:
    """matchConditions, variables and validations of one ValidatingAdmissionPolicy, compiled once."""

    def __init__(self, spec):
        self.env = celpy.Environment()
        self.spec = spec
        self.match = [(c["name"], self._compile(c["expression"])) for c in spec.get("matchConditions", [])]
        self.variables = [(v["name"], self._compile(v["expression"])) for v in spec.get("variables", [])]
        self.validations = [(v, self._compile(v["expression"]),
                             self._compile(v["messageExpression"]) if "messageExpression" in v else None)
                            for v in spec["validations"]]

    def _compile(self, expression):
        return self.env.program(self.env.compile(expression))

    def admit(self, request):
        """None when the request is not matched, else the list of denial messages (empty: allowed).
        ``object`` is null in a DELETE, ``oldObject`` in a CREATE, as the API server passes them."""
        activation = {"request": celpy.json_to_cel(request["request"]),
                      "object": celpy.json_to_cel(request["object"]),
                      "oldObject": celpy.json_to_cel(request["oldObject"])}
        rule = self.spec["matchConstraints"]["resourceRules"][0]
        resource = request["request"]["resource"] + (
            "/" + request["request"]["subResource"] if request["request"].get("subResource") else "")
        if (request["request"]["operation"] not in rule["operations"] or resource not in rule["resources"]
                or request["request"]["kind"]["group"] not in rule["apiGroups"]):
            return None
        for _name, program in self.match:
            if not bool(program.evaluate(activation)):
                return None
        variables = {}
        for name, program in self.variables:  # in order: a variable may use the ones before it
            activation["variables"] = celpy.celtypes.MapType(
                {celpy.celtypes.StringType(k): v for k, v in variables.items()})
            variables[name] = program.evaluate(activation)
        activation["variables"] = celpy.celtypes.MapType(
            {celpy.celtypes.StringType(k): v for k, v in variables.items()})
        denied = []
        for validation, program, message in self.validations:
            result = program.evaluate(activation)
            assert isinstance(result, celpy.celtypes.BoolType), (validation["expression"], result)
            if not result:
                denied.append(str(message.evaluate(activation)) if message else validation["message"])
        return denied


@pytest.fixture(scope="module")
def vap(policy):
    return Policy(policy["spec"])


def node(name, taints=None, labels=None, annotations=None, unschedulable=None, conditions=None):
    obj = {"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": name, "uid": "uid-" + name, "resourceVersion": "41",
                        "labels": dict({"kubernetes.io/hostname": name}, **(labels or {}))},
           "spec": {"podCIDR": "10.244.3.0/24"},
           "status": {"conditions": conditions or []}}
    if annotations is not None:
        obj["metadata"]["annotations"] = annotations
    if taints is not None:
        obj["spec"]["taints"] = taints
    if unschedulable is not None:
        obj["spec"]["unschedulable"] = unschedulable
    return obj


def update(old, new, username=AGENT, bound_node="gpu-01", sub_resource=None, extra=None):
    """An AdmissionRequest of a PATCH (operation UPDATE) as the API server hands it to admission."""
    user = {"username": username, "uid": "8d4b", "groups": ["system:serviceaccounts",
                                                           "system:serviceaccounts:kube-system",
                                                           "system:authenticated"]}
    if extra is not None:
        user["extra"] = extra
    elif bound_node is not None:
        user["extra"] = {"authentication.kubernetes.io/credential-id": ["JTI=7ee52be0"],
                         NODE_NAME_EXTRA: [bound_node], "authentication.kubernetes.io/node-uid": ["uid-" + bound_node]}
    new = copy.deepcopy(new)
    new["metadata"]["resourceVersion"] = "42"
    return {"request": {"uid": "r1", "kind": {"group": "", "version": "v1", "kind": "Node"},
                        "resource": "nodes", "subResource": sub_resource, "name": new["metadata"]["name"],
                        "operation": "UPDATE", "userInfo": user},
            "object": new, "oldObject": old}


def test_the_manifests(documents):
    kinds = [(d["kind"], d["metadata"]["name"]) for d in documents]
    assert kinds == [("ServiceAccount", "gpufleet-health-agent"), ("ClusterRole", "gpufleet:health-agent"),
                     ("ClusterRoleBinding", "gpufleet:health-agent"),
                     ("ValidatingAdmissionPolicy", "gpufleet-health-agent-node-writes"),
                     ("ValidatingAdmissionPolicyBinding", "gpufleet-health-agent-node-writes")]
    sa, role, binding, policy, policy_binding = documents
    assert sa["metadata"]["namespace"] == NAMESPACE and sa["automountServiceAccountToken"] is False
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
                             {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpufleet-health-agent", "namespace": NAMESPACE}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert policy["apiVersion"] == policy_binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert policy_binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}


def test_the_policy_uses_the_tier_taint_key(policy):
    assert tier_default("gpufleet_gate_taint_key") == KEY
    assert all(KEY in v["expression"] for v in policy["spec"]["variables"] if "Taints" in v["name"])


def test_the_namespace_follows_the_role_variable():
    policy = next(d for d in render("gpufleet-system") if d["kind"] == "ValidatingAdmissionPolicy")
    request = update(node("gpu-01"), node("gpu-01", taints=[OURS]),
                     username="system:serviceaccount:gpufleet-system:gpufleet-health-agent")
    assert Policy(policy["spec"]).admit(request) == []
    assert Policy(policy["spec"]).admit(update(node("gpu-01"), node("gpu-01", taints=[OURS]))) is None


@pytest.mark.parametrize("old_taints,new_taints", [
    (None, [OURS]),  # taint a node that had none
    ([FOREIGN], [FOREIGN, OURS]),  # taint beside another owner's taint
    ([FOREIGN, OURS], [FOREIGN]),  # release
    ([OURS], []),
    ([FOREIGN, OURS], [FOREIGN, dict(OURS, value="gpu.count")]),  # another failing check
    ([FOREIGN, OURS], [FOREIGN, dict(OURS, effect="NoExecute")]),
], ids=["add", "add-beside-foreign", "remove", "remove-last", "change-value", "change-effect"])
def test_own_node_changing_only_the_gpufleet_taint_is_allowed(vap, old_taints, new_taints):
    assert vap.admit(update(node("gpu-01", taints=old_taints), node("gpu-01", taints=new_taints))) == []


@pytest.mark.parametrize("old_taints,new_taints", [
    ([OURS], [OURS, {"key": "example.com/maintenance", "effect": "NoSchedule"}]),  # add another
    ([FOREIGN, OURS], [OURS]),  # remove another
    ([FOREIGN], []),
    ([FOREIGN], [dict(FOREIGN, value="absent")]),  # change another's value
    ([FOREIGN], [dict(FOREIGN, effect="NoExecute")]),
    ([FOREIGN], [dict(FOREIGN, key="nvidia.com/gpu2")]),
    ([{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-11-25T10:00:00Z"}], []),
], ids=["add-other", "remove-other", "remove-only-other", "change-other-value", "change-other-effect",
        "rename-other", "remove-unreachable"])
def test_own_node_touching_another_taint_is_denied(vap, old_taints, new_taints):
    assert vap.admit(update(node("gpu-01", taints=old_taints), node("gpu-01", taints=new_taints))) == [
        "the gpufleet health agent may change only the taint %s" % KEY]


def test_own_node_adding_another_taint_with_ours_is_denied(vap):
    denied = vap.admit(update(node("gpu-01"), node("gpu-01", taints=[OURS, FOREIGN])))
    assert denied == ["the gpufleet health agent may change only the taint %s" % KEY]


@pytest.mark.parametrize("change", [
    {"labels": {"gpufleet.io/healthy": "true"}},
    {"annotations": {"example.com/owner": "team-b"}},
    {"unschedulable": True},
], ids=["label", "annotation", "cordon"])
def test_own_node_changing_anything_else_is_denied(vap, change):
    denied = vap.admit(update(node("gpu-01", taints=[FOREIGN]), node("gpu-01", taints=[FOREIGN, OURS], **change)))
    assert denied == ["the gpufleet health agent may not change a Node's labels, annotations or spec.unschedulable"]


def test_an_unchanged_cordon_and_labels_are_allowed(vap):
    old = node("gpu-01", taints=[FOREIGN], unschedulable=True, annotations={"a": "b"}, labels={"x": "y"})
    new = node("gpu-01", taints=[FOREIGN, OURS], unschedulable=True, annotations={"a": "b"}, labels={"x": "y"})
    assert vap.admit(update(old, new)) == []
    # spec.unschedulable false and absent are the same cordon state
    assert vap.admit(update(node("gpu-01", unschedulable=False), node("gpu-01", taints=[OURS]))) == []


def test_another_nodes_node_is_denied(vap):
    denied = vap.admit(update(node("gpu-02"), node("gpu-02", taints=[OURS]), bound_node="gpu-01"))
    assert denied == ["the gpufleet health agent may write only the Node its token is bound to (gpu-01), not gpu-02"]


def test_another_nodes_status_is_denied(vap):
    condition = {"type": "GpufleetHealthy", "status": "False", "reason": "gpu.count"}
    request = update(node("gpu-02"), node("gpu-02", conditions=[condition]), bound_node="gpu-01", sub_resource="status")
    assert vap.admit(request) == [
        "the gpufleet health agent may write only the Node its token is bound to (gpu-01), not gpu-02"]


def test_own_status_is_allowed(vap):
    condition = {"type": "GpufleetHealthy", "status": "False", "reason": "gpu.count"}
    request = update(node("gpu-01", taints=[FOREIGN]), node("gpu-01", taints=[FOREIGN], conditions=[condition]),
                     sub_resource="status")
    assert vap.admit(request) == []


@pytest.mark.parametrize("extra", [{}, {"authentication.kubernetes.io/credential-id": ["JTI=1"]},
                                   {NODE_NAME_EXTRA: []}, {NODE_NAME_EXTRA: ["gpu-01", "gpu-02"]}],
                         ids=["no-extra", "not-node-bound", "empty", "two-nodes"])
def test_a_token_not_bound_to_one_node_is_denied(vap, extra):
    request = update(node("gpu-01"), node("gpu-01", taints=[OURS]), extra=extra)
    if not extra:
        del request["request"]["userInfo"]["extra"]
    assert vap.admit(request) == [
        "the gpufleet health agent may write only the Node its token is bound to (no node-bound token), not gpu-01"]


@pytest.mark.parametrize("username", ["system:node:gpu-01", "kubernetes-admin",
                                      "system:serviceaccount:kube-system:node-controller",
                                      "system:serviceaccount:default:gpufleet-health-agent"])
def test_other_users_are_not_matched(vap, username):
    """Nodes (NodeRestriction already refuses their taint changes), admins and controllers are not
    this policy's business: not matched, whatever they change."""
    request = update(node("gpu-02", taints=[FOREIGN]), node("gpu-02", taints=[], labels={"x": "y"}),
                     username=username, bound_node=None)
    assert vap.admit(request) is None


def test_only_node_updates_are_matched(policy):
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
                      "resources": ["nodes", "nodes/status"]}]


# -- gpufleet_gpu_allocation dra: the agent's DeviceTaintRules (docs/contracts.md, "Device taints") --

ECC = {"id": "gpu.ecc.volatile_uncorrectable", "target": "gpu3", "status": "fail", "message": "2 DBE"}


@pytest.fixture(scope="module")
def dra_documents():
    return render(allocation="dra")


@pytest.fixture(scope="module")
def device_vap(dra_documents):
    return Policy(next(d for d in dra_documents if d["metadata"]["name"] == "gpufleet-health-agent-device-taints")["spec"])


def device_rule(node_name, index="3", checks=(ECC,), stored=True):
    """The rule gate.device_taint_rules builds (the agent's and node_write's one builder), as the
    agent sends it or (``stored``) as the API server keeps it."""
    (rule,) = gate.device_taint_rules(node_name, {("gpu", index): list(checks)})
    if stored:
        rule["metadata"].update(uid="uid-" + rule["metadata"]["name"], resourceVersion="7",
                                creationTimestamp="2026-11-26T05:00:00Z")
        rule["spec"]["taint"]["timeAdded"] = "2026-11-26T05:00:00Z"
    return rule


def rule_request(operation, new=None, old=None, username=AGENT, bound_node="gpu-01", extra=None):
    """An AdmissionRequest for a DeviceTaintRule (cluster-scoped; object null in a DELETE, oldObject
    null in a CREATE)."""
    request = update(old, new if new is not None else old, username=username, bound_node=bound_node, extra=extra)
    request["request"].update(kind={"group": "resource.k8s.io", "version": "v1", "kind": "DeviceTaintRule"},
                              resource="devicetaintrules", subResource=None, operation=operation,
                              name=(new or old)["metadata"]["name"])
    request["object"] = copy.deepcopy(new) if new is not None else None
    request["oldObject"] = old
    return request


def test_dra_manifests_grant_device_taint_rules_and_validate_against_1_37(dra_documents):
    kinds = [(d["kind"], d["metadata"]["name"]) for d in dra_documents]
    assert kinds == [("ServiceAccount", "gpufleet-health-agent"), ("ClusterRole", "gpufleet:health-agent"),
                     ("ClusterRoleBinding", "gpufleet:health-agent"),
                     ("ValidatingAdmissionPolicy", "gpufleet-health-agent-node-writes"),
                     ("ValidatingAdmissionPolicyBinding", "gpufleet-health-agent-node-writes"),
                     ("ValidatingAdmissionPolicy", "gpufleet-health-agent-device-taints"),
                     ("ValidatingAdmissionPolicyBinding", "gpufleet-health-agent-device-taints")]
    role = dra_documents[1]
    # what kube_node_write.write_device_taints sends: list (labelSelector), POST, PUT, DELETE; get for kubectl
    assert role["rules"][-1] == {"apiGroups": ["resource.k8s.io"], "resources": ["devicetaintrules"],
                                 "verbs": ["get", "list", "create", "update", "delete"]}
    policy, binding = dra_documents[5:]
    assert policy["spec"]["matchConstraints"] == {
        "matchPolicy": "Equivalent",
        "resourceRules": [{"apiGroups": ["resource.k8s.io"], "apiVersions": ["v1"],
                           "operations": ["CREATE", "UPDATE", "DELETE"], "resources": ["devicetaintrules"]}]}
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    for doc in dra_documents:
        kubernetes_validate.validate(doc, "1.37.0", strict=True)
    # the node policy is the same with either allocation
    assert dra_documents[3] == next(d for d in render() if d["kind"] == "ValidatingAdmissionPolicy")


def test_device_plugin_allocation_grants_no_device_taint_rules(documents):
    assert not [d for d in documents if "device-taints" in d["metadata"]["name"]]
    assert all("resource.k8s.io" not in rule["apiGroups"] for rule in documents[1]["rules"])


def test_own_nodes_rules_are_created_updated_and_deleted(device_vap):
    assert device_vap.admit(rule_request("CREATE", new=device_rule("gpu-01", stored=False))) == []
    worse = device_rule("gpu-01", checks=[dict(ECC, id="gpu.row_remap"), ECC])
    assert device_vap.admit(rule_request("UPDATE", new=worse, old=device_rule("gpu-01"))) == []
    assert device_vap.admit(rule_request("DELETE", old=device_rule("gpu-01"))) == []


def test_the_rules_the_agent_builds_pass_with_any_gpu_and_effect(device_vap):
    rules = gate.device_taint_rules("gpu-01", {("gpu", str(i)): [dict(ECC, target="gpu%d" % i)] for i in range(8)},
                                    settings={"effect": "NoExecute"})
    assert [device_vap.admit(rule_request("CREATE", new=rule)) for rule in rules] == [[]] * 8


DENIED_OWN = ("the gpufleet health agent may write only DeviceTaintRules of its own Node (gpu-01): label and "
              "annotation gpufleet.io/node=gpu-01, name gpufleet-gpu-01-<device>, spec.deviceSelector {driver, "
              "pool gpu-01, device}, taint key %s" % KEY)


def test_another_nodes_rule_is_refused(device_vap):
    assert device_vap.admit(rule_request("CREATE", new=device_rule("gpu-02", stored=False))) == [DENIED_OWN]


def test_deleting_or_updating_another_nodes_rule_is_refused(device_vap):
    denied = "the gpufleet health agent may change only the DeviceTaintRules of its own Node (gpu-01), not %s"
    other = device_rule("gpu-02")
    assert device_vap.admit(rule_request("DELETE", old=other)) == [denied % other["metadata"]["name"]]
    # taken over: relabelled, re-annotated and re-pointed at gpu-01's pool, it is still gpu-02's rule
    taken = copy.deepcopy(other)
    taken["metadata"]["labels"]["gpufleet.io/node"] = taken["metadata"]["annotations"]["gpufleet.io/node"] = "gpu-01"
    taken["spec"]["deviceSelector"]["pool"] = "gpu-01"
    assert device_vap.admit(rule_request("UPDATE", new=taken, old=other)) == [
        denied % other["metadata"]["name"], DENIED_OWN]


def relabel(rule, path, value):
    rule = copy.deepcopy(rule)
    target = rule
    for key in path[:-1]:
        target = target[key]
    if value is None:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return rule


@pytest.mark.parametrize("path,value", [
    (("metadata", "labels", "gpufleet.io/node"), "gpu-02"),
    (("metadata", "labels", "gpufleet.io/node"), None),
    (("metadata", "annotations", "gpufleet.io/node"), "gpu-02"),
    (("metadata", "annotations", "gpufleet.io/node"), None),
    (("spec", "deviceSelector", "pool"), "gpu-02"),
    (("spec", "deviceSelector", "pool"), None),  # every pool: the device of that name on every node
    (("spec", "deviceSelector", "device"), None),  # every device of the pool
    (("spec", "deviceSelector", "driver"), None),
    (("spec", "deviceSelector"), {}),  # the empty selector: every device of the cluster
    (("spec", "taint", "key"), "example.com/drain"),
    (("metadata", "name"), "gpufleet-gpu-02-gpu-3"),
], ids=["relabel", "unlabel", "reannotate", "unannotate", "other-pool", "no-pool", "no-device", "no-driver",
        "empty-selector", "other-key", "other-nodes-name"])
def test_an_own_rule_changed_to_select_more_or_other_devices_is_refused(device_vap, path, value):
    own = device_rule("gpu-01")
    changed = relabel(own, path, value)
    assert device_vap.admit(rule_request("UPDATE", new=changed, old=own)) == [DENIED_OWN]
    created = relabel(device_rule("gpu-01", stored=False), path, value)
    assert device_vap.admit(rule_request("CREATE", new=created)) == [DENIED_OWN]


@pytest.mark.parametrize("extra", [{}, {NODE_NAME_EXTRA: []}, {NODE_NAME_EXTRA: ["gpu-01", "gpu-02"]}],
                         ids=["not-node-bound", "empty", "two-nodes"])
def test_a_device_taint_write_without_a_token_bound_to_one_node_is_refused(device_vap, extra):
    for request in (rule_request("CREATE", new=device_rule("gpu-01", stored=False), extra=extra),
                    rule_request("DELETE", old=device_rule("gpu-01"), extra=extra)):
        assert device_vap.admit(request) == [
            "the gpufleet health agent may write DeviceTaintRules only with a token bound to one Node"]


@pytest.mark.parametrize("username", ["kubernetes-admin", "system:node:gpu-01",
                                      "system:serviceaccount:kube-system:nvidia-dra-driver-gpu"])
def test_other_users_device_taint_rules_are_not_matched(device_vap, username):
    assert device_vap.admit(rule_request("DELETE", old=device_rule("gpu-02"), username=username, bound_node=None)) is None


def test_node_writes_are_not_the_device_policys_and_rules_not_the_node_policys(vap, device_vap):
    assert device_vap.admit(update(node("gpu-01"), node("gpu-01", taints=[OURS]))) is None
    assert vap.admit(rule_request("CREATE", new=device_rule("gpu-02", stored=False))) is None
