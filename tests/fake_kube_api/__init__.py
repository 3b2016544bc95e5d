"""In-process test double of the Kubernetes API server (nodes, pods, evictions, PDBs, leases, DRA, and a
generic object store of built-in kinds, CRDs and custom resources: objects.py)."""

from .server import FakeKubeAPI

__all__ = ["FakeKubeAPI"]
