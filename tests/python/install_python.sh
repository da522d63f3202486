#!/usr/bin/env bash
# The Python package as installed: `cmake --install` into a temporary prefix, then the
# package used from <prefix>/share/cohort/python, and `pip install` of that folder into
# a target directory; each finds the prefix's libcohort. The completeness test then
# reads the installed headers, and the installed cohort-check grades the installed
# add-a-model solution (compiled against the installed headers and library).
# usage: install_python.sh BUILD_DIR PYTHON TEST_BINDING_PY
set -euo pipefail
build=$1
python=$2
tests=$3
work=$(mktemp -d /tmp/cohort-install-python.XXXXXX)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
unset PYTHONPATH COHORT_LIBRARY
libdir=$(dirname "$(ls "$prefix"/lib*/libcohort.so.0 "$prefix"/lib/*/libcohort.so.0 2>/dev/null | head -1)")
probe='import cohort, sys; lib = cohort._capi.lib(); print(lib.path); assert lib.path.startswith(sys.argv[1]), lib.path; print(cohort.version_string(), cohort.find_cohortrun())'

echo "== from <prefix>/share/cohort/python"
test -f "$prefix/share/cohort/python/pyproject.toml"
PYTHONPATH=$prefix/share/cohort/python "$python" -c "$probe" "$prefix"

echo "== pip install <prefix>/share/cohort/python"
cp -r "$prefix/share/cohort/python" "$work/source"  # pip builds in the folder it installs
"$python" -m pip install --quiet --root-user-action=ignore --no-build-isolation --no-deps --target "$work/site" "$work/source" >/dev/null
(cd "$work" && PYTHONPATH=$work/site "$python" -c "$probe" "$prefix")

echo "== completeness against the installed headers"
PYTHONPATH=$work/site COHORT_INCLUDE_DIR=$prefix/include "$python" "$tests" Completeness

echo "== the installed cohort-check"
"$prefix/bin/cohort-check" add-model "$prefix/share/cohort/exercises/add_model/solution/trainer.c" --quiet
echo "install test passed ($libdir)"
