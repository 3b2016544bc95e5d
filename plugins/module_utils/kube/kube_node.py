# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A Kubernetes Node client for the few calls gpufleet makes (docs/contracts.md, "Health pipeline"):
GET a Node, PATCH a Node or its status, and the guarded write: read -> compute the patch from what
was read -> PATCH with that ``resourceVersion`` -> on 409 Conflict read and compute again.

Used by the node health agent (``agent_kube``) and by role node_gate through the module
``node_write``. Plain ``http.client`` (no kubernetes client on nodes, no Ansible), because:

- credentials stay where they belong: a bearer token or client certificate is never sent over
  plain ``http://`` (refused, unless ``allow_plain_http`` is set for a test double or a lab), and
  redirects are never followed (urllib's opener would resend the Authorization header to whatever
  origin a 3xx names);
- every request has a hard deadline: a socket timeout bounds each read, and a timer shuts the
  socket down at the deadline, so a server that trickles a byte every half second (slow loris) or
  never answers cannot hold a caller past ``timeout`` seconds.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import socket
import ssl
import threading
import time

try:  # Python 3
    import http.client as http_client
    from urllib.parse import quote, urlsplit
except ImportError:  # pragma: no cover - Python 2 is not a target of the node-side code
    raise

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
DEFAULT_TIMEOUT = 10.0
DEFAULT_RETRIES = 5
MAX_ANSWER_BYTES = 16 * 1024 * 1024
# an answer is read in chunks of up to 1 MiB (a page of the Node list is about 15 MB: 240 reads of 64 KiB
# cost 0.2 s of CPU over 20 pages, 15 reads of 1 MiB half that); max_bytes is checked after each chunk
READ_CHUNK = 1024 * 1024


class KubeError(Exception):
    """The API server could not be reached, answered an error, or a request was refused here."""


class ApiStatusError(KubeError):
    """The API server answered an HTTP error status (``code``: 404, 409, 422 ...); ``status``: the
    answer when it is a JSON object (a Status: ``reason``, ``metadata.continue`` ...), else None."""

    def __init__(self, code, message, status=None, retry_after=None):
        KubeError.__init__(self, "API server answered %s: %s" % (code, message))
        self.code = code
        self.status = status if isinstance(status, dict) else None
        self.retry_after = retry_after  # the Retry-After header (text) of a 429/5xx, or None


class ConflictError(KubeError):
    """The Node changed between every read and write (409 Conflict on every attempt)."""


