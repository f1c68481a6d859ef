"""Fixtures live in their own modules: netns/links/dirs and the test control plane."""
import pytest

pytest_plugins = ["tests.fixtures_netns", "tests.fixtures_cluster"]

_PROPERTY_RUNS = pytest.StashKey[dict]()


@pytest.fixture(scope="session")
def property_runs(pytestconfig) -> dict:
    """target -> {"examples": n, "seconds": s}: what each property-based target
    (tests/unit/test_properties.py) actually ran, printed at the end of the run."""
    return pytestconfig.stash.setdefault(_PROPERTY_RUNS, {})


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    runs = config.stash.get(_PROPERTY_RUNS, None)
    if runs:
        terminalreporter.write_line("hypothesis examples: " + ", ".join(
            f"{name} {r['examples']}" for name, r in runs.items())
            + f" (in {sum(r['seconds'] for r in runs.values()):.0f} s)")
