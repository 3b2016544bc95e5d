#!/usr/bin/env bash
# SIMULATION lab: three systemd containers (gpufleet-lab-1..3) from the project test image, with
# simulated GPU + RDMA hardware (fixture sysfs trees mounted read-only, fake NVML), then
# playbooks/lab.yml (site.yml with the lab's phases) and the path of the fleet report.
# Re-running converges (changed=0). scripts/lab-down.sh removes the containers.
#   LAB_NODES=3  GPUFLEET_REPORT_DIR=reports/lab  ANSIBLE_ARGS="-v"
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$PWD/ansible.cfg"
export GPUFLEET_REPORT_DIR="${GPUFLEET_REPORT_DIR:-$PWD/reports/lab}"
IMAGE="${GPUFLEET_TEST_IMAGE:-gpufleet/bookworm-systemd:1}"
NETWORK=gpufleet-lab
NODES="${LAB_NODES:-3}"
# cgroup v2 host: systemd needs the host's cgroup2 mounted read-write. cgroup v1 host: no mount,
# Docker's own view of the container's cgroups (private namespace) is enough for systemd, and a
# container never sees the host's tree (scripts/cgroup-mode.sh).
CGROUP_MOUNT=()
if [[ "$(bash scripts/cgroup-mode.sh)" == "rw" ]]; then
  CGROUP_MOUNT=(-v /sys/fs/cgroup:/sys/fs/cgroup:rw)
fi

bash scripts/docker-up.sh
bash scripts/build-test-image.sh

docker network inspect "$NETWORK" >/dev/null 2>&1 || docker network create "$NETWORK" >/dev/null
for i in $(seq 1 "$NODES"); do
  name="gpufleet-lab-$i"
  if [[ "$(docker inspect -f '{{.State.Running}}' "$name" 2>/dev/null)" == "true" ]]; then
    echo "lab-up: $name running"
    continue
  fi
  docker rm -f "$name" >/dev/null 2>&1 || true
  # Same settings as the molecule scenarios (docs/molecule-template.yml): systemd as PID 1 with
  # SYS_ADMIN and a private cgroup namespace, not --privileged.
  docker run -d --name "$name" --hostname "$name" --network "$NETWORK" \
    --label gpufleet.lab=simulation \
    --cap-add SYS_ADMIN --cgroupns private \
    --tmpfs /run --tmpfs /run/lock --tmpfs /tmp \
    "${CGROUP_MOUNT[@]}" \
    -v "$PWD/tests/fixtures:/opt/gpufleet-sim/fixtures:ro" \
    "$IMAGE" /lib/systemd/systemd >/dev/null
  echo "lab-up: started $name (SIMULATION: fixture sysfs + fake NVML, no real GPU/HCA)"
done

for i in $(seq 1 "$NODES"); do
  for _ in $(seq 1 60); do
    state="$(docker exec "gpufleet-lab-$i" systemctl is-system-running 2>/dev/null || true)"
    [[ "$state" == "running" || "$state" == "degraded" ]] && break
    sleep 1
  done
done

rc=0
# shellcheck disable=SC2086
ansible-playbook -i inventories/lab/hosts.yml playbooks/lab.yml ${ANSIBLE_ARGS:-} || rc=$?

echo
echo "lab-up: SIMULATION lab (fixture sysfs + fake NVML; gpufleet-lab-3 is unhealthy on purpose)."
echo "lab-up: fleet report: $GPUFLEET_REPORT_DIR/fleet-report.html"
echo "lab-up: node health agent on every GPU node, installed by site.yml after validation"
echo "lab-up:   (playbooks/health_agent.yml; every 10 s here): /var/lib/gpufleet/health.json,"
echo "lab-up:   /var/lib/prometheus/node-exporter/gpufleet.prom; validate.yml checks it (agent.health);"
echo "lab-up:   fault injection: playbooks/lab_agent.yml"
echo "lab-up: try: ansible-playbook -i inventories/lab/hosts.yml playbooks/fabric_test.yml"
echo "lab-up:      ansible-playbook -i inventories/lab/hosts.yml playbooks/fleet_status.yml"
echo "lab-up:      ansible-playbook -i inventories/lab/hosts.yml playbooks/rolling_upgrade.yml -e rolling_upgrade_revalidate=true"
exit "$rc"