def _abort(conn):
    sock = getattr(conn, "sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class KubeClient(object):
    """GET/PATCH of Nodes with a bearer token (file or value) and/or a client certificate."""

    def __init__(self, server, token_file=None, token=None, ca_file=None, cert_file=None, key_file=None,
                 timeout=DEFAULT_TIMEOUT, allow_plain_http=False, insecure_skip_tls_verify=False):
        if not server:
            raise KubeError("kubernetes.server is not set")
        parts = urlsplit(str(server))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise KubeError("kubernetes.server %r must be an https:// URL of the API server" % (server,))
        self.server = str(server).rstrip("/")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port
        self.base_path = parts.path.rstrip("/")
        self.token_file = token_file
        self.token = token
        self.timeout = float(timeout)
        credentials = bool(token_file or token or cert_file)
        if self.scheme == "http" and credentials and not allow_plain_http:
            raise KubeError(
                "kubernetes.server %s is plain http://: refusing to send a bearer token or client certificate "
                "unencrypted (use the API server's https:// address; allow_plain_http is for a local test "
                "double only)" % self.server)
        self.context = None
        if self.scheme == "https":
            self.context = ssl.create_default_context(cafile=ca_file) if ca_file else ssl.create_default_context()
            if insecure_skip_tls_verify:
                self.context.check_hostname = False
                self.context.verify_mode = ssl.CERT_NONE
            if cert_file:
                self.context.load_cert_chain(cert_file, key_file)

    # -- one request ---------------------------------------------------------------------------------
    def _headers(self, content_type=None, length=None):
        headers = {"Accept": "application/json", "User-Agent": "gpufleet"}
        if content_type:
            headers["Content-Type"] = content_type
        if length is not None:
            headers["Content-Length"] = str(length)
        token = self.token
        if self.token_file:
            try:
                with open(self.token_file) as handle:  # re-read: projected tokens rotate
                    token = handle.read().strip()
            except OSError as exc:
                raise KubeError("kubernetes.token_file %s is unreadable: %s" % (self.token_file, exc.strerror or exc))
        if token:
            headers["Authorization"] = "Bearer " + token
        return headers

    def _connection(self, timeout):
        if self.scheme == "https":
            return http_client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self.context)
        return http_client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method, path, body=None, content_type=None, deadline=None, max_bytes=MAX_ANSWER_BYTES,
                decode=None):
        """The decoded JSON answer. ``deadline`` (time.monotonic() value) bounds the whole request
        together with ``timeout``; an answer of more than ``max_bytes`` is refused while it is read;
        ApiStatusError for HTTP errors, KubeError otherwise. ``decode``: a function of the bytes of a
        successful answer returning its value, instead of ``json.loads`` (its exceptions propagate)."""
        start = time.monotonic()
        end = start + self.timeout if deadline is None else min(deadline, start + self.timeout)
        left = end - start
        if left <= 0:
            raise KubeError("%s %s not sent: the cycle's deadline has passed" % (method, path))
        data = json.dumps(body).encode("utf-8") if body is not None else None
        headers = self._headers(content_type, None if data is None else len(data))
        conn = self._connection(left)
        timer = threading.Timer(left, _abort, [conn])
        timer.daemon = True
        timer.start()
        try:
            conn.request(method, self.base_path + path, body=data, headers=headers)
            answer = conn.getresponse()
            chunks, size = [], 0
            while True:
                if time.monotonic() >= end:
                    raise socket.timeout("deadline")
                chunk = answer.read1(READ_CHUNK) if hasattr(answer, "read1") else answer.read(READ_CHUNK)
                if not chunk:
                    break
                size += len(chunk)
                if size > max_bytes:
                    raise KubeError("API server %s: answer larger than %d bytes" % (self.server, max_bytes))
                chunks.append(chunk)
            declared = answer.getheader("Content-Length")
            if (declared is not None and not getattr(answer, "chunked", False) and declared.strip().isdigit()
                    and int(declared) != size):  # http.client ends a read early without an error when cut off
                raise KubeError("API server %s: incomplete answer to %s %s (%d of the %s bytes its Content-Length "
                                "declares)" % (self.server, method, path, size, declared.strip()))
            status, location = answer.status, answer.getheader("Location")
            retry_after = answer.getheader("Retry-After")
        except KubeError:
            raise
        except (OSError, http_client.HTTPException, ValueError) as exc:
            if time.monotonic() >= end - 0.001:
                raise KubeError("API server %s: no complete answer to %s %s within %.1f s"
                                % (self.server, method, path, self.timeout if deadline is None else left))
            raise KubeError("API server %s unreachable: %s" % (self.server, exc))
        finally:
            timer.cancel()
            conn.close()
        raw = b"".join(chunks)
        if 300 <= status < 400:
            raise KubeError("API server %s answered %s %s with a redirect (%d to %s): not followed, credentials "
                            "are never sent to another origin" % (self.server, method, path, status, location))
        if status >= 400:
            answer = None
            try:
                answer = json.loads(raw.decode("utf-8"))
                message = answer.get("message")
            except (ValueError, AttributeError, UnicodeDecodeError):
                message = raw[:200].decode("utf-8", "replace") or http_client.responses.get(status, "")
            raise ApiStatusError(status, message, answer, retry_after)
        if decode is not None:
            return decode(raw)
        try:
            return json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise KubeError("API server %s: %s %s answered something that is not JSON: %s" % (self.server, method, path, exc))

    # -- Nodes ---------------------------------------------------------------------------------------
    @staticmethod
    def node_path(name, status=False):
        return "/api/v1/nodes/%s%s" % (quote(str(name), safe=""), "/status" if status else "")

    def get_node(self, name, deadline=None):
        return self.request("GET", self.node_path(name), deadline=deadline)

    def patch_node(self, name, body, content_type=MERGE_PATCH, status=False, deadline=None):
        return self.request("PATCH", self.node_path(name, status), body, content_type, deadline=deadline)


