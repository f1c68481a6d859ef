"""The plugin's own rules, pure: its configuration, the network selection, NAD ->
delegate, the plan, the default-route plan, network-status, the hot-plug diff, claims,
the delegate policy. Imports only cni/ (and the standard library); touches neither the
API nor the node."""
