# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The compatibility matrix: load ``compatibility.yml`` (next to this file), compare versions,
gather a host's facts and list the refused combinations.

The rules are data (``compatibility.yml``); this module is their only interpreter. Used by the
filters ``gpufleet.cluster.compatibility_facts`` and ``compatibility_problems`` (role preflight,
per node) and by the inventory check of ``playbooks/site.yml`` (``inventory_check.py``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

import yaml

from ansible_collections.gpufleet.cluster.plugins.module_utils.core import versions
from ansible_collections.gpufleet.cluster.plugins.module_utils.gpu.mig import resolve_layout
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.gpufleet_tier import TIER, tier_default, tier_value

MATRIX_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compatibility.yml")
COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

VALUE_OPS = ("eq", "ne", "in", "not_in")
VERSION_OPS = ("version_ge", "version_lt")
HEX_OPS = ("hex_any_ge", "hex_any_in", "hex_all_ge")
LIST_OPS = ("any_in",)
# Clauses that compare with another fact: same_as: <fact> (the value, or every item of a list
# value, equals that fact's value); minor_skew: {of: <fact>, max_behind: N} (a version with the
# same major, at most N minors below the other fact's version and never above it).
FACT_OPS = ("same_as", "minor_skew")
OPS = VALUE_OPS + VERSION_OPS + HEX_OPS + LIST_OPS + FACT_OPS
_OP_TEXT = {"eq": "=", "ne": "!=", "in": "in", "not_in": "not in", "version_ge": ">=", "version_lt": "<",
            "hex_any_ge": "has one >=", "hex_any_in": "has one of", "hex_all_ge": "all >=",
            "any_in": "has one of", "same_as": "="}

_MATRIX = {}
_DEFAULTS = {}


class MatrixError(ValueError):
    """compatibility.yml is malformed, or a value cannot be compared."""


def parse_version(value):
    """``value`` as a tuple of ints (the collection's one parser, module_utils/core/versions.py):
    "580" -> (580,), "v3.32.0" -> (3, 32, 0), "2.1.4-1" -> (2, 1, 4), "6.1.0-27-amd64" -> (6, 1, 0),
    "1:1.7.24~ds1-1" -> (1, 7, 24). MatrixError ("not a version: ...") otherwise."""
    try:
        return versions.parse_version(value)
    except ValueError as exc:
        raise MatrixError(str(exc))


def compare_versions(left, right):
    """-1, 0 or 1 through the one comparator (versions.compare_versions: missing trailing parts count
    as 0, "1.36" == "1.36.0"); MatrixError naming a value that is not a version."""
    try:
        return versions.compare_versions(left, right)
    except ValueError as exc:
        raise MatrixError(str(exc))


def _hex(value):
    try:
        return int(str(value), 16)
    except ValueError:
        raise MatrixError("not a PCI device id: %r" % (value,))


def _check_clause(fact, clause, where):
    if not isinstance(clause, dict) or len(clause) != 1:
        raise MatrixError("%s: clause on %s must be one {operator: operand}, got %r" % (where, fact, clause))
    op, operand = next(iter(clause.items()))
    if op not in OPS:
        raise MatrixError("%s: unknown operator %r on %s (known: %s)" % (where, op, fact, ", ".join(OPS)))
    if op in ("in", "not_in", "hex_any_in", "any_in") and not isinstance(operand, list):
        raise MatrixError("%s: %s on %s needs a list" % (where, op, fact))
    if op in VERSION_OPS:
        parse_version(operand)
    if op in ("hex_any_ge", "hex_all_ge"):
        _hex(operand)
    if op == "hex_any_in":
        [_hex(item) for item in operand]
    if op == "same_as" and not isinstance(operand, str):
        raise MatrixError("%s: same_as on %s needs a fact name" % (where, fact))
    if op == "minor_skew" and not (isinstance(operand, dict) and set(operand) == {"of", "max_behind"}
                                   and isinstance(operand["of"], str) and isinstance(operand["max_behind"], int)
                                   and operand["max_behind"] >= 0):
        raise MatrixError("%s: minor_skew on %s needs {of: <fact>, max_behind: <whole number>}" % (where, fact))


def _other_fact(clause):
    """The fact a clause compares with (same_as, minor_skew), else None."""
    op, operand = next(iter(clause.items()))
    if op == "same_as":
        return operand
    if op == "minor_skew":
        return operand["of"]
    return None


def validate_matrix(matrix):
    """Raise MatrixError naming the first malformed part of ``matrix``; return it otherwise."""
    if not isinstance(matrix, dict) or not isinstance(matrix.get("facts"), dict) \
            or not isinstance(matrix.get("rules"), list):
        raise MatrixError("compatibility.yml must be a mapping with 'facts' (mapping) and 'rules' (list)")
    for name, spec in matrix["facts"].items():
        if not isinstance(spec, dict) or not spec.get("description"):
            raise MatrixError("fact %s: needs a description" % name)
        if not (spec.get("variables") or spec.get("node") or spec.get("derived")):
            raise MatrixError("fact %s: needs variables (site choice), node (node fact) or derived (from another fact)"
                              % name)
        if spec.get("derived") and name not in DERIVED:
            raise MatrixError("fact %s: derived, but no derivation of that name (%s)" % (name, ", ".join(sorted(DERIVED))))
        if "boolean" in spec and not isinstance(spec["boolean"], bool):
            raise MatrixError("fact %s: boolean must be true or false" % name)
        default = spec.get("default")
        if default is not None and not (isinstance(default, dict) and (
                set(default) == {"tier"} or set(default) == {"role", "variable"})):
            raise MatrixError("fact %s: default must be {tier: name} or {role: r, variable: v}" % name)
    names = set()
    for arch in matrix.get("gpu_architectures") or []:
        if not isinstance(arch, dict) or not arch.get("name") or not arch.get("label") \
                or not arch.get("device_ids") or not arch.get("sources"):
            raise MatrixError("gpu_architectures: %r needs name, label, device_ids and sources" % (arch,))
        names.add(arch["name"])
        for pair in arch["device_ids"]:
            if not (isinstance(pair, list) and len(pair) == 2 and _hex(pair[0]) <= _hex(pair[1])):
                raise MatrixError("gpu_architectures %s: device_ids must be [low, high] ranges, got %r"
                                  % (arch["name"], pair))
        for url in arch["sources"]:
            if not str(url).startswith("https://"):
                raise MatrixError("gpu_architectures %s: source %r is not an https URL" % (arch["name"], url))
    seen = set()
    for rule in matrix["rules"]:
        rid = rule.get("id") if isinstance(rule, dict) else None
        if not rid or rid in seen:
            raise MatrixError("rule %r: needs a unique id" % (rid,))
        seen.add(rid)
        for key in ("description", "when", "require", "reason", "sources"):
            if not rule.get(key):
                raise MatrixError("rule %s: needs %s" % (rid, key))
        for url in rule["sources"]:
            if not str(url).startswith("https://"):
                raise MatrixError("rule %s: source %r is not an https URL" % (rid, url))
        for part in ("when", "require"):
            if not isinstance(rule[part], dict):
                raise MatrixError("rule %s: %s must be a mapping fact -> clause" % (rid, part))
            for fact, clause in rule[part].items():
                if fact not in matrix["facts"]:
                    raise MatrixError("rule %s: %s names unknown fact %s" % (rid, part, fact))
                _check_clause(fact, clause, "rule %s" % rid)
                other = _other_fact(clause)
                if other is not None and other not in matrix["facts"]:
                    raise MatrixError("rule %s: %s on %s names unknown fact %s" % (rid, part, fact, other))
                op, operand = next(iter(clause.items()))
                if fact == "gpu_architectures" and op == "any_in" and not set(operand) <= names:
                    raise MatrixError("rule %s: unknown GPU architecture in %s (known: %s)"
                                      % (rid, operand, ", ".join(sorted(names))))
    return matrix


def gpu_architecture(device_id, matrix=None):
    """The architecture name of a PCI device id ("0x2901" -> "blackwell"), None when no range of the
    table gpu_architectures holds it."""
    matrix = matrix or load_matrix()
    number = _hex(device_id)
    for arch in matrix.get("gpu_architectures") or []:
        if any(_hex(low) <= number <= _hex(high) for low, high in arch["device_ids"]):
            return arch["name"]
    return None


def _derive_architectures(known, matrix):
    """Add gpu_architectures (from gpu_device_ids through the table) unless given."""
    if "gpu_architectures" in known or "gpu_device_ids" not in known:
        return
    value, origin = known["gpu_device_ids"]
    ids = value if isinstance(value, list) else [value]
    try:
        found = [(item, gpu_architecture(item, matrix)) for item in ids]
    except MatrixError:
        return  # the hex rules report an id that is not one
    names = []
    for _item, name in found:
        if name and name not in names:
            names.append(name)
    if names:
        shown = ", ".join("%s=%s" % (item, name) for item, name in found if name)
        known["gpu_architectures"] = (names, "gpu_device_ids=%s%s: %s" % (
            ", ".join(str(item) for item in ids), " from %s" % origin if origin else "", shown))


# dcgm-exporter image tags (NVIDIA/dcgm-exporter RELEASE.md, "Versioning": "The long form:
# ${DCGM_VERSION}-${EXPORTER_VERSION}-${PLATFORM}; The short form: ${DCGM_VERSION}; The latest tag: latest";
# NVIDIA's "DCGM Exporter Release Notes": "Release tags use <dcgm-version>-<dcgm-exporter-version>. Container
# image tags can append an image variant"): "4.7.0-4.9.0-distroless", "3.3.9-3.6.1-ubuntu22.04", and the short
# form "3.3.9" (a DCGM version); ASCII digits, the whole tag
_DCGM_EXPORTER_TAG = re.compile(r"^([0-9]+\.[0-9]+\.[0-9]+)(?:-([0-9]+\.[0-9]+\.[0-9]+)(?:-[A-Za-z0-9._-]+)?)?\Z")
# a digest beside the tag (name:tag@sha256:...; OCI image-spec descriptor digest grammar algorithm:encoded)
_DIGEST = re.compile(r"@[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]+\Z")
# what YAML strips around a plain scalar: the template renders `image: {{ ... }}` and the manifest holds the
# value without the blanks and line breaks around it (a `>` folded scalar keeps one trailing newline)
_YAML_BLANKS = " \t\r\n"


def image_as_deployed(image):
    """The image reference the manifest holds for ``image``: the value without the blanks and line
    breaks YAML strips around a plain scalar (templates/dcgm-exporter.yaml.j2 renders
    ``image: {{ kubernetes_addons_dcgm_exporter_image }}``). Not a string: returned unchanged."""
    return image.strip(_YAML_BLANKS) if isinstance(image, str) else image


def dcgm_exporter_tag(image):
    """(DCGM version, exporter version or None) of a dcgm-exporter image reference as the manifest holds
    it (image_as_deployed): the long tag form gives both, the short form (one version) the DCGM version
    only. A digest beside the tag (name:tag@sha256:...) leaves the tag to judge (the digest pins the
    content, the tag names the DCGM it was built on). None for a digest alone, ``latest`` or a custom tag
    (then no rule judges it)."""
    image = image_as_deployed(image)
    if not isinstance(image, str):
        return None
    digest = _DIGEST.search(image)
    if digest:
        image = image[:digest.start()]
    if "@" in image:
        return None
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return None
    match = _DCGM_EXPORTER_TAG.match(last.rsplit(":", 1)[1])
    return (match.group(1), match.group(2)) if match else None


def _derive_dcgm_exporter(known):
    """Add dcgm_exporter_dcgm (the DCGM version inside the exporter image) from dcgm_exporter_image."""
    if "dcgm_exporter_dcgm" in known or "dcgm_exporter_image" not in known:
        return
    image, origin = known["dcgm_exporter_image"]
    tag = dcgm_exporter_tag(image)
    if tag:
        known["dcgm_exporter_dcgm"] = (tag[0], "dcgm_exporter_image=%s%s: DCGM %s, %s" % (
            image_as_deployed(image), " from %s" % origin if origin else "", tag[0],
            "exporter %s" % tag[1] if tag[1] else "the short tag form (the DCGM version)"))


# facts derived from others, by name (compatibility.yml `derived:`)
DERIVED = {"gpu_architectures": None, "mig_layout_kind": None, "dcgm_exporter_dcgm": _derive_dcgm_exporter}


def _derive_mig_layout_kind(known):
    """Add mig_layout_kind (off, uniform, mixed; ``invalid`` with the error as its origin) from
    mig_layout, resolved through mig_configs (default: the built-in set), unless given."""
    if "mig_layout_kind" in known or "mig_layout" not in known:
        return
    layout, origin = known["mig_layout"]
    configs = known["mig_configs"][0] if "mig_configs" in known else None
    try:
        entries = resolve_layout(layout, configs)
    except ValueError as exc:
        known["mig_layout_kind"] = ("invalid", "mig_layout=%s%s: %s" % (
            layout, " from %s" % origin if origin else "", exc))
        return
    enabled = [entry for entry in entries if entry.get("mig-enabled")]
    profiles = set(name for entry in enabled for name, count in (entry.get("mig-devices") or {}).items() if count)
    if not enabled:
        kind = "off"
    elif len(profiles) > 1 or len(enabled) < len(entries):
        kind = "mixed"
    else:
        kind = "uniform"
    known["mig_layout_kind"] = (kind, "mig_layout=%s%s: %s" % (
        layout if isinstance(layout, str) else "explicit entries", " from %s" % origin if origin else "",
        ", ".join(sorted(profiles)) or "no MIG profile"))


# libyaml's parser when PyYAML has it (the same SafeConstructor, so the same values and types: checked for
# every roles/*/defaults/main.yml, roles/*/meta/argument_specs.yml and the matrix): the inventory check reads
# 24 of these files per run, 0.14 s of CPU with the pure-Python parser, 0.014 s with libyaml (issue 45 item 3)
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(handle):
    """yaml.safe_load of ``handle`` (a file or text), through libyaml when PyYAML was built with it."""
    return yaml.load(handle, Loader=_SAFE_LOADER)  # noqa: S506 - a safe loader (CSafeLoader or SafeLoader)


def load_matrix(path=MATRIX_PATH):
    """The parsed and validated matrix (cached per path)."""
    if path not in _MATRIX:
        with open(path) as handle:
            _MATRIX[path] = validate_matrix(safe_load(handle))
    return _MATRIX[path]


def _defaults_path(role, root):
    path = _PATHS.get((role, root))
    if path is None:
        path = _PATHS[(role, root)] = os.path.join(root, "roles", role, "defaults", "main.yml")
    return path


_PATHS = {}


def _role_defaults(role, root):
    path = _defaults_path(role, root)
    if path not in _DEFAULTS:  # read once per run: the inventory check asks for every host
        try:
            with open(path) as handle:
                _DEFAULTS[path] = safe_load(handle) or {}
        except OSError:
            _DEFAULTS[path] = {}
    return _DEFAULTS[path]


def role_default(role, variable, root=COLLECTION_ROOT):
    """Literal default of ``variable`` in roles/<role>/defaults/main.yml, or None (absent, empty, or a
    template: see role_value)."""
    value = _role_defaults(role, root).get(variable)
    if value is None or value == "" or (isinstance(value, str) and "{{" in value):
        return None
    return value


def _get(variables, name):
    try:
        return variables[name] if name in variables else None
    except Exception:  # an undefined template inside the variable: treat as unset
        return None


# lookup('gpufleet.cluster.gpufleet_tier', '<name>') in a role default: read as the lookup would (the
# host's value, else the tier default), also where no plugin loader runs (the matrix read from Python)
_MIRROR_IMAGE = re.compile(r"""\{\{\s*('[^']*')\s*\|\s*gpufleet\.cluster\.mirror_image\(.*?\)\s*\}\}""", re.S)
_TIER_LOOKUP = re.compile(r"""lookup\(\s*['"]gpufleet\.cluster\.gpufleet_tier['"]\s*,\s*['"]([a-z0-9_]+)['"]\s*\)""")


def _tier_in_scope(scope, variables, name, variable, role):
    try:
        scope["__tier_" + name] = tier_value(lambda value: value, variables, name)
    except Exception as exc:  # an unknown tier name, or an undefined template inside the host's value
        raise MatrixError("cannot evaluate the default of %s (role %s): tier %s: %s" % (variable, role, name, exc))
    return "__tier_" + name


def role_value(variables, role, variable, root=COLLECTION_ROOT):
    """What role ``role`` will use for ``variable`` on a host: the host's value (``variables``, e.g.
    hostvars[host]) when set, else the role's default, templated with the host's values of the
    other names it references (e.g. a checksum default that depends on the version variable).
    Raises MatrixError when a templated default cannot be evaluated."""
    value = _get(variables, variable)
    if value is not None:
        return value
    defaults = _role_defaults(role, root)
    value = defaults.get(variable)
    if not (isinstance(value, str) and "{{" in value):
        return value
    path = _defaults_path(role, root)
    names, tiers, template = _prepared(path, value)
    # what the scope of the render (the role's defaults) gets from the host: its values of the names the
    # default references, then the tier values its lookups read (in the order of the text)
    changes, overridden = {}, []
    for name in names:
        host_value = _get(variables, name)
        if host_value is not None:
            changes[name] = host_value
            overridden.append(name)
    for name in tiers:
        changes["__tier_" + name] = _tier_of(variables, name, variable, role)
    # the same template over the same values renders the same: rendered once per run (the inventory check
    # asks for every host, nearly all with the same values); the scope differs from the role's defaults
    # only in the host's values of the names the default references and the tier values put in. The key
    # is made before any scope (a copy of the role's defaults) is: only a render needs one
    rendered = _RENDERED.get(path)
    if rendered is None or rendered[0] is not defaults:
        rendered = _RENDERED[path] = (defaults, {}, frozenset(
            name for name in defaults if isinstance(name, str) and name.startswith("__tier_")))
    keyed = set(overridden) | set("__tier_" + name for name in tiers) | rendered[2]
    key = _render_key(template, _Overlay(defaults, changes), keyed)
    if key is not None and key in rendered[1]:
        return rendered[1][key]
    scope = dict(defaults)
    scope.update(changes)
    result = _render(scope, template, variable, role)
    if key is not None and (result is None or isinstance(result, _PLAIN)):
        rendered[1][key] = result
    return result


class _Overlay(object):
    """``changes`` over ``defaults`` for reading a name (the scope a render would get, not copied)."""

    def __init__(self, defaults, changes):
        self.defaults, self.changes = defaults, changes

    def __getitem__(self, name):
        return self.changes[name] if name in self.changes else self.defaults[name]


def _tier_of(variables, name, variable, role):
    """The tier value a default's lookup('gpufleet.cluster.gpufleet_tier', ``name``) reads; MatrixError
    naming the default otherwise."""
    scope = {}
    _tier_in_scope(scope, variables, name, variable, role)
    return scope["__tier_" + name]


def _prepared(path, value):
    """(names the templated default ``value`` references, tier names its lookups read in the order of the
    text, the template its render takes: each lookup read as ``__tier_<name>``, an image under the mirror
    filter as the upstream reference), worked out once per run and template, not per host."""
    entry = _PREPARED.get((path, value))
    if entry is None:
        tiers = []

        def tier(match):
            tiers.append(match.group(1))
            return "__tier_" + match.group(1)

        template = _TIER_LOOKUP.sub(tier, value)
        # an image default under the mirror filter: the upstream reference (the mirror changes the registry,
        # never the tag a rule reads; the filter is a controller plugin no Templar here loads)
        template = _MIRROR_IMAGE.sub(lambda match: "{{ %s }}" % match.group(1), template)
        entry = _PREPARED[(path, value)] = (tuple(set(re.findall(r"\b[a-z_][a-z0-9_]*\b", value))),
                                            tuple(tiers), template)
    return entry


_PREPARED = {}  # {(defaults path, templated default): (names, tier names, template)}


_RENDERED = {}  # {defaults path: (its defaults, {render key: result}, its names starting __tier_)}
_PLAIN = (str, int, float, bool)


def frozen(value, template_free=False):
    """A hashable stand-in of a plain value (None, bool, int, float, str, lists of them), or a
    ValueError: then the value is not cached. With template_free, a string holding template text
    ("{") is not plain either (a default that renders as itself only without it). The one key of
    the inventory check's caches (role defaults rendered here, the matrix in inventory_check)."""
    if value is None:
        return ("none",)
    if isinstance(value, bool):
        return ("bool", bool(value))
    if isinstance(value, float):
        return ("float", float(value))
    if isinstance(value, int):  # Ansible's tagged int of an inventory value is an int
        return ("int", int(value))
    if isinstance(value, str) and not (template_free and "{" in value):
        return ("str", str(value))
    if isinstance(value, (list, tuple)):
        return ("list", tuple(frozen(item, template_free) for item in value))
    raise ValueError(value)


def _render_key(value, scope, names):
    try:
        return (value,) + tuple((name, frozen(scope[name], template_free=True)) for name in sorted(set(names)))
    except (ValueError, TypeError):
        return None


def _render(scope, value, variable, role):
    try:
        from ansible.parsing.dataloader import DataLoader
        from ansible.template import Templar
        try:
            from ansible.template import trust_as_template  # ansible-core >= 2.19
        except ImportError:  # older cores template every string
            def trust_as_template(text):
                return text
        return Templar(loader=DataLoader(), variables=scope).template(trust_as_template(value))
    except Exception as exc:
        raise MatrixError("cannot evaluate the default of %s (role %s): %s" % (variable, role, exc))


# Ansible's `| bool` (ansible-core's filter to_bool, which the roles' `when:` use, e.g.
# roles/kubernetes_addons/tasks/templated.yml): text in any case and whole numbers, as text
_ANSIBLE_TRUE = ("1", "yes", "on", "true")
_ANSIBLE_FALSE = ("0", "no", "off", "false")


def ansible_boolean(value):
    """True or False as Ansible's ``| bool`` reads ``value`` (True, 1, "1", "yes", "on", "true" in any
    case; False, 0 and their "0", "no", "off", "false"), None when it is no boolean spelling (then the
    value is left as it is: "external" of node_feature_discovery, or a value no rule's true matches)."""
    if isinstance(value, str):
        text = value.lower()
    elif isinstance(value, int):  # bool is an int: True -> "true"
        text = str(value).lower()
    else:
        return None
    if text in _ANSIBLE_TRUE:
        return True
    if text in _ANSIBLE_FALSE:
        return False
    return None


def _booleans(known, matrix):
    """Facts marked ``boolean: true`` in the matrix read as Ansible's ``| bool`` reads them (the one
    conversion of every boolean-triggered rule): "1", 1, "on", "Yes" are true, as the role deploying
    on ``when: ... | bool`` sees them."""
    for name, spec in matrix["facts"].items():
        if not spec.get("boolean") or name not in known:
            continue
        value, origin = known[name]
        converted = ansible_boolean(value)
        if converted is not None and not (isinstance(value, bool) and value is converted):
            shown = "%s=%r" % (origin, value) if origin else repr(value)
            known[name] = (converted, "%s, read as Ansible's bool" % shown)


def _empty(value):
    return value is None or (isinstance(value, str) and value.strip() == "")


def facts_from_vars(variables, matrix=None, root=COLLECTION_ROOT):
    """The site's choices as matrix facts: name -> {value, origin} for every fact that has
    ``variables``; ``variables`` is a host's variables (e.g. hostvars[host]). Unknown facts are
    left out."""
    matrix = matrix or load_matrix()
    out = {}
    for name, spec in matrix["facts"].items():
        for var in spec.get("variables") or []:
            try:
                value = variables[var] if var in variables else None
            except Exception:  # an undefined template inside the variable: treat as unset
                value = None
            if not _empty(value):
                out[name] = {"value": value, "origin": var}
                break
        else:
            default = spec.get("default") or {}
            value, origin = None, None
            if "tier" in default and default["tier"] in TIER:
                value, origin = tier_default(default["tier"]), "%s, tier default" % default["tier"]
            elif "role" in default:
                value = role_default(default["role"], default["variable"], root)
                if value is None:  # a templated default (e.g. from the tier): what the role will use
                    value = role_value(variables, default["role"], default["variable"], root)
                origin = "%s, default of role %s" % (default["variable"], default["role"])
            if not _empty(value):
                out[name] = {"value": value, "origin": origin}
    return out


def _normalise(facts):
    """Accept name -> value or name -> {value, origin}; return name -> (value, origin)."""
    out = {}
    for name, item in (facts or {}).items():
        if isinstance(item, dict) and "value" in item:
            value, origin = item["value"], item.get("origin")
        else:
            value, origin = item, None
        if not _empty(value):
            out[name] = (value, origin)
    return out


def _minor_skew(value, other, max_behind):
    mine, theirs = parse_version(value), parse_version(other)
    if len(mine) < 2 or len(theirs) < 2:
        raise MatrixError("not a major.minor version: %r / %r" % (value, other))
    return mine[0] == theirs[0] and 0 <= theirs[1] - mine[1] <= max_behind


def _holds(value, clause, known=None):
    op, operand = next(iter(clause.items()))
    if op == "same_as":
        other = str((known or {})[operand][0])
        return all(str(item) == other for item in (value if isinstance(value, list) else [value]))
    if op == "minor_skew":
        return _minor_skew(value, (known or {})[operand["of"]][0], operand["max_behind"])
    if op == "eq":
        return str(value) == str(operand)
    if op == "ne":
        return str(value) != str(operand)
    if op == "in":
        return str(value) in [str(item) for item in operand]
    if op == "not_in":
        return str(value) not in [str(item) for item in operand]
    if op == "version_ge":
        return compare_versions(value, operand) >= 0
    if op == "version_lt":
        return compare_versions(value, operand) < 0
    if op == "any_in":
        return any(str(item) in [str(x) for x in operand] for item in (value if isinstance(value, list) else [value]))
    ids = [_hex(item) for item in (value if isinstance(value, list) else [value])]
    if op == "hex_any_ge":
        return any(item >= _hex(operand) for item in ids)
    if op == "hex_any_in":
        return any(item in [_hex(x) for x in operand] for item in ids)
    return all(item >= _hex(operand) for item in ids)  # hex_all_ge


def _clause_text(fact, clause):
    op, operand = next(iter(clause.items()))
    if op == "minor_skew":
        return "%s at most %d minor version(s) below %s and not above it" % (fact, operand["max_behind"], operand["of"])
    if op == "same_as":
        return "%s (each) = %s" % (fact, operand)
    if isinstance(operand, list):
        operand = ", ".join(str(item) for item in operand)
    return "%s %s %s" % (fact, _OP_TEXT[op], operand)


def _fact_text(fact, known):
    value, origin = known[fact]
    if isinstance(value, list):
        value = ", ".join(str(item) for item in value) or "none"
    return "%s=%s (from %s)" % (fact, value, origin) if origin else "%s=%s" % (fact, value)


def evaluate(facts, matrix=None):
    """Every rule whose ``when`` holds and whose ``require`` does not, as a list of problems:
    {id, message, reason, sources, when, require}. Rules needing an unknown fact are skipped; a fact
    value that cannot be compared (e.g. driver "latest") is a problem of its own."""
    matrix = matrix or load_matrix()
    known = _normalise(facts)
    _booleans(known, matrix)
    _derive_architectures(known, matrix)
    _derive_mig_layout_kind(known)
    _derive_dcgm_exporter(known)
    problems = []
    for rule in matrix["rules"]:
        clauses = list(rule["when"].items()) + list(rule["require"].items())
        needed = [f for f, _c in clauses] + [o for o in (_other_fact(c) for _f, c in clauses) if o]
        needed = list(dict.fromkeys(needed))
        if any(fact not in known for fact in needed):
            continue
        try:
            applies = all(_holds(known[f][0], c, known) for f, c in rule["when"].items())
            failed = [f for f, c in rule["require"].items() if not _holds(known[f][0], c, known)] if applies else []
        except MatrixError as exc:
            problems.append({
                "id": rule["id"], "reason": str(exc), "sources": list(rule["sources"]),
                "message": "%s: cannot compare %s: %s" % (
                    rule["id"], "; ".join(_fact_text(f, known) for f in needed), exc)})
            continue
        if not failed:
            continue
        chosen = "; ".join(_fact_text(f, known) for f in rule["when"])
        wanted = " and ".join(_clause_text(f, rule["require"][f]) for f in failed)
        got = "; ".join(_fact_text(f, known) for f in dict.fromkeys(
            failed + [o for o in (_other_fact(rule["require"][f]) for f in failed) if o]))
        problems.append({
            "id": rule["id"],
            "when": chosen,
            "require": wanted,
            "reason": " ".join(rule["reason"].split()),
            "sources": list(rule["sources"]),
            "message": "%s: %s requires %s, but %s. %s (source: %s)" % (
                rule["id"], chosen, wanted, got, " ".join(rule["reason"].split()), rule["sources"][0]),
        })
    return problems
