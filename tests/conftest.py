"""Fixtures live in their own modules: netns/links/dirs and the test control plane."""
import logging

import pytest

pytest_plugins = ["tests.fixtures_netns", "tests.fixtures_cluster"]

_PROPERTY_RUNS = pytest.StashKey[dict]()


@pytest.fixture(autouse=True)
def _netattach_logger_restored():
    """Tests that run cli.cni_main in-process configure the `netattach` logger (handlers,
    level, propagate=False); put it back, so a later test's caplog still sees its lines
    whatever the order the tests run in."""
    logger = logging.getLogger("netattach")
    saved = logger.handlers[:], logger.level, logger.propagate
    yield
    logger.handlers[:], logger.level, logger.propagate = saved


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
