"""What the integration tests that run ansible-playbook against the Kubernetes API double share:
the checkout, the venv's ansible-playbook and python (the API host's interpreter in those runs), and
whether the Python kubernetes client (kubernetes.core's k8s modules need it) is importable."""

import os

try:
    import kubernetes  # noqa: F401  (kubernetes.core's k8s, k8s_info and k8s_drain need it on the API host: here, the venv)

    HAS_K8S_CLIENT = True
except ImportError:
    HAS_K8S_CLIENT = False

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ANSIBLE_PLAYBOOK = os.path.join(REPO, ".venv", "bin", "ansible-playbook")
VENV_PYTHON = os.path.join(REPO, ".venv", "bin", "python")
