"""The API edge: the seam the commands see (api), the client (client: `Kube`, made of
kubeconfig, session, errors, reads, writes and events) and the exec'd path's HTTP
transport (transport). Imports cni/ and spec/; not node/."""
