"""Network namespaces, host links and work dirs made for one test, and the leak check.

Every name starts with PREFIX so the end-of-session check can prove that nothing
made by a test is left on the machine. Uses iproute2 (`ip`), the same tool an
admin would use to look, so what the tests check is what a person would see.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "nat"  # links: nat<kind><6 hex>; netns: natns-<hex>
NETNS_DIR = Path("/var/run/netns")
# Every netns and host link name handed out in this process, for leaks().
REGISTERED: set[str] = set()
REGISTERED_DIRS: set[Path] = set()


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run a command, capture text output; raise with its stderr on failure."""
    p = subprocess.run(argv, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr.strip()}")
    return p


def links(netns: str | None = None) -> list[dict]:
    """Links as `ip -j link` reports them, on the host or inside `netns`."""
    argv = ["ip", "-j"] + (["-n", netns] if netns else []) + ["link", "show"]
    return json.loads(run(*argv).stdout or "[]")


def addresses(netns: str, ifname: str) -> list[str]:
    """CIDR addresses ("10.1.0.2/24") on `ifname` in `netns`, link-local v6 excluded."""
    data = json.loads(run("ip", "-j", "-n", netns, "addr", "show", "dev", ifname).stdout)
    return [f"{a['local']}/{a['prefixlen']}" for a in data[0].get("addr_info", [])
            if a.get("scope") != "link"]


def bare(cidrs: list[str]) -> list[str]:
    """`cidrs` ("10.1.0.2/24", as `addresses` gives them) without their prefix lengths
    ("10.1.0.2"): the form of network-status `ips` that netattach writes by default, as
    Multus does (docs/behaviour.md, "The addresses in network-status")."""
    return [c.split("/", 1)[0] for c in cidrs]


def addresses_by_link(netns: str) -> dict[str, list[str]]:
    """Every link of `netns` -> its CIDR addresses (as `addresses`), from one `ip addr`:
    a consistent view while something adds or removes links there."""
    data = json.loads(run("ip", "-j", "-n", netns, "addr", "show").stdout or "[]")
    return {link["ifname"]: [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", [])
                             if a.get("scope") != "link"] for link in data}


def link_mac(netns: str, ifname: str) -> str:
    """MAC address of `ifname` in `netns`, lower case."""
    return json.loads(run("ip", "-j", "-n", netns, "link", "show", "dev", ifname).stdout)[0]["address"]


def netns_names() -> list[str]:
    return sorted(p.name for p in NETNS_DIR.glob("*")) if NETNS_DIR.exists() else []


def unique(kind: str) -> str:
    """A link name PREFIX+kind+6 hex chars (<= 15 chars, IFNAMSIZ), registered for leaks()."""
    name = f"{PREFIX}{kind}{uuid.uuid4().hex[:6]}"
    REGISTERED.add(name)
    return name


@dataclass
class HostEnv:
    """What one test (or the demo) owns on the host; `cleanup()` removes all of it."""
    root: Path
    netns: list[str] = field(default_factory=list)
    host_links: list[str] = field(default_factory=list)

    @property
    def ipam_dir(self) -> Path:
        return self.root / "ipam"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def conf_dir(self) -> Path:
        return self.root / "net.d"

    @property
    def log_dir(self) -> Path:
        return self.root / "log"

    def new_netns(self) -> str:
        """Create a pod network namespace; returns its name (path: netns_path(name))."""
        name = f"{PREFIX}ns-{uuid.uuid4().hex[:10]}"
        REGISTERED.add(name)
        run("ip", "netns", "add", name)
        self.netns.append(name)
        run("ip", "-n", name, "link", "set", "lo", "up")
        return name

    def bridge_name(self) -> str:
        """A unique bridge name; the bridge plugin creates it, cleanup() deletes it."""
        name = unique("b")
        self.host_links.append(name)
        return name

    def master_link(self) -> str:
        """A host link to act as macvlan/ipvlan master, up, owned by this env.

        A veth pair stands in for a `dummy` link: the kernel of this test bed is
        built without the dummy driver, and a veth end is an equally inert master.
        """
        name, peer = unique("m"), unique("p")
        run("ip", "link", "add", name, "type", "veth", "peer", "name", peer)
        self.host_links += [name, peer]
        run("ip", "link", "set", name, "up")
        run("ip", "link", "set", peer, "up")
        return name

    def state_files(self) -> list[str]:
        """netattach's live files in state_dir: everything but tombstones (statefiles.live)."""
        from .statefiles import live
        return live(self.state_dir)

    def ipam_allocations(self) -> list[Path]:
        """host-local allocation files left under ipam_dir (lock and last_reserved_ip files excluded)."""
        if not self.ipam_dir.exists():
            return []
        return [p for p in self.ipam_dir.rglob("*") if p.is_file()
                and p.name != "lock" and not p.name.startswith("last_reserved_ip")]

    def cleanup(self) -> None:
        for ns in self.netns:
            run("ip", "netns", "del", ns, check=False)
        host = {l["ifname"] for l in links()}
        for name in self.host_links:
            if name in host:
                run("ip", "link", "del", name, check=False)
        shutil.rmtree(self.root, ignore_errors=True)


def new_host_env() -> HostEnv:
    root = Path(tempfile.mkdtemp(prefix="netattach-test-"))
    REGISTERED_DIRS.add(root)
    env = HostEnv(root=root)
    for d in (env.ipam_dir, env.state_dir, env.conf_dir, env.log_dir):
        d.mkdir(mode=0o700)
    return env


def netns_path(name: str) -> str:
    return str(NETNS_DIR / name)


def leaks() -> list[str]:
    """Netns, host links and work dirs made through this module in this process that still
    exist, and child processes of this process still running (etcd, kube-apiserver, plugins).

    Exact to this process, so a second test session on the same machine (a
    developer's, next to CI) neither hides nor causes a leak report.
    """
    out = [f"netns {n}" for n in netns_names() if n in REGISTERED]
    out += [f"link {l['ifname']}" for l in links() if l["ifname"] in REGISTERED]
    out += [f"dir {d}" for d in sorted(REGISTERED_DIRS) if d.exists()]
    out += [f"process {pid} {cmd}" for pid, cmd in child_processes()]
    return out


def child_processes() -> list[tuple[int, str]]:
    """Live (non-zombie) child processes of this process: (pid, command line)."""
    me, out = os.getpid(), []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may contain spaces, so split after the last ')'
        state, ppid = text[text.rindex(")") + 2:].split()[:2]
        if int(ppid) == me and state != "Z":
            try:
                cmd = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            except OSError:
                cmd = "?"
            out.append((int(stat.parent.name), cmd))
    return out



