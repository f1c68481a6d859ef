"""The CNI protocol: errors, versions, the request, results, invoking plugins, the
conf/conflist engine (chain), strict JSON and the rules for names. Knows nothing of
Kubernetes; imports nothing of netattach above it."""
