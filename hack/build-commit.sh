#!/bin/sh
# The git commit a build is made from (src/netattach/buildinfo.py): the 40 hex digits of
# HEAD, followed by "-dirty" when a tracked file differs from it (staged or not; untracked
# files do not count, as with `git describe --dirty`); "unknown" when the repository's
# directory is not the top of a git work tree (a source tarball, an image build's context,
# which has no .git) or git is missing. Prints one line; always exits 0.
# usage: hack/build-commit.sh [repository dir, default: this script's repository]
dir=${1:-$(dirname "$0")/..}
cd "$dir" 2>/dev/null || { echo unknown; exit 0; }
top=$(git rev-parse --show-toplevel 2>/dev/null) || { echo unknown; exit 0; }
# a tree inside another repository (not a checkout of its own) says so too
[ "$(cd "$top" && pwd -P)" = "$(pwd -P)" ] || { echo unknown; exit 0; }
head=$(git rev-parse --verify -q HEAD) || { echo unknown; exit 0; }
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
	echo "$head-dirty"
else
	echo "$head"
fi
