"""Serve the API double as a process (molecule scenarios run it as a systemd service):

    PYTHONPATH=<repo>/.collections:<repo>/tests python3 -m fake_kube_api \\
        --port 6443 --server-version 1.37.2 --kubeconfig /etc/kubernetes/admin.conf --node cp-1

Plain http on --host (default 127.0.0.1), bearer token --token; --kubeconfig writes a kubeconfig
for it (mode 0600); every --node is added as a Ready node (a DaemonSet's status counts the nodes
matching its nodeSelector). State lives in memory: it is gone when the process ends. Runs until
SIGTERM or SIGINT.
"""

import argparse
import os
import signal
import sys
import threading

from .server import DEFAULT_SERVER_VERSION, FakeKubeAPI


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m fake_kube_api", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=6443)
    parser.add_argument("--token", default="gpufleet-fake-token")
    parser.add_argument("--server-version", default=DEFAULT_SERVER_VERSION)
    parser.add_argument("--kubeconfig", help="write a kubeconfig for this server here")
    parser.add_argument("--node", action="append", default=[], help="a Ready node (repeatable)")
    args = parser.parse_args(argv)
    api = FakeKubeAPI(token=args.token, server_version=args.server_version)
    for node in args.node:
        api.add_node(node)
    api.start(host=args.host, port=args.port)
    if args.kubeconfig:
        directory = os.path.dirname(args.kubeconfig)
        if directory:
            os.makedirs(directory, exist_ok=True)
        api.kubeconfig(args.kubeconfig)
        os.chmod(args.kubeconfig, 0o600)
    print("fake kube API %s serving on %s" % (api.version["gitVersion"], api.url), flush=True)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    api.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
