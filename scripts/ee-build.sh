#!/usr/bin/env bash
# Build the execution environment image on this machine (`make ee`, docs/awx.md "Local build"):
# ee/execution-environment-local.yml with `ansible-builder build --container-runtime docker`, from
# what this machine reaches (no Galaxy, no quay.io):
#   - base image: the test image gpufleet/bookworm-systemd:1 (scripts/build-test-image.sh,
#     debootstrap + `docker import`, built when missing);
#   - gpufleet.cluster: `ansible-galaxy collection build` of this checkout;
#   - ansible.posix, community.general, kubernetes.core: copied from the pinned `ansible` package
#     in .venv (.local/collections);
#   - Python packages: wheels of the pins downloaded with this machine's pip configuration
#     (cached in .cache/ee/wheels-<hash of the list>, copied to .local/wheels); the build
#     installs from them only (Docker's build network does not trust this machine's TLS proxy);
#   - system packages (ee/bindep.txt): apt-get from Debian's mirror during the build.
# The image is tagged gpufleet/ee-local:<hash of every input> (base image id, definition files,
# the collection's files, the dependency collections' versions, the wheel list, this script) and
# reused while that tag exists; FORCE=1 rebuilds. Prints the image name on stdout; everything else
# goes to stderr. Concurrent callers (molecule-all.sh's image step, the integration test) wait on
# one lock (.cache/ee/build.lock), so the image is built once. The definition is staged with its
# files and the generated ones (tarball, .local/) in .cache/ee/definition/: nothing is written into ee/.
#   scripts/ee-build.sh              # -> gpufleet/ee-local:0123456789ab
#   scripts/ee-build.sh --context    # only write the build context (.cache/ee/context), no image
set -euo pipefail
self="$(realpath "$0")"
cd "$(dirname "$self")/.."
root="$PWD"
export PATH="$root/.venv/bin:$PATH"
definition=ee/execution-environment-local.yml
base_image="gpufleet/bookworm-systemd:1"
repo="gpufleet/ee-local"
cache="$root/.cache/ee"
mode="${1:-}"
mkdir -p "$cache"

exec 9>"$cache/build.lock"
flock 9

if [[ "$mode" != "--context" ]]; then
  bash scripts/docker-up.sh >&2
  bash scripts/build-test-image.sh >&2   # the base image (reused when present)
fi

# The definition and its files, staged (paths in the definition are relative to it).
stage="$cache/definition"
rm -rf "$stage"
mkdir -p "$stage"
cp ee/execution-environment-local.yml ee/requirements-local.yml ee/requirements.txt ee/bindep.txt \
   ee/apt-pkgmgr.sh "$stage/"
local_dir="$stage/.local"
mkdir -p "$local_dir/collections" "$local_dir/wheels"

# 1. this collection
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
ansible-galaxy collection build --force --output-path "$work" . >/dev/null
cp "$work"/gpufleet-cluster-*.tar.gz "$stage/gpufleet-cluster.tar.gz"

# 2. its dependencies, from the pinned `ansible` package of the venv
site="$(python -c 'import ansible_collections, os; print(os.path.dirname(ansible_collections.__path__[0]))')"
for collection in ansible/posix community/general kubernetes/core; do
  mkdir -p "$local_dir/collections/${collection%/*}"
  cp -a "$site/ansible_collections/$collection" "$local_dir/collections/$collection"
done

# 3. the wheels: ansible-core and ansible-runner as the definition pins them, ee/requirements.txt,
# and what ansible-builder itself installs in its stages (bindep, pyyaml, packaging; dumb-init).
wheel_list="$work/wheels.txt"
python - "$definition" >"$wheel_list" <<'PY'
import sys
import yaml
deps = yaml.safe_load(open(sys.argv[1]))["dependencies"]
print(deps["ansible_core"]["package_pip"])
print(deps["ansible_runner"]["package_pip"])
PY
grep -v '^\s*#' ee/requirements.txt | sed 's/\s*#.*//' | grep -v '^\s*$' >>"$wheel_list"
printf '%s\n' bindep pyyaml packaging 'dumb-init==1.2.5' >>"$wheel_list"
# and the Python requirements the dependency collections declare (kubernetes.core: jsonpatch, ...),
# which the build's introspection adds, as `ansible-builder introspect` finds them
mkdir -p "$work/introspect/ansible_collections"
cp -a "$local_dir/collections/." "$work/introspect/ansible_collections/"
ansible-builder introspect --sanitize --user-pip ee/requirements.txt --write-pip "$work/collection-pip.txt" \
  "$work/introspect" >/dev/null
sed 's/\s*#.*//' "$work/collection-pip.txt" | grep -v '^\s*$' >>"$wheel_list"
wheels="$cache/wheels-$(sha256sum "$wheel_list" | cut -c1-12)"
if [[ ! -f "$wheels/.complete" ]]; then
  echo "ee-build: downloading wheels into $wheels" >&2
  rm -rf "$wheels"
  python -m pip download -q --disable-pip-version-check --prefer-binary --dest "$wheels" -r "$wheel_list" 2>&1 |
    { grep -v "is ignored: it is neither a file nor a directory" || true; } >&2
  cp "$wheel_list" "$wheels/.complete"
fi
cp "$wheels"/* "$local_dir/wheels/"

# The tag: a hash of every input (the tarball's files by name and content, not its timestamps).
hash="$( {
  if [[ "$mode" != "--context" ]]; then docker image inspect -f '{{.Id}}' "$base_image"; fi
  cat "$stage"/execution-environment-local.yml "$stage"/requirements-local.yml "$stage"/requirements.txt \
      "$stage"/bindep.txt "$stage"/apt-pkgmgr.sh "$self"
  cat "$wheel_list"
  cat "$local_dir"/collections/*/*/MANIFEST.json
  python - "$stage/gpufleet-cluster.tar.gz" <<'PY'
import hashlib, sys, tarfile
with tarfile.open(sys.argv[1]) as archive:
    for member in sorted(archive.getmembers(), key=lambda m: m.name):
        data = archive.extractfile(member).read() if member.isfile() else member.linkname.encode()
        print(member.name, member.type.decode(), hashlib.sha256(data).hexdigest())
PY
} | sha256sum | cut -c1-12)"
definition="$stage/execution-environment-local.yml"
rm -rf "$cache/context"   # written afresh from the staged definition (no file of an older build stays)
image="$repo:$hash"

if [[ "$mode" == "--context" ]]; then
  ansible-builder create --file "$definition" --context "$cache/context" --output-filename Dockerfile >&2
  echo "$cache/context"
  exit 0
fi
if [[ "${FORCE:-0}" != "1" ]] && docker image inspect "$image" >/dev/null 2>&1; then
  echo "ee-build: $image present, reusing it" >&2
  echo "$image"
  exit 0
fi
echo "ee-build: building $image (ansible-builder, docker; log: $cache/build.log)" >&2
start=$(date +%s)
if ! nice -n 10 ansible-builder build --file "$definition" --context "$cache/context" \
       --container-runtime docker --tag "$image" --tag "$repo:latest" -v 3 >"$cache/build.log" 2>&1; then
  tail -40 "$cache/build.log" >&2
  echo "ee-build: the build failed; whole log: $cache/build.log" >&2
  exit 1
fi
echo "ee-build: built $image in $(( $(date +%s) - start )) s" >&2
echo "$image"
