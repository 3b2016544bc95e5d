"""In-process test double of the Kubernetes API server (nodes, pods, evictions, PDBs)."""

from .server import FakeKubeAPI

__all__ = ["FakeKubeAPI"]
