"""README "Install on a cluster" is run line by line on the real node: each of its shell
blocks is one that a test runs as written (tests/node/test_node_lifecycle.py's upgrade
test: install, an admin's own image, uninstall, in both modes; the Helm blocks:
tests/node/test_node_helm.py)."""
from __future__ import annotations

import re

from netattach_testbed import node as nd

MARKERS = ("readme-install-thin", "readme-install-thick", "readme-install-helm",
           "readme-upgrade-helm", "readme-install-own-image", "readme-uninstall",
           "readme-uninstall-helm")


def test_every_shell_block_of_the_install_section_is_one_the_tests_run():
    section = nd.README.read_text().split("## Install on a cluster", 1)[1].split("\n## ", 1)[0]
    assert tuple(re.findall(r"(?:<!-- ([\w-]+) -->\n)?```sh\n", section)) == MARKERS
