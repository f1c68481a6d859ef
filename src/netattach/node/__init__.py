"""The node edge: state files, atomic writes, devices (kubelet's PodResources, device
info), the pod netns, routes, the node's CNI files, logging. Imports cni/ and spec/;
not kube/."""
