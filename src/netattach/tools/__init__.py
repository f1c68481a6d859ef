"""Operators' tools: `netattach validate` and `netattach status`. Import anything below
commands/ (and commands/ itself)."""
