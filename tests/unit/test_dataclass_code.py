"""The build-time cache of dataclasses' generated code (netattach._dataclass_code):
a cached class is the class dataclasses would make, a text not in the cache is
compiled as before, and no cache changes nothing."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import dataclasses, sys
from netattach import _dataclass_code
n = _dataclass_code.install(sys.argv[1]) if sys.argv[1] != "-" else 0
from netattach.node.state import SavedState
from netattach.spec.pod import PodRef
from netattach.cni.chain import NetworkConfig
p = PodRef("ns", "pod", "uid")
@dataclasses.dataclass(frozen=True)
class New:
    '''A class the build never saw.'''
    a: int
    b: list = dataclasses.field(default_factory=list)
print(n, repr(p), p == PodRef("ns", "pod", "uid"), hash(p) == hash(PodRef("ns", "pod", "uid")),
      PodRef.__init__.__annotations__, sorted(f.name for f in dataclasses.fields(SavedState)),
      repr(New(1)), New.__init__.__annotations__, NetworkConfig.__init__.__code__.co_filename)
try:
    p.name = "x"
except dataclasses.FrozenInstanceError as e:
    print("frozen", e)
"""


def run(cache: str) -> str:
    p = subprocess.run([sys.executable, "-c", PROBE, cache], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_cached_classes_are_the_classes_dataclasses_makes(tmp_path):
    cache = tmp_path / "dataclass-code.marshal"
    gen = subprocess.run([sys.executable, str(ROOT / "hack" / "gen-dataclass-code.py"), str(cache)],
                         capture_output=True, text=True, timeout=120)
    assert gen.returncode == 0, gen.stderr
    with_cache, without = run(str(cache)), run("-")
    count, rest = with_cache.split(" ", 1)
    assert int(count) > 50  # every class of the exec'd path
    assert rest == without.split(" ", 1)[1]  # same reprs, equality, hash, annotations, fields
    assert "frozen cannot assign to field 'name'" in rest


def test_no_or_unreadable_cache_changes_nothing(tmp_path):
    from netattach import _dataclass_code
    assert _dataclass_code.install(str(tmp_path / "absent")) == 0
    (tmp_path / "bad").write_bytes(b"\x00garbage")
    assert _dataclass_code.install(str(tmp_path / "bad")) == 0
    assert not hasattr(dataclasses, "exec")


def test_the_cached_code_is_what_exec_compiles(tmp_path):
    """Each cached code object equals a fresh compile of its text without inherited
    __future__ flags (how dataclasses' exec compiles it)."""
    import marshal
    cache = tmp_path / "c"
    subprocess.run([sys.executable, str(ROOT / "hack" / "gen-dataclass-code.py"), str(cache)],
                   check=True, capture_output=True, timeout=120)
    table = marshal.loads(cache.read_bytes())
    for text, code in table.items():
        assert code == compile(text, "<string>", "exec", dont_inherit=True)
        assert not code.co_flags & 0x1000000  # CO_FUTURE_ANNOTATIONS
