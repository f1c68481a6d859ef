"""The generated validator of netattach's own config is current: what
hack/gen-netconf-validator.py writes from netconf.SCHEMA today (its agreement with
jsonschema is a property target in test_properties.py)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_validator_is_current():
    p = subprocess.run([sys.executable, str(ROOT / "hack" / "gen-netconf-validator.py"),
                        "--check"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_generated_validator_imports_only_the_standard_library():
    text = (ROOT / "src" / "netattach" / "spec" / "_netconf_validator.py").read_text()
    imports = {line.split()[1] for line in text.splitlines()
               if line.startswith(("import ", "from "))}
    assert imports == {"re"}, imports
