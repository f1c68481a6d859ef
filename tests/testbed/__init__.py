"""The real test bed shared by the tests, `make demo` and `make bench`.

netns:   network namespaces, host links and per-test dirs, always cleaned up.
cluster: etcd + kube-apiserver on loopback with TLS and RBAC.
"""
