"""tuned active with the configured profile, sysctls persisted, kernel arguments in the boot loader with
the reboot recorded, the kubelet fragment and unit drop-in with the restart recorded."""

import yaml

ARGS = "hugepagesz=1G hugepages=4 isolcpus=managed_irq,domain,1-3 nohz_full=1-3 rcu_nocbs=1-3"


def test_tuned_profile_is_active(host):
    assert host.service("tuned").is_running
    assert "Current active profile: network-latency" in host.check_output("tuned-adm active")
    assert host.file("/etc/tuned/active_profile").content_string.strip() == "network-latency"


def test_sysctls_are_persisted(host):
    content = host.file("/etc/sysctl.d/90-gpufleet-tuning.conf").content_string
    assert "net.core.rmem_max=268435456" in content and "vm.nr_hugepages=16" in content


def test_kernel_arguments_reach_grub_once(host):
    assert ARGS in host.file("/boot/grub/grub.cfg").content_string
    assert "root=/dev/sda1 ro " + ARGS in host.file("/boot/grub/grub.cfg").content_string
    # converge ran it; idempotence did not (the generated configuration holds every argument).
    assert host.file("/var/tmp/update-grub.runs").content_string.count("run") == 1


def test_reboot_recorded_not_done(host):
    marker = host.file("/var/lib/gpufleet/reboot-required").content_string
    assert marker.startswith("node_tuning: the running kernel lacks hugepagesz=1G")


def test_kubelet_fragment_and_config_dir(host):
    fragment = yaml.safe_load(host.file("/var/lib/kubelet/config.d/50-gpufleet-tuning.conf").content_string)
    assert fragment == {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                        "cpuManagerPolicy": "static", "reservedSystemCPUs": "0",
                        "topologyManagerPolicy": "single-numa-node", "topologyManagerScope": "pod"}
    unit = host.file("/etc/systemd/system/kubelet.service.d/20-gpufleet-config-dir.conf").content_string
    assert ("KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml --config-dir=/var/lib/kubelet/config.d"
            in unit)
    assert host.file("/var/lib/gpufleet/kubelet-restart-required").content_string.startswith(
        "node_tuning: KubeletConfiguration fragment")