def guarded_write(client, name, compute, retries=DEFAULT_RETRIES, deadline=None):
    """Read the Node, ``compute(node)`` the merge patch (carrying the resourceVersion read, e.g.
    gate.node_write) or None for nothing to send, PATCH it; on 409 Conflict (another writer changed
    the Node in between) read and compute again, ``retries`` attempts in all.

    Returns {changed, patch, attempts, node} (``node``: the Node after the write, or as read).
    ConflictError after ``retries`` conflicts; other errors as KubeError."""
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 1:
        raise KubeError("retries must be an integer >= 1, got %r" % (retries,))
    for attempt in range(1, retries + 1):
        node = client.get_node(name, deadline=deadline)
        patch = compute(node)
        if patch is None:
            return {"changed": False, "patch": None, "attempts": attempt, "node": node}
        try:
            written = client.patch_node(name, patch, deadline=deadline)
        except ApiStatusError as exc:
            if exc.code == 409:
                continue
            raise
        return {"changed": True, "patch": patch, "attempts": attempt, "node": written}
    raise ConflictError("Node %s not written: it changed under every one of %d attempts (409 Conflict)" % (name, retries))


# -- kubeconfig ---------------------------------------------------------------------------------------
class KubeconfigClient(object):
    """A KubeClient from a kubeconfig file (current context or ``context``); embedded certificate
    data go to private temporary files (mode 0600, removed by ``close``). Nothing of the
    kubeconfig's secrets is ever put into an error message."""

    def __init__(self, path, context=None, timeout=DEFAULT_TIMEOUT, allow_plain_http=False):
        self._dir = None
        self.client = None
        config = _load_kubeconfig(path)
        try:
            self.client = self._build(config, path, context, timeout, allow_plain_http)
        except BaseException:
            self.close()
            raise

    def _file(self, name, data_b64):
        import base64
        import tempfile

        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="gpufleet-kube-")
        target = os.path.join(self._dir, name)
        handle = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(handle, "wb") as out:
            try:
                out.write(base64.b64decode(data_b64))
            except (TypeError, ValueError):
                raise KubeError("kubeconfig: %s is not valid base64" % name.replace("_", "-"))
        return target

    def _build(self, config, path, context, timeout, allow_plain_http):
        def named(section, name):
            for item in config.get(section) or []:
                if isinstance(item, dict) and item.get("name") == name:
                    return item.get(section[:-1]) or {}
            raise KubeError("kubeconfig %s: no %s named %r" % (path, section[:-1], name))

        context_name = context or config.get("current-context")
        if not context_name:
            raise KubeError("kubeconfig %s has no current-context (name one with context)" % path)
        ctx = named("contexts", context_name)
        cluster = named("clusters", ctx.get("cluster"))
        user = named("users", ctx.get("user")) if ctx.get("user") else {}
        base = os.path.dirname(os.path.abspath(path))

        def rel(value):
            return value if value is None or os.path.isabs(value) else os.path.join(base, value)

        ca_file = rel(cluster.get("certificate-authority"))
        if cluster.get("certificate-authority-data"):
            ca_file = self._file("ca.crt", cluster["certificate-authority-data"])
        cert_file = rel(user.get("client-certificate"))
        if user.get("client-certificate-data"):
            cert_file = self._file("client.crt", user["client-certificate-data"])
        key_file = rel(user.get("client-key"))
        if user.get("client-key-data"):
            key_file = self._file("client.key", user["client-key-data"])
        return KubeClient(cluster.get("server"), token_file=rel(user.get("tokenFile")), token=user.get("token"),
                          ca_file=ca_file, cert_file=cert_file, key_file=key_file, timeout=timeout,
                          allow_plain_http=allow_plain_http,
                          insecure_skip_tls_verify=bool(cluster.get("insecure-skip-tls-verify")))

    def close(self):
        if self._dir:
            import shutil

            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self):
        return self.client

    def __exit__(self, *exc):
        self.close()


def _load_kubeconfig(path):
    try:
        with open(path) as handle:
            text = handle.read()
    except OSError as exc:
        raise KubeError("kubeconfig %s is unreadable: %s" % (path, exc.strerror or exc))
    try:
        import yaml

        config = yaml.safe_load(text)
    except ImportError:
        try:
            config = json.loads(text)
        except ValueError:
            raise KubeError("kubeconfig %s: PyYAML is not installed and the file is not JSON" % path)
    except Exception as exc:  # yaml.YAMLError; its text quotes no secret (only a position)
        raise KubeError("kubeconfig %s is not valid YAML (%s)" % (path, type(exc).__name__))
    if not isinstance(config, dict):
        raise KubeError("kubeconfig %s is not a kubeconfig (a mapping with clusters, users, contexts)" % path)
    return config
