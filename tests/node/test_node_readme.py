"""README "Install on a cluster" and docs/helm.md are run line by line on the real node:
each of their shell blocks is one that a test runs as written (tests/node/test_node_lifecycle.py's
upgrade test: install, an admin's own image, uninstall, in both modes; README's Helm
install and docs/helm.md's blocks: tests/node/test_node_helm.py)."""
from __future__ import annotations

import re

from netattach_testbed import node as nd

MARKERS = ("readme-install-thin", "readme-install-thick", "readme-install-helm",
           "readme-install-own-image", "readme-uninstall")
# docs/helm.md's blocks, in order; its one unmarked block is README's helm install
HELM_DOC_MARKERS = (None, "helm-upgrade-thick", "helm-upgrade-thin", "helm-uninstall",
                    "helm-adopt")


def test_every_shell_block_of_the_install_section_is_one_the_tests_run():
    section = nd.README.read_text().split("## Install on a cluster", 1)[1].split("\n## ", 1)[0]
    assert tuple(re.findall(r"(?:<!-- ([\w-]+) -->\n)?```sh\n", section)) == MARKERS


def test_every_shell_block_of_the_helm_page_is_one_the_tests_run():
    text = nd.HELM_DOC.read_text()
    found = tuple(m or None for m in re.findall(r"(?:<!-- ([\w-]+) -->\n)?```sh\n", text))
    assert found == HELM_DOC_MARKERS
    # the unmarked one is README's (run as readme-install-helm), the release name and the
    # namespace as there
    unmarked = re.search(r"```sh\n(.*?)```", text, re.S).group(1)
    command = unmarked.split("#", 1)[0].strip()
    assert command in nd.doc_block(nd.README, "readme-install-helm", "sh")
