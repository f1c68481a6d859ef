"""Generated modules of the kubelet plugin APIs served by `netattach daemon --dra`:
plugin registration v1 (pluginregistration_v1.proto, package `pluginregistration`) and
the DRA kubelet plugin API v1 and v1beta1 (dra_v1.proto, dra_v1beta1.proto, packages
`k8s.io.kubelet.pkg.apis.dra.v1` and `...v1beta1`), from k8s.io/kubelet v0.34.4.

Regenerate with hack/gen-grpc.sh. Imported only by daemon/dra.py, lazily: never on
the exec'd CNI path.
"""
