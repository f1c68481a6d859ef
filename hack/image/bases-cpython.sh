#!/bin/sh
# Runs inside the bullseye root mmdebstrap makes for the build base (hack/image/bases.sh):
# builds the CPython source in /usr/src/python and installs it under /usr/local as the
# official python image does (shared libpython, the interpreter finding it through an
# $ORIGIN rpath, pip from ensurepip, no test suite, no bytecode, no static library).
# Optimisations (PGO, LTO) are left out: they triple the build time, and netattach's
# start-up is dominated by imports and the bootloader, not the interpreter loop.
set -eu
cd /usr/src/python

arch=$(dpkg-architecture --query DEB_BUILD_GNU_TYPE)
# LIBEXPAT_CFLAGS: Debian's backport of the CVE-2026-4224 fix makes pyexpat.c include an
# internal header (pycore_ceval.h). Debian links pyexpat into libpython, where that is
# allowed; built as the shared module it is upstream, it must say so (Py_BUILD_CORE_MODULE,
# which later upstream pyexpat.c defines itself). _elementtree gets the same flags.
LIBEXPAT_CFLAGS=-DPy_BUILD_CORE_MODULE ./configure --build="$arch" --prefix=/usr/local \
	--enable-shared --enable-loadable-sqlite-extensions --with-system-expat \
	--with-ensurepip=install --disable-test-modules --enable-option-checking=fatal \
	>/usr/src/configure.log 2>&1 || { tail -50 /usr/src/configure.log; exit 1; }

cflags=$(dpkg-buildflags --get CFLAGS)
ldflags="$(dpkg-buildflags --get LDFLAGS),--strip-all"
jobs=$(nproc)
make -s -j"$jobs" "EXTRA_CFLAGS=$cflags" "LDFLAGS=$ldflags" >/usr/src/make.log 2>&1 \
	|| { tail -50 /usr/src/make.log; exit 1; }
# the interpreter again, with an rpath to ../lib (libpython3.11.so) relative to itself
rm python
make -s -j"$jobs" "EXTRA_CFLAGS=$cflags" "LDFLAGS=$ldflags,-rpath='\$\$ORIGIN/../lib'" python \
	>>/usr/src/make.log 2>&1 || { tail -50 /usr/src/make.log; exit 1; }
make -s install >/usr/src/install.log 2>&1 || { tail -50 /usr/src/install.log; exit 1; }

cd /
rm -rf /usr/src/python /usr/src/*.log
find /usr/local -depth \( -type d -a \( -name test -o -name tests -o -name idle_test \) \) \
	-o \( -type f -a \( -name '*.pyc' -o -name '*.pyo' -o -name 'libpython*.a' \) \) \
	-exec rm -rf '{}' +
ldconfig
for name in idle pip pydoc python python-config; do
	ln -s "${name}3" "/usr/local/bin/$name"
done
