"""cni.version, the one owner of CNI versions: parsing, the supported list, the version a
config runs with, the legacy result shape. Pure."""
from __future__ import annotations

import pytest

from netattach.cni import version
from netattach.cni.errors import VersionError


@pytest.mark.parametrize("text,expected", [
    ("", (0, 1, 0)), ("0.1.0", (0, 1, 0)), ("0.3.1", (0, 3, 1)), ("1.1.0", (1, 1, 0)),
    ("1", (1, 0, 0)), ("1.1", (1, 1, 0)), ("10.20.30", (10, 20, 30)),
])
def test_parse(text, expected):
    assert version.parse(text) == expected


@pytest.mark.parametrize("text", ["a", "1.0.0.0", "1..0", "v1.0.0", " 1.0.0", "1.0.0-rc1", "-1",
                                  "1.0.", None, 1])
def test_parse_invalid(text):
    with pytest.raises(VersionError) as e:
        version.parse(text)
    assert e.value.code == 1


def test_at_least():
    assert version.at_least("0.4.0", "0.4.0")
    assert version.at_least("1.0.0", "0.4.0")
    assert version.at_least("0.10.0", "0.4.0")  # numeric, not string, comparison
    assert not version.at_least("0.3.1", "0.4.0")
    assert not version.at_least("", "0.2.0")  # "" is 0.1.0
    with pytest.raises(VersionError):
        version.at_least("x", "1.0.0")


@pytest.mark.parametrize("config,expected", [
    ({}, "0.1.0"),
    ({"cniVersion": ""}, "0.1.0"),
    ({"cniVersion": "0.3.1"}, "0.3.1"),
    ({"cniVersion": "1.0.0", "cniVersions": ["0.4.0", "1.1.0", "9.9.9"]}, "1.1.0"),
    ({"cniVersion": "1.1.0", "cniVersions": ["0.4.0"]}, "1.1.0"),
    ({"cniVersion": "9.9.9", "cniVersions": ["0.4.0", "1.0.0"]}, "1.0.0"),
    ({"cniVersions": ["0.3.1"]}, "0.3.1"),
])
def test_config_version(config, expected):
    assert version.config_version(config) == expected


@pytest.mark.parametrize("config", [
    {"cniVersion": "1.2.0"},  # newer than netattach: refused, never served as 1.1.0
    {"cniVersion": "1.0"},    # parses, but libcni plugins compare version strings
    {"cniVersion": "2.0.0", "cniVersions": ["2.1.0"]},
])
def test_config_version_refuses_what_is_not_supported(config):
    with pytest.raises(VersionError) as e:
        version.config_version(config, "cniVersion of x.conf")
    assert e.value.code == 1 and "x.conf" in e.value.msg
    assert "1.1.0" in e.value.details


@pytest.mark.parametrize("result,legacy", [
    ({"cniVersion": "0.2.0", "ip4": {"ip": "10.0.0.2/24"}}, True),
    ({"cniVersion": "0.1.0"}, True),
    ({"cniVersion": "0.3.0", "ips": []}, False),
    ({"cniVersion": "1.1.0"}, False),
    ({"ip4": {"ip": "10.0.0.2/24"}}, True),
    ({"ips": [], "ip4": {}}, False),
    ({"cniVersion": "garbage", "ip6": {}}, True),
    ({}, False),
])
def test_is_legacy_result(result, legacy):
    assert version.is_legacy_result(result) is legacy
