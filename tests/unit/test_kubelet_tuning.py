"""kubelet_tuning_config: the KubeletConfiguration fragment and the kubelet's validation rules
(plugins/filter/kubelet_tuning.py)."""

import re

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.cluster.plugins.filter.kubelet_tuning import (
    FilterModule,
    kubelet_tuning_config,
    parse_cpuset,
)


def test_full_fragment():
    config = kubelet_tuning_config({
        "cpu_manager_policy": "static", "reserved_system_cpus": "0-1,56-57",
        "topology_manager_policy": "single-numa-node", "topology_manager_scope": "pod",
        "memory_manager_policy": "Static",
        "reserved_memory": [{"numaNode": 0, "limits": {"memory": "1124Mi"}},
                            {"numaNode": 1, "limits": {"memory": "1Gi", "hugepages-2Mi": "0"}}],
    })
    assert config == {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "cpuManagerPolicy": "static", "reservedSystemCPUs": "0-1,56-57",
        "topologyManagerPolicy": "single-numa-node", "topologyManagerScope": "pod",
        "memoryManagerPolicy": "Static",
        "reservedMemory": [{"numaNode": 0, "limits": {"memory": "1124Mi"}},
                           {"numaNode": 1, "limits": {"memory": "1Gi", "hugepages-2Mi": "0"}}],
    }
    # renders as the YAML a kubelet drop-in holds, round trip equal
    assert yaml.safe_load(yaml.safe_dump(config)) == config


def test_only_set_options_are_rendered():
    assert kubelet_tuning_config({"topology_manager_policy": "restricted"}) == {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "topologyManagerPolicy": "restricted"}
    assert kubelet_tuning_config({}) == {"apiVersion": "kubelet.config.k8s.io/v1beta1",
                                         "kind": "KubeletConfiguration"}


@pytest.mark.parametrize("text, cpus", [("0", [0]), ("0-3", [0, 1, 2, 3]), ("0-1,32-33", [0, 1, 32, 33]),
                                        ("3-1", None), ("0,,1", None), ("a-b", None), ("", None), ("0-1 ", [0, 1])])
def test_parse_cpuset(text, cpus):
    assert parse_cpuset(text) == cpus


@pytest.mark.parametrize("options, message", [
    ({"topology_manager_policy": "single-numa"},
     "option topology_manager_policy (topologyManagerPolicy) 'single-numa' must be one of: none, best-effort, "
     "restricted, single-numa-node"),
    ({"topology_manager_scope": "node"}, "topologyManagerScope) 'node' must be one of: container, pod"),
    ({"cpu_manager_policy": "Static", "reserved_system_cpus": "0"}, "cpuManagerPolicy) 'Static' must be one of"),
    ({"memory_manager_policy": "static", "reserved_memory": [{"numaNode": 0, "limits": {"memory": "1Gi"}}]},
     "memoryManagerPolicy) 'static' must be one of: None, Static"),
    ({"cpu_manager_policy": "static"}, "cpu_manager_policy static needs reserved_system_cpus"),
    ({"cpu_manager_policy": "static", "reserved_system_cpus": "1-0"}, "reserved_system_cpus (reservedSystemCPUs) '1-0'"),
    ({"memory_manager_policy": "Static"}, "memory_manager_policy Static needs reserved_memory"),
    ({"reserved_memory": [{"numaNode": 0, "limits": {"memory": "lots"}}]},
     "reserved_memory[0].limits.memory: 'lots' is not a quantity"),
    ({"reserved_memory": [{"numaNode": 0, "limits": {"memory": "1Gi"}}, {"numaNode": 0, "limits": {"memory": "1Gi"}}]},
     "reserved_memory[1].numaNode 0 is listed twice"),
    ({"reserved_memory": [{"numa": 0}]}, "must have exactly the keys numaNode and limits"),
    ({"cpu_manager_policies": "static"}, "unknown option cpu_manager_policies"),
])
def test_kubelet_rules_name_the_option(options, message):
    with pytest.raises(AnsibleFilterError, match=re.escape(message)):
        kubelet_tuning_config(options)


def test_every_problem_at_once():
    with pytest.raises(AnsibleFilterError) as info:
        kubelet_tuning_config({"cpu_manager_policy": "static", "topology_manager_scope": "node",
                               "memory_manager_policy": "Static"})
    text = str(info.value)
    assert "topology_manager_scope" in text and "needs reserved_system_cpus" in text and "needs reserved_memory" in text


def test_not_a_dict():
    with pytest.raises(AnsibleFilterError, match="expected a dict of options, got list"):
        kubelet_tuning_config([])


def test_registered():
    assert set(FilterModule().filters()) == {"kubelet_tuning_config", "kernel_tuning_args"}


def test_kernel_tuning_args():
    from ansible_collections.gpufleet.cluster.plugins.filter.kubelet_tuning import kernel_tuning_args
    assert kernel_tuning_args() == [] and kernel_tuning_args(0, {}) == []
    assert kernel_tuning_args(8, {"cpus": "2-55,58-111"}, reserved_system_cpus="0-1,56-57") == [
        "hugepagesz=1G", "hugepages=8", "isolcpus=managed_irq,domain,2-55,58-111",
        "nohz_full=2-55,58-111", "rcu_nocbs=2-55,58-111"]
    assert kernel_tuning_args(None, {"cpus": "4-7", "isolcpus_flags": ["nohz"], "nohz_full": False,
                                     "rcu_nocbs": True}) == ["isolcpus=nohz,4-7", "rcu_nocbs=4-7"]


def test_kernel_tuning_args_refusals_named_at_once():
    from ansible_collections.gpufleet.cluster.plugins.filter.kubelet_tuning import kernel_tuning_args
    with pytest.raises(AnsibleFilterError) as err:
        kernel_tuning_args(-1, {"cpus": "0-3", "isolcpus_flags": ["irq"], "nohzfull": True},
                           reserved_system_cpus="0-1")
    message = str(err.value)
    for part in ("hugepages_1g must be an integer >= 0, got -1", "unknown option cpu_isolation.nohzfull",
                 "isolcpus_flags ['irq'] must be a list of: nohz, domain, managed_irq",
                 "cpu_isolation.cpus 0-3 and the kubelet's reserved_system_cpus 0-1 overlap (CPUs 0,1)"):
        assert part in message
    with pytest.raises(AnsibleFilterError, match="cpu_isolation.cpus None is not a cpuset list"):
        kernel_tuning_args(None, {"nohz_full": True})
