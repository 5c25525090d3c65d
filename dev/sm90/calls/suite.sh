#!/usr/bin/env bash
# The GPU suite in one call (on the GPU machine, carry .deps): `bash dev/sm90/calls/suite.sh
# <commit> [passes]`, passes from run_all.sh's "default sm90-wide sm90-decode" (all three by
# default). Each pass runs under its own limit (SUITE_SECONDS, 170 s by default: three passes
# fit one 600 s call) and its record goes into $OUT/r.tgz as soon as it ends, so a call cut by
# its time limit still returns the passes it finished. (Session 20 ran the default pass alone
# under one 540 s limit and got nothing back from that call: it had copied its outputs at the end.)
# Each pass runs as MOEFORGE_TEST_SHARDS processes (run_all.sh; 4 by default): on a fresh
# machine a pass is mostly kernel compiles, one at a time in one process.
C=${1:?commit} PASSES=${2:-default sm90-wide sm90-decode}
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"  # /tmp/o, el, T, st, tst, prof, bench; builds $C
for p in $PASSES; do tst $p MOEFORGE_TEST_PASSES=$p MOEFORGE_TEST_SECONDS=${SUITE_SECONDS:-170}; done
