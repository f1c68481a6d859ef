"""Fixtures live in their own modules: netns/links/dirs and the test control plane."""
pytest_plugins = ["tests.fixtures_netns", "tests.fixtures_cluster"]
