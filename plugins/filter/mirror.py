# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Air-gapped mirror filters (docs/airgap.md).

``mirror_url`` maps an upstream download URL onto a mirror that keeps the apt-mirror layout
(``<mirror>/<host>/<path>``); ``mirror_image`` maps a container image reference onto a registry
mirror that keeps the upstream registry as the first path component
(``<registry mirror>/<registry>/<repository>:<tag>``). Both return their input unchanged when
the mirror is empty, so role defaults can always go through them. Documentation lives next to
this file in ``<filter>.yml``.
"""

from __future__ import absolute_import, division, print_function

import re

from ansible.errors import AnsibleFilterError

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://([^/?#]*)(.*)$", re.DOTALL)
DOCKER_HUB = "docker.io"
_DOCKER_HUB_ALIASES = ("docker.io", "index.docker.io", "registry-1.docker.io")


def _string(value, filter_name, what):
    if not isinstance(value, str) or not value.strip():
        raise AnsibleFilterError("%s: %s must be a non-empty string, got %r" % (filter_name, what, value))
    if value != value.strip() or any(char.isspace() for char in value):
        raise AnsibleFilterError("%s: %s must not contain whitespace, got %r" % (filter_name, what, value))
    return value


def _mirror(value, filter_name, what):
    """None/'' -> None (no mirror); otherwise the validated string without trailing slashes."""
    if value is None or value == "":
        return None
    return _string(value, filter_name, what).rstrip("/")


def mirror_url(url, mirror=None):
    """``https://host/path`` -> ``<mirror>/host/path``; unchanged without a mirror.

    file:// URLs and absolute paths (already local) and URLs already under the mirror are
    returned unchanged. The mirror is a URL (``https://mirror.example.com/gpufleet``) or an
    absolute path (where playbooks/mirror.yml stores the files).
    """
    url = _string(url, "mirror_url", "the URL")
    base = _mirror(mirror, "mirror_url", "the mirror (gpufleet_mirror_url)")
    if url.startswith("/"):
        return url
    match = _URL.match(url)
    if not match:
        raise AnsibleFilterError("mirror_url: %r is not a URL (scheme://host/path) or an absolute path" % url)
    scheme, netloc, rest = match.groups()
    if scheme.lower() == "file":
        return url
    host = netloc.rpartition("@")[2].lower()  # credentials never become part of the layout
    if not host:
        raise AnsibleFilterError("mirror_url: %r has no host" % url)
    if base is None:
        return url
    base_match = _URL.match(base)
    if not (base.startswith("/") or (base_match and base_match.group(2))):
        raise AnsibleFilterError("mirror_url: the mirror must be a URL (https://mirror.example.com/gpufleet) "
                                 "or an absolute path, got %r" % mirror)
    if url.startswith(base + "/"):
        return url
    return "%s/%s%s" % (base, host, rest)


def _split_image(image):
    """(registry, repository[:tag][@digest]) the way docker resolves a reference."""
    first, sep, rest = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        registry, path = first.lower(), rest
    else:
        registry, path = DOCKER_HUB, image
    if registry in _DOCKER_HUB_ALIASES:
        registry = DOCKER_HUB
        if "/" not in path:
            path = "library/" + path  # official images: busybox = docker.io/library/busybox
    return registry, path


def mirror_image(image, registry_mirror=None, repository=False):
    """``nvcr.io/nvidia/x:tag`` -> ``<registry_mirror>/nvcr.io/nvidia/x:tag``; unchanged without a mirror.

    An image without a registry host is on Docker Hub (``docker.io``), official images under
    ``library/``. ``repository=True`` maps a repository prefix such as kubeadm's
    ``imageRepository`` (``registry.k8s.io``): its first component is always the registry.
    """
    image = _string(image, "mirror_image", "the image")
    base = _mirror(registry_mirror, "mirror_image", "the registry mirror (gpufleet_registry_mirror)")
    if "://" in image:
        raise AnsibleFilterError("mirror_image: %r is a URL, not an image reference (registry/repository:tag)" % image)
    if image.startswith("/") or image.endswith("/") or "//" in image:
        raise AnsibleFilterError("mirror_image: %r is not an image reference (registry/repository:tag)" % image)
    if base is None:
        return image
    if "://" in base:
        raise AnsibleFilterError("mirror_image: the registry mirror is a registry host[:port][/path] "
                                 "(registry.example.com), not a URL: %r" % registry_mirror)
    if image.startswith(base + "/"):
        return image
    if repository:
        return "%s/%s" % (base, image)
    registry, path = _split_image(image)
    return "%s/%s/%s" % (base, registry, path)


class FilterModule(object):
    def filters(self):
        return {
            "mirror_url": mirror_url,
            "mirror_image": mirror_image,
        }
