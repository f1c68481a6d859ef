"""hotplug.diff: the change from a sandbox's attachments to a new selection (issue 13)."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from netattach.spec import hotplug
from netattach.spec.plan import interface_names
from netattach.spec.selection import NetworkSelectionElement, parse_network_selection


def elements(annotation: str) -> list[NetworkSelectionElement]:
    return parse_network_selection(annotation, "ns")


def attached_by_add(desired: list[NetworkSelectionElement]) -> list[hotplug.Attached]:
    """What an ADD of `desired` attached (plan.interface_names names them)."""
    return [hotplug.Attached(e.ref, ifname, e.interface is not None, hotplug.parameters(e))
            for e, ifname in zip(desired, interface_names("eth0", desired))]


def test_the_selection_an_add_ran_is_no_change():
    desired = elements("a,b@data0,a,c")
    change = hotplug.diff(attached_by_add(desired), desired, ["eth0"])
    assert change.empty and not change.refused
    assert [i for i, _ in change.keep] == [0, 1, 2, 3]


def test_adding_an_element_adds_only_it():
    before = elements("a")
    change = hotplug.diff(attached_by_add(before), elements("a,other/b@data0"), ["eth0"])
    assert change.remove == [] and not change.refused
    assert [(e.ref, ifname) for e, ifname in change.add] == [("other/b", "data0")]


def test_removing_an_earlier_unnamed_element_keeps_the_later_ones_interfaces():
    # a fresh ADD of "b,c" would name them net1, net2; the running pod keeps net2, net3
    attached = attached_by_add(elements("a,b,c"))
    assert [a.ifname for a in attached] == ["net1", "net2", "net3"]
    change = hotplug.diff(attached, elements("b,c"), ["eth0"])
    assert change.remove == [0] and change.add == [] and not change.refused
    assert [(attached[i].ifname, e.ref) for i, e in change.keep] == [("net2", "ns/b"),
                                                                     ("net3", "ns/c")]


def test_a_new_unnamed_element_gets_a_name_no_kept_attachment_has():
    attached = attached_by_add(elements("a,b"))  # net1, net2
    change = hotplug.diff(attached, elements("b,c"), ["eth0"])
    assert change.remove == [0]
    # c is element 2: net2 is b's, kept, so c gets net3
    assert [(e.ref, ifname) for e, ifname in change.add] == [("ns/c", "net3")]


def test_removals_come_in_reverse_attachment_order():
    change = hotplug.diff(attached_by_add(elements("a,b,c,d")), elements("c"), ["eth0"])
    assert change.remove == [3, 1, 0]


def test_a_changed_parameter_is_refused_and_the_attachment_kept():
    before = elements('[{"name": "a", "ips": ["10.1.1.5/24"]}]')
    change = hotplug.diff(attached_by_add(before),
                          elements('[{"name": "a", "ips": ["10.1.1.6/24"]}]'), ["eth0"])
    assert change.empty
    assert [i for i, _ in change.keep] == [0]
    assert len(change.refused) == 1 and "ns/a" in change.refused[0]
    assert "ips" in change.refused[0] and "net1" in change.refused[0]


def test_a_requested_interface_that_a_kept_attachment_has_is_refused():
    attached = attached_by_add(elements("a"))  # a as net1
    change = hotplug.diff(attached, elements("a,b@net1"), ["eth0"])
    assert change.add == [] and change.remove == []
    assert change.refused == ["network ns/b: interface net1 is already used by another "
                              "attachment of the pod"]


def test_an_interface_freed_by_a_removal_can_be_taken_by_an_addition():
    change = hotplug.diff(attached_by_add(elements("a@data0")), elements("b@data0"), ["eth0"])
    assert change.remove == [0]
    assert [(e.ref, ifname) for e, ifname in change.add] == [("ns/b", "data0")]


def test_an_element_naming_a_generated_interface_is_that_attachment():
    attached = attached_by_add(elements("a"))  # net1, generated
    change = hotplug.diff(attached, elements("a@net1"), ["eth0"])
    assert change.empty and not change.refused


def test_an_element_that_no_longer_names_its_interface_keeps_it():
    """Dropping `@data0` keeps data0 (no DEL + ADD under the pod's feet), unless another
    element now asks for that name: then the interface goes to that one."""
    attached = attached_by_add(elements("a@data0"))
    change = hotplug.diff(attached, elements("a"), ["eth0"])
    assert change.empty and not change.refused and change.keep[0][0] == 0
    change = hotplug.diff(attached, elements("a,b@data0"), ["eth0"])
    assert change.remove == [0] and not change.refused
    assert [(e.ref, n) for e, n in change.add] == [("ns/a", "net1"), ("ns/b", "data0")]


def test_taken_names_are_never_given():
    change = hotplug.diff([], elements("a"), ["eth0", "net1"])
    assert [ifname for _, ifname in change.add] == ["net2"]


refs = st.sampled_from(["a", "b", "c", "other/d"])
named = st.sampled_from([None, None, "data0", "data1"])


@st.composite
def selections(draw) -> list[NetworkSelectionElement]:
    items = draw(st.lists(st.tuples(refs, named), max_size=6))
    seen: set[str] = set()
    parts = []
    for ref, interface in items:
        if interface and interface in seen:
            interface = None
        if interface:
            seen.add(interface)
        parts.append(f"{ref}@{interface}" if interface else ref)
    return elements(",".join(parts)) if parts else []


@given(selections(), selections())
def test_applying_a_change_gives_the_new_selection(before, after):
    """Whatever the two selections: every new element is kept or added exactly once, no
    kept or added interface is used twice, and what is removed is what no element
    selects any more."""
    attached = attached_by_add(before)
    change = hotplug.diff(attached, after, ["eth0"])
    assert not change.refused  # no parameters and no collisions in these selections
    kept = {id(e) for _, e in change.keep}
    added = {id(e) for e, _ in change.add}
    assert kept | added == {id(e) for e in after} and not kept & added
    names = [attached[i].ifname for i, _ in change.keep] + [n for _, n in change.add]
    assert len(names) == len(set(names)) and "eth0" not in names
    assert sorted(change.remove + [i for i, _ in change.keep]) == list(range(len(attached)))
    for i, e in change.keep:
        assert attached[i].network == e.ref
        assert e.interface in (None, attached[i].ifname)
    for e, ifname in change.add:
        assert e.interface in (None, ifname)
