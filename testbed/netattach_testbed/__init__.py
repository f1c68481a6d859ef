"""The real test bed shared by the tests, `make demo` and `make bench`.

A distribution of its own (testbed/pyproject.toml), installed editable by `make venv`
and never part of netattach's wheel or bundle; it imports nothing of tests/.

netns:   network namespaces, host links and per-test dirs, always cleaned up.
cluster: etcd + kube-apiserver on loopback with TLS and RBAC.
"""
