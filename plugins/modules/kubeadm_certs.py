#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: kubeadm_certs
short_description: Check the expiry of kubeadm's certificates (kubeadm certs check-expiration)
version_added: 0.1.0
description:
  - Runs C(kubeadm certs check-expiration) on a control-plane node (with C(-o json) when C(kubeadm version -o short)
    is 1.30 or newer, read strictly - exact kind and apiVersion, known keys typed, a key it does not know ignored,
    since output.kubeadm.k8s.io/v1alpha3 may gain optional fields; the text tables of an older kubeadm) and
    returns one check
    C(k8s.certs_expiry) per certificate and certificate authority (target C(<target>/<name>)).
  - A certificate that expired, or that kubeadm reports C(!MISSING!), fails; one that expires within
    O(warn_days) days warns (tier variable C(gpufleet_cert_warn_days), default 30).
  - Fail closed - a command that fails (no kubeadm, no admin.conf, API server down) or an output
    that cannot be read whole (another kind or apiVersion, a missing or mistyped known key in the JSON;
    in the text, a line that is neither a row nor
    one of the two known table headers, or a missing authority table) is one failing check with the error,
    never a pass.
  - Never changes anything (C(kubeadm certs renew) renews; an upgrade renews them too).
author:
  - gpufleet contributors (@gpufleet)
options:
  kubeadm:
    description: The kubeadm command (name on PATH or absolute path).
    type: str
    default: kubeadm
  warn_days:
    description: Warn when a certificate expires within this many days.
    type: int
    default: 30
  target:
    description: Prefix of the checks' targets.
    type: str
    default: kubeadm-pki
extends_documentation_fragment:
  - gpufleet.cluster.validation.fail_on
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.read_only
"""

EXAMPLES = r"""
- name: Check kubeadm's certificates (warn 30 days ahead)
  gpufleet.cluster.kubeadm_certs:
    warn_days: "{{ lookup('gpufleet.cluster.gpufleet_tier', 'gpufleet_cert_warn_days') }}"
    fail_on: never
"""

RETURN = r"""
checks:
  description: One C(k8s.certs_expiry) check per certificate and authority (or one failing check when unreadable).
  returned: always
  type: list
  elements: dict
summary:
  description: Count per status.
  returned: always
  type: dict
healthy:
  description: True when no check has status fail.
  returned: always
  type: bool
certificates:
  description:
    - The parsed tables, C(certificates) and C(authorities), each entry C(name), C(expires) (epoch),
      C(expires_text), C(residual), C(ca) (certificates), C(externally_managed), C(missing).
    - Empty lists when the output could not be read.
  returned: always
  type: dict
"""

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import module_cache

module_cache.activate()  # before the other module_utils: compiled once per node, not per run

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.framework import run_module
from ansible_collections.gpufleet.cluster.plugins.module_utils.kube.kubeadm import CERTS_ARGSPEC, certs_work

ARGUMENT_SPEC = CERTS_ARGSPEC


def main():
    run_module(ARGUMENT_SPEC, certs_work)


if __name__ == "__main__":
    main()
