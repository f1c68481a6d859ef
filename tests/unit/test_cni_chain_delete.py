"""chain.delete and chain.AddFailure: a conflist's DEL attempts every plugin, in reverse,
past a plugin that fails or is missing (issue 21), and excuses only the failures that
leave nothing of a failed ADD allocated. Pure: a fake executor records each call."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from netattach.cni import chain
from netattach.cni.chain import AddFailure, NetworkConfig, RuntimeConf
from netattach.cni.errors import ChildError, CniError, ConfigError, InvalidEnv

LIST = {"cniVersion": "1.0.0", "name": "net-chain", "plugins": [
    {"type": "bridge", "ipam": {"type": "host-local", "subnet": "10.1.0.0/24"}},
    {"type": "tuning"},
    {"type": "portmap"},
]}
PREV = {"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.5/24"}]}


@dataclass
class Exe:
    """Executor: `missing` types are not found (as invoke.find_plugin says it); `fail`
    maps (command, type) to the (code, msg) that call fails with; `calls` records
    (command, type, whether stdin had a prevResult)."""
    missing: set[str] = field(default_factory=set)
    fail: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)
    calls: list[tuple[str, str, bool]] = field(default_factory=list)

    def find(self, plugin_type: str, dirs: Any) -> str:
        if plugin_type in self.missing:
            raise ConfigError(f"failed to find plugin {plugin_type!r} in path [/opt/cni/bin]")
        return f"/opt/cni/bin/{plugin_type}"

    def run(self, path: str, command: str, config: dict[str, Any], env: Any,
            timeout: float) -> dict[str, Any] | None:
        ptype = path.rsplit("/", 1)[1]
        self.calls.append((command, ptype, "prevResult" in config))
        if (command, ptype) in self.fail:
            code, msg = self.fail[(command, ptype)]
            raise ChildError(code, msg, plugin=ptype)
        if command != "ADD":
            return None
        return config.get("prevResult") or {"cniVersion": config["cniVersion"],
                                            "ips": [{"address": "10.1.0.5/24"}]}


def net(data: dict[str, Any] = LIST) -> NetworkConfig:
    return NetworkConfig.from_dict(data, "NAD ns/net-chain")


def rt(exe: Exe) -> RuntimeConf:
    return RuntimeConf("c1", "/var/run/netns/x", "net1", executor=exe)


def dels(exe: Exe) -> list[str]:
    return [t for c, t, _ in exe.calls if c == "DEL"]


def add_failure(exe: Exe, n: NetworkConfig | None = None) -> AddFailure:
    """The AddFailure of chain.add failing with `exe`."""
    with pytest.raises(CniError) as e:
        chain.add(n or net(), rt(exe))
    return AddFailure.of(e.value)


# ---------------------------------------------------------------- every plugin's DEL

def test_del_runs_every_plugin_in_reverse_with_the_prev_result():
    exe = Exe()
    assert chain.delete(net(), rt(exe), PREV) == []
    assert exe.calls == [("DEL", "portmap", True), ("DEL", "tuning", True),
                         ("DEL", "bridge", True)]


def test_del_goes_on_past_a_missing_plugin_and_raises_its_error():
    """libcni's DelNetworkList would return at portmap, and bridge's DEL (the interface,
    host-local's address) would never run; netattach runs it, then fails."""
    exe = Exe(missing={"portmap"})
    with pytest.raises(ChildError) as e:
        chain.delete(net(), rt(exe), PREV)
    assert dels(exe) == ["tuning", "bridge"]  # portmap is not found, so never runs
    err = e.value
    assert err.code == 7 and err.plugin == "portmap" and err.plugin_index == 2
    assert err.msg == ("plugin type='portmap' name='net-chain' failed (del): failed to find "
                       "plugin 'portmap' in path [/opt/cni/bin]")
    assert err.cause == "failed to find plugin 'portmap' in path [/opt/cni/bin]"
    assert not err.executed


def test_del_goes_on_past_failures_and_reports_them_all():
    exe = Exe(fail={("DEL", "portmap"): (110, "iptables gone"),
                    ("DEL", "bridge"): (111, "link busy")})
    with pytest.raises(CniError) as e:
        chain.delete(net(), rt(exe), PREV)
    assert dels(exe) == ["portmap", "tuning", "bridge"]
    assert e.value.code == 110  # the first to fail, in DEL's order
    assert e.value.msg == (
        "DEL failed for 2 plugins of network 'net-chain': "
        "plugin type='portmap' name='net-chain' failed (del): iptables gone; "
        "plugin type='bridge' name='net-chain' failed (del): link busy")


def test_prev_result_only_from_040_as_libcni():
    exe = Exe()
    chain.delete(net({**LIST, "cniVersion": "0.3.1"}), rt(exe), PREV)
    assert [p for _, _, p in exe.calls] == [False, False, False]


# ---------------------------------------------------------------- where a failed ADD stopped

def test_add_failure_of_a_missing_later_plugin():
    exe = Exe(missing={"tuning"})
    failure = add_failure(exe)
    assert [t for c, t, _ in exe.calls] == ["bridge"]
    assert failure == AddFailure(1, False, 7,
                                 "failed to find plugin 'tuning' in path [/opt/cni/bin]")


def test_add_failure_of_a_failing_later_plugin():
    exe = Exe(fail={("ADD", "tuning"): (110, "sysctl refused")})
    assert add_failure(exe) == AddFailure(1, True, 110, "sysctl refused")


def test_add_failure_of_a_plugin_whose_prev_result_does_not_convert():
    """libcni's buildOneConfig error is the plugin's ("plugin ... failed (add)"); that
    plugin never ran."""
    with pytest.raises(ChildError) as e:
        chain.add(net(), rt(Exe()), prev_result={"cniVersion": "9.9.9"})
    assert e.value.plugin_index == 0 and not e.value.executed
    assert e.value.msg.startswith("plugin type='bridge' name='net-chain' failed (add): ")
    assert AddFailure.of(e.value).plugin == 0


def test_add_failure_of_an_error_before_any_plugin():
    with pytest.raises(CniError) as e:
        chain.add(net(), RuntimeConf("-bad", "/x", "net1", executor=Exe()))
    assert AddFailure.of(e.value) == AddFailure(0, False, 4, e.value.msg)
    assert AddFailure.of(InvalidEnv("x")) == AddFailure(0, False, 4, "x")


@pytest.mark.parametrize("failure, index, code, cause, excused", [
    # the plugins before the failing one returned a result: they may hold something
    (AddFailure(1, True, 110, "sysctl refused"), 0, 110, "sysctl refused", False),
    # the failing one, failing as its ADD did (a macvlan master that does not exist)
    (AddFailure(1, True, 110, "sysctl refused"), 1, 110, "sysctl refused", True),
    # ... or otherwise: it may have allocated before it failed
    (AddFailure(1, True, 110, "sysctl refused"), 1, 110, "sysctl busy", False),
    (AddFailure(1, True, 110, "sysctl refused"), 1, 111, "sysctl refused", False),
    # the failing one that never ran, whatever its DEL says
    (AddFailure(1, False, 7, "failed to find plugin"), 1, 7, "failed to find plugin", True),
    (AddFailure(1, False, 7, "failed to find plugin"), 1, 110, "other", True),
    # after the failing one: never ran
    (AddFailure(1, True, 110, "sysctl refused"), 2, 7, "failed to find plugin", True),
    # an earlier release's state: any plugin, as that release did
    (AddFailure(None), 0, 110, "link busy", True),
])
def test_which_del_failures_a_failed_add_excuses(failure, index, code, cause, excused):
    error = ChildError(code, f"plugin type='x' name='n' failed (del): {cause}", cause=cause,
                       plugin_index=index, command="DEL")
    assert (failure.excuse(index, error) is not None) is excused


def test_a_missing_later_plugin_is_excused_and_the_rest_deleted():
    """The conflist of issue 21: [bridge + host-local, "nonexistent"]: ADD stops at the
    missing plugin; the rollback's DEL excuses it and deletes the bridge."""
    conflist = {**LIST, "plugins": [LIST["plugins"][0], {"type": "nonexistent"}]}
    exe = Exe(missing={"nonexistent"})
    failure = add_failure(exe, net(conflist))
    exe.calls.clear()
    [excused] = chain.delete(net(conflist), rt(exe), None, failure)
    assert dels(exe) == ["bridge"]
    assert excused.why.startswith("its ADD never ran: failed to find plugin 'nonexistent'")
    assert "failed (del)" in excused.error.msg


def test_a_plugin_before_the_failing_one_must_be_deleted():
    exe = Exe(missing={"portmap"})
    failure = add_failure(exe)
    assert failure.plugin == 2
    exe.fail = {("DEL", "bridge"): (111, "link busy")}
    exe.calls.clear()
    with pytest.raises(ChildError) as e:
        chain.delete(net(), rt(exe), None, failure)
    assert dels(exe) == ["tuning", "bridge"]
    assert e.value.plugin == "bridge" and e.value.cause == "link busy"


def test_the_failing_plugin_failing_otherwise_on_del_must_be_retried():
    exe = Exe(fail={("ADD", "tuning"): (110, "sysctl refused"),
                    ("DEL", "tuning"): (110, "sysctl busy")})
    failure = add_failure(exe)
    exe.calls.clear()
    with pytest.raises(ChildError) as e:
        chain.delete(net(), rt(exe), None, failure)
    assert dels(exe) == ["portmap", "tuning", "bridge"]  # portmap excused: never ran
    assert e.value.plugin == "tuning"
    # fixed: the retry of the whole list succeeds, excusing only portmap's if it fails
    exe.fail = {("DEL", "portmap"): (7, "no chain")}
    [excused] = chain.delete(net(), rt(exe), None, failure)
    assert excused.error.plugin == "portmap"  # type: ignore[attr-defined]


# ---------------------------------------------------------------- saved

def test_add_failure_round_trips_and_a_malformed_one_reads_as_none():
    f = AddFailure(2, False, 7, "failed to find plugin 'x'")
    assert AddFailure.from_dict(f.to_dict()) == f
    for bad in (None, [], {"plugin": -1, "executed": True, "code": 7, "msg": ""},
                {"plugin": True, "executed": True, "code": 7, "msg": ""},
                {"plugin": 0, "executed": "yes", "code": 7, "msg": ""},
                {"plugin": 0, "executed": True, "code": "7", "msg": ""},
                {"plugin": 0, "executed": True, "code": 7}):
        assert AddFailure.from_dict(bad) is None, bad
