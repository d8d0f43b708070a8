#!/bin/sh
# Tests of the cchan-run launcher: environment, exit status propagation, grace period, --timeout,
# and that no rank or child of a rank outlives it.
#   cchan_run_test.sh <path to cchan-run>
set -u
RUN=$1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0

fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# expect_status <name> <status> <max seconds> <cchan-run args...>
expect_status() {
    name=$1 want=$2 max=$3
    shift 3
    start=$(date +%s)
    "$RUN" "$@" >"$TMP/out" 2>"$TMP/err"
    got=$?
    took=$(($(date +%s) - start))
    if [ "$got" != "$want" ]; then
        fail "$name: exit status $got, expected $want"
        cat "$TMP/err"
    elif [ "$took" -gt "$max" ]; then
        fail "$name: took $took s, expected at most $max s"
    else
        echo "ok: $name (status $got, $took s)"
    fi
}

# Every rank gets its rank, the world size and the same root address and session.
expect_status "environment" 0 5 -n 3 -- sh -c \
    'echo "$CCHAN_RANK/$CCHAN_WORLD_SIZE/$CCHAN_LOCAL_RANK/$CCHAN_LOCAL_SIZE $CCHAN_BOOTSTRAP_ROOT $CCHAN_BOOTSTRAP_SESSION"'
sort "$TMP/out" | awk '{print $1}' | tr '\n' ' ' | grep -qx '0/3/0/3 1/3/1/3 2/3/2/3 ' ||
    fail "environment: ranks saw $(cat "$TMP/out")"
[ "$(awk '{print $2, $3}' "$TMP/out" | sort -u | wc -l)" = 1 ] || fail "environment: roots differ"
grep -q '^0/3/0/3 127\.0\.0\.1:[0-9][0-9]* [0-9a-f]\{16\}$' "$TMP/out" || fail "environment: bad root or session"

# Every rank gets the same random 128-bit secret, a new one each run; a secret of the caller's stays.
"$RUN" -n 3 -- sh -c 'echo "$CCHAN_BOOTSTRAP_SECRET"' >"$TMP/secret1" 2>&1
"$RUN" -n 1 -- sh -c 'echo "$CCHAN_BOOTSTRAP_SECRET"' >"$TMP/secret2" 2>&1
[ "$(sort -u "$TMP/secret1" | wc -l)" = 1 ] || fail "secret: ranks differ: $(cat "$TMP/secret1")"
grep -qx '[0-9a-f]\{32\}' "$TMP/secret1" || fail "secret: not 128 random bits: $(cat "$TMP/secret1")"
[ "$(sort -u "$TMP/secret1")" != "$(cat "$TMP/secret2")" ] || fail "secret: the same in two runs"
CCHAN_BOOTSTRAP_SECRET=mine "$RUN" -n 2 -- sh -c 'echo "$CCHAN_BOOTSTRAP_SECRET"' >"$TMP/secret3" 2>&1
[ "$(sort -u "$TMP/secret3")" = mine ] || fail "secret: the caller's was replaced: $(cat "$TMP/secret3")"

expect_status "all succeed" 0 5 -n 4 true
expect_status "first failure wins" 3 5 -n 4 -- sh -c '[ "$CCHAN_RANK" = 2 ] && exit 3; [ "$CCHAN_RANK" = 3 ] && { sleep 0.5; exit 4; }; exit 0'
expect_status "all skipped" 77 5 -n 3 sh -c 'exit 77'
expect_status "some skipped" 0 5 -n 3 sh -c '[ "$CCHAN_RANK" = 0 ] && exit 0; exit 77'
expect_status "killed by a signal" 137 5 -n 2 sh -c '[ "$CCHAN_RANK" = 1 ] && kill -9 $$; exit 0'
expect_status "not executable" 127 5 -n 2 "$TMP/does-not-exist"
expect_status "usage" 2 5 -n 0 true
expect_status "usage without command" 2 5 -n 2

# A value that is not a number in range is refused, NaN included (it compares false with every
# bound, and a --timeout of NaN would have meant no timeout at all).
for bad in "--timeout nan" "--grace nan" "--timeout -nan" "--timeout inf" "-n nan" "--timeout 1e8"; do
    # shellcheck disable=SC2086 # the flag and its value are two words
    expect_status "refused: $bad" 2 5 $bad -n 1 true
    grep -q "needs a number in" "$TMP/err" || fail "refused: $bad: no message naming the range"
done

# A failed rank gives the others --grace seconds, then they are killed, children included.
expect_status "grace period" 5 8 -n 3 --grace 1 sh -c \
    'if [ "$CCHAN_RANK" = 0 ]; then exit 5; fi; sleep 300 & echo $! >"'"$TMP"'/child.$CCHAN_RANK"; wait'
grep -q "giving the other 2 rank(s) 1 s" "$TMP/err" || fail "grace period: no notice on stderr"
grep -q "killing them" "$TMP/err" || fail "grace period: no kill notice"

# Ranks that end on their own within the grace period keep their status.
expect_status "ranks end within grace" 6 5 -n 2 --grace 10 sh -c '[ "$CCHAN_RANK" = 0 ] && exit 6; sleep 1; exit 7'

# --timeout kills everything with a message.
expect_status "timeout" 124 8 -n 2 --timeout 1 sleep 300
grep -q "timeout after 1 s" "$TMP/err" || fail "timeout: no message"

# A rank's background child that outlives its rank is not left behind.
expect_status "orphans swept" 0 8 -n 2 sh -c 'sleep 300 & echo $! >"'"$TMP"'/orphan.$CCHAN_RANK"; exit 0'

sleep 0.2
for f in "$TMP"/child.* "$TMP"/orphan.*; do
    [ -e "$f" ] || continue
    if kill -0 "$(cat "$f")" 2>/dev/null; then
        fail "process $(cat "$f") ($(basename "$f")) outlived cchan-run"
        kill -9 "$(cat "$f")" 2>/dev/null
    fi
done

[ "$failures" = 0 ] && echo "all cchan-run checks passed"
exit $((failures != 0))
