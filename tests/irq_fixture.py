"""HCA interrupt fixture trees for tests/unit/test_irq_affinity.py and tests/integration/test_topology_play.py.

Layout of the tree, after the kernel ABI: /sys/class/infiniband/<dev>/device is the PCI function,
device/msi_irqs/<irq> one file per MSI/MSI-X vector named by its IRQ number, content "msix"
(Documentation/ABI/testing/sysfs-bus-pci, msi_irqs); device/numa_node and device/local_cpulist
(same file); /proc/irq/<irq>/smp_affinity_list a cpu list (Documentation/core-api/irq/irq-affinity.rst).
CPU numbering of a dual-socket Xeon 8480C (DGX H100): node 0 = 0-55,112-167, node 1 = 56-111,168-223.
"""

import os

NODE0 = "0-55,112-167"
NODE1 = "56-111,168-223"


def write(root, rel, content):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(content)


def hca(root, name, bdf, numa, cpulist, irqs):
    """One RDMA device: irqs {irq: affinity list text}."""
    pci = "sys/devices/pci0000:00/0000:00:01.0/%s" % bdf
    write(root, pci + "/numa_node", "%d\n" % numa)
    write(root, pci + "/local_cpulist", cpulist + "\n")
    for irq, affinity in irqs.items():
        write(root, "%s/msi_irqs/%d" % (pci, irq), "msix\n")
        write(root, "proc/irq/%d/smp_affinity_list" % irq, affinity + "\n")
    os.makedirs(os.path.join(root, "sys/class/infiniband/%s" % name), exist_ok=True)
    os.symlink(os.path.join(root, pci), os.path.join(root, "sys/class/infiniband/%s/device" % name))


def node(tmp_path):
    root = str(tmp_path)
    hca(root, "mlx5_0", "0000:1a:00.0", 0, NODE0, {150: NODE0, 151: "0-223", 152: "60"})
    hca(root, "mlx5_4", "0000:9a:00.0", 1, NODE1, {190: NODE1, 191: NODE1})
    return root
