#!/usr/bin/env bash
# The search's differential soak: random corpora, one after another, each with random query
# plans answered by the optimised search (pruned, unpruned, in slices) and by the exhaustive
# reference, which must agree bit for bit (tests/search/evaluate_test.cc,
# differential_soak.random_corpora_until_the_time_is_up). The test command runs a few fixed
# corpora; this runs as many as the time allows, with the build's and the evaluation's knobs
# drawn per corpus. On a difference it stops and prints the corpus, the knobs and the query.
#
#   perf/soak/differential.sh [--seconds N] [--seed S] [--build-dir DIR]
#
# Defaults: 600 seconds, seed 1 (the same seed replays the same corpora and queries),
# build/release. Exit status: the test's.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"

seconds=600 seed=1 build="$PERF_ROOT/build/release"
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    -h|--help) sed -n 2,12p "$0"; exit 0 ;;
    *) perf_die "unknown option $1" ;;
  esac
done
[[ $seconds =~ ^[0-9]+$ ]] || perf_die "--seconds: expected a whole number, got '$seconds'"
[[ $seed =~ ^[0-9]+$ ]] || perf_die "--seed: expected a whole number, got '$seed'"
bin="$build/tests/search/search_test"
[ -x "$bin" ] || perf_die "no $bin (build the tests: cmake --build --preset release)"
TOLLGATE_SOAK_SECONDS=$seconds TOLLGATE_SOAK_SEED=$seed \
  exec "$bin" --gtest_filter='differential_soak.*' --gtest_brief=1
