"""The API edge: the seam the commands see (api), the client (client) and the exec'd
path's HTTP transport (transport). Imports cni/ and spec/; not node/."""
