"""netattach's default state dir, in a module of its own: thin STATUS reads it before
the configuration is parsed (node/statusmemo.py), and importing spec/netconf.py (its
validator, its dataclass) is what that memo spares. spec/netconf.py re-exports it."""

DEFAULT_CNI_DIR = "/var/lib/cni/netattach"
"""`cniDir`'s default: the state dir of the plugin and of the node daemon."""
