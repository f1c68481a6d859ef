"""netattach: a CNI delegating meta-plugin for Kubernetes (Network Plumbing WG multi-net
spec v1.3)."""
__version__ = "0.1.0"
