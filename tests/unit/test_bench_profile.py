"""The profile summary of `make bench PROFILE=1` (hack/benchlib/profile.py): py-spy's raw
stacks summed, samples attributed to the outermost import or the innermost frame."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))

from benchlib import profile  # noqa: E402

RAW = """\
<module> (entry.py:42);main (cli.py:118);cni_main (call.py:65);_find_and_load (<frozen importlib._bootstrap>:1176);_call_with_frames_removed (<frozen importlib._bootstrap>:241);<module> (add.py:3);_find_and_load (<frozen importlib._bootstrap>:1176);<module> (ssl.py:1) 3
<module> (entry.py:42);main (cli.py:118);cni_main (call.py:65);_find_and_load (<frozen importlib._bootstrap>:1176);<module> (netconf.py:176) 1
<module> (entry.py:42);main (cli.py:118);cni_main (call.py:80);cmd_add (add.py:10);run (invoke.py:200);wait (subprocess.py:1) 4
<module> (entry.py:42);main (cli.py:120);cmd_add (add.py:12);run (invoke.py:200);wait (subprocess.py:9) 2
not a stack line
"""


def test_stacks_are_summed_without_line_numbers():
    stacks = profile.parse(RAW)
    assert sum(stacks.values()) == 10
    assert stacks[("<module> (entry.py)", "main (cli.py)", "cni_main (call.py)",
                   "cmd_add (add.py)", "run (invoke.py)", "wait (subprocess.py)")] == 4


def test_samples_go_to_the_outermost_import_or_the_innermost_frame():
    s = profile.summary(profile.parse(RAW))
    assert s["samples"] == 10 and s["importing"] == 0.4
    assert s["imports"] == [("add.py", 0.3), ("netconf.py", 0.1)]
    assert s["frames"] == [("wait (subprocess.py)", 0.6)]
    text = profile.text("ADD", s)
    assert "40 % importing" in text and "add.py 30 %" in text and "wait (subprocess.py) 60 %" in text
