"""Pod identity: the pod a sandbox belongs to. Pure, standard library only (imported on
the exec'd CNI path)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PodRef:
    """The pod a sandbox belongs to, as the runtime named it in CNI_ARGS."""
    namespace: str
    name: str
    uid: str = ""

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"
