#!/usr/bin/env bash
# Repository hygiene: what the tracked files say about themselves, and how the NCCL shim is linked.
#
#   check-repo.sh history SOURCE_DIR   tracked files name no development history and no document
#                                      outside the repository (CHANGELOG.md holds the history)
#   check-repo.sh links SOURCE_DIR     every relative link in README.md and docs/*.md resolves
#   check-repo.sh shim SOURCE_DIR [LIBCCHAN_NCCL]
#                                      the shim links cchan_coll unconditionally
#   check-repo.sh self-test            each check fails on a tree made to break it
#
# history and links read `git ls-files`, so untracked scratch files do not count; outside a git
# checkout (a release tarball) they exit 77 and say so.
#
# history: a file fails when it numbers the process that produced it -- the word session, issue or
# run followed by a number, with an optional '#' (case-insensitive; "cchan-run 2" and other
# hyphenated words do not count, nor do all-caps CMake keywords such as RUNS 1000) -- or names a
# path under ../shared/ or a design document that is not in the repository. Prose that only looks
# like it ("run 2 ranks") is to be reworded ("start 2 ranks"). Files listed in
# history-allowlist.txt (beside this script) are reported but do not fail, and an entry whose file
# passes, or is gone, fails, so the list only shrinks.
#
# links: each [text](target) and <img src=...> whose target is not a URL must name a tracked or
# existing path relative to the page; a #fragment on a Markdown page must match one of its
# headings (GitHub's anchors); README.md must link every page of docs/ (its index). Pages named in links-pending.txt (pages other branches add) are
# reported while absent and fail once present, so the entry gets removed.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)

in_git() { git -C "$1" rev-parse --is-inside-work-tree >/dev/null 2>&1; }

# Entries of a list file: one path per line, '#' starts a comment.
list_entries() { [ -f "$1" ] && sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^$/d' "$1"; }

# The numbering words, matched on their own (not after a letter, digit, '_' or '-'), before a
# number that is not a version ("runs 0.1.0" is not history).
history_re='(^|[^[:alnum:]_-])(session|issue|run)s?[[:space:]]+#?[0-9]+([^.0-9]|[.]([^0-9]|$)|$)'
outside_re='\.\./shared/|/work/shared|(^|[^[:alnum:]_])(DESIGN|BASELINES|STYLE)\.md'

# Prints "path:line: text" for each offending line of the given tracked files.
history_hits() {
    local src=$1
    shift
    (cd "$src" && git grep -n -I -i -E -e "$history_re" -- "$@" 2>/dev/null) |
        while IFS= read -r hit; do
            # Keep the hit unless its only matches are all-caps keywords (CMake's RUNS 100000).
            text=${hit#*:*:}
            if printf '%s\n' "$text" | grep -oiE "$history_re" |
                grep -vE '(^|[^[:alnum:]_-])RUNS?[[:space:]]+[0-9]' | grep -q .; then
                printf '%s\n' "$hit"
            fi
        done
    (cd "$src" && git grep -n -I -E -e "$outside_re" -- "$@" 2>/dev/null) |
        while IFS= read -r hit; do
            # A design document that the repository does have is not outside it.
            name=$(printf '%s\n' "${hit#*:*:}" | grep -oE '(DESIGN|BASELINES|STYLE)\.md' | head -1)
            if [ -n "$name" ] && ! printf '%s\n' "${hit#*:*:}" | grep -qE '\.\./shared/|/work/shared' &&
                (cd "$src" && git ls-files | grep -qE "(^|/)$name\$"); then
                continue
            fi
            printf '%s\n' "$hit"
        done
}

check_history() {
    local src=$1 allow=$here/history-allowlist.txt
    if ! in_git "$src"; then
        echo "SKIP: $src is not a git checkout; this check reads git ls-files"
        exit 77
    fi
    mapfile -t allowed < <(list_entries "$allow")
    # Every tracked file but the changelog and this check's own lists.
    local self=${here#"$(cd "$src" && pwd)"/}
    mapfile -t files < <(cd "$src" && git ls-files | grep -vxF -e CHANGELOG.md \
        -e "$self/history-allowlist.txt" -e "$self/check-repo.sh")
    local hits
    hits=$(history_hits "$src" "${files[@]}" | LC_ALL=C sort -u)
    local fail=0 f
    declare -A is_allowed=()
    for f in "${allowed[@]}"; do is_allowed[$f]=1; done
    local bad_files
    bad_files=$(printf '%s\n' "$hits" | sed -n 's/^\([^:]*\):[0-9]*:.*/\1/p' | LC_ALL=C sort -u)
    for f in $bad_files; do
        if [ -n "${is_allowed[$f]:-}" ]; then
            echo "allowed (to clean, history-allowlist.txt): $f, $(printf '%s\n' "$hits" |
                grep -c "^$f:") line(s)"
        else
            echo "FAIL: $f names development history or a document outside the repository:"
            printf '%s\n' "$hits" | grep "^$f:" | cut -c1-200 | sed 's/^/    /'
            fail=1
        fi
    done
    for f in "${allowed[@]}"; do
        if ! printf '%s\n' "$bad_files" | grep -qxF "$f"; then
            echo "FAIL: $f is in history-allowlist.txt but passes (or is gone): remove the entry"
            fail=1
        fi
    done
    if [ "$fail" -eq 0 ]; then
        echo "history: ${#files[@]} tracked files checked, ${#allowed[@]} allowed to clean"
    fi
    return "$fail"
}

# GitHub's anchor for each heading of a Markdown file, one a line.
anchors() {
    awk '/^```/ { fence = !fence; next } !fence && /^#+[[:space:]]/ {
            sub(/^#+[[:space:]]+/, ""); sub(/[[:space:]]+#*$/, ""); print }' "$1" |
        tr '[:upper:]' '[:lower:]' |
        sed -e 's/[^[:alnum:] _-]//g' -e 's/ /-/g'
}

check_links() {
    local src=$1 pending=$here/links-pending.txt
    if ! in_git "$src"; then
        echo "SKIP: $src is not a git checkout; this check reads git ls-files"
        exit 77
    fi
    cd "$src" || return 1
    mapfile -t pages < <(git ls-files -- README.md 'docs/*.md' 'docs/**/*.md')
    mapfile -t pend < <(list_entries "$pending")
    local fail=0 n=0 page target path frag dir p
    declare -A is_pending=() seen_pending=()
    for p in "${pend[@]}"; do is_pending[$p]=1; done
    for page in "${pages[@]}"; do
        dir=$(dirname "$page")
        # Links outside code spans and fences: [text](target "title") and src="target".
        while IFS= read -r target; do
            n=$((n + 1))
            case $target in
            http://* | https://* | mailto:*) continue ;;
            esac
            path=${target%%#*}
            frag=
            [ "$path" != "$target" ] && frag=${target#*#}
            if [ -z "$path" ]; then
                p=$page
            else
                p=$(realpath -m --relative-to=. "$dir/$path")
            fi
            if [ -n "${is_pending[$p]:-}" ] && [ ! -e "$p" ]; then
                seen_pending[$p]=1
                continue
            fi
            if [ ! -e "$p" ]; then
                echo "FAIL: $page links to $target: $p does not exist"
                fail=1
                continue
            fi
            if [ -n "$frag" ] && [ "${p##*.}" = md ] && ! anchors "$p" | grep -qxF "$frag"; then
                echo "FAIL: $page links to $target: no heading of $p has the anchor #$frag"
                fail=1
            fi
        done < <(awk '/^```/ { fence = !fence; next } !fence { gsub(/`[^`]*`/, ""); print }' "$page" |
            grep -oE '\]\([^) ]+( "[^"]*")?\)|src="[^"]+"' |
            sed -E -e 's/^\]\(([^) ]+).*\)$/\1/' -e 's/^src="([^"]+)"$/\1/')
    done
    # The README's index links every page of docs/.
    local indexed
    indexed=$(awk '/^```/ { fence = !fence; next } !fence' README.md 2>/dev/null |
        grep -oE '\]\(docs/[^)#]+\.md' | sed 's/^](//' | LC_ALL=C sort -u)
    for p in $(git ls-files -- 'docs/*.md' | grep -v '^docs/.*/'); do
        if ! printf '%s\n' "$indexed" | grep -qxF "$p"; then
            echo "FAIL: $p is not linked from README.md (the documentation index)"
            fail=1
        fi
    done
    for p in "${pend[@]}"; do
        if [ -e "$p" ]; then
            echo "FAIL: $p is in links-pending.txt but exists now: remove the entry"
            fail=1
        elif [ -z "${seen_pending[$p]:-}" ]; then
            echo "FAIL: $p is in links-pending.txt but no page links to it: remove the entry"
            fail=1
        else
            echo "pending (links-pending.txt): $p, linked but not in this tree yet"
        fi
    done
    [ "$fail" -eq 0 ] && echo "links: $n links in ${#pages[@]} pages checked"
    return "$fail"
}

# The shim's CMakeLists must link cchan_coll outside any if(): a shim without the collectives
# would forward everything to NCCL and look like it works. With the built library, its dynamic
# section must need libcchan_coll.
check_shim() {
    local src=$1 lib=${2:-} cm=$1/src/nccl/CMakeLists.txt fail=0
    if [ ! -f "$cm" ]; then
        echo "FAIL: $cm not found"
        return 1
    fi
    if ! awk '
        { line = $0; sub(/#.*/, "", line) }
        line ~ /^[[:space:]]*(if|foreach|while|function|macro)[[:space:]]*\(/ { depth++ }
        line ~ /^[[:space:]]*(endif|endforeach|endwhile|endfunction|endmacro)[[:space:]]*\(/ { depth-- }
        depth == 0 && line ~ /target_link_libraries[[:space:]]*\([[:space:]]*cchan_nccl[[:space:]].*cchan(_|::)coll/ { found = 1 }
        END { exit !found }' "$cm"; then
        echo "FAIL: $cm does not link cchan_nccl to cchan_coll outside every if()/function():" \
            "the shim must not build without the collectives"
        fail=1
    fi
    if [ -n "$lib" ]; then
        if ! command -v readelf >/dev/null 2>&1; then
            echo "note: readelf not found; the built library's dependencies were not read"
        elif ! readelf -d "$lib" | grep -qE 'NEEDED.*\[libcchan_coll\.so'; then
            echo "FAIL: $lib does not need libcchan_coll.so (readelf -d)"
            fail=1
        fi
    fi
    [ "$fail" -eq 0 ] && echo "shim: links cchan_coll unconditionally${lib:+; $(basename "$lib") needs libcchan_coll.so}"
    return "$fail"
}

# Each check on a throw-away repository: clean, then broken in each way it must catch.
self_test() {
    local t fail=0
    t=$(mktemp -d) || return 1
    trap 'rm -rf "$t"' RETURN
    mkdir -p "$t/repo/docs" "$t/repo/src/nccl" "$t/hyg"
    cp "$0" "$t/hyg/check-repo.sh"
    : >"$t/hyg/history-allowlist.txt"
    : >"$t/hyg/links-pending.txt"
    local r=$t/repo chk=$t/hyg/check-repo.sh
    git -C "$r" init -q
    printf '# cchan\n\nSee [the guide](docs/guide.md#a-heading) and [api](docs/api.md).\n' >"$r/README.md"
    printf '# Guide\n\n## A heading\n\nStart 2 ranks with cchan-run -n 2; RUNS 100000 is a keyword.\n' >"$r/docs/guide.md"
    printf '# History\n\n## 0.1\n\n- measured in session 5, run 9 (issue 7)\n' >"$r/CHANGELOG.md"
    printf 'add_library(cchan_nccl SHARED shim.c)\ntarget_link_libraries(cchan_nccl PRIVATE cchan_coll)\n' \
        >"$r/src/nccl/CMakeLists.txt"
    echo 'docs/api.md' >"$t/hyg/links-pending.txt"
    git -C "$r" add -A
    expect() { # expect <rc 0|1> <description> <check> [args]
        local want=$1 what=$2 rc
        shift 2
        bash "$chk" "$@" >"$t/out" 2>&1
        rc=$?
        if { [ "$want" = 0 ] && [ "$rc" != 0 ]; } || { [ "$want" = 1 ] && [ "$rc" != 1 ]; }; then
            echo "self-test FAIL: $what: exit $rc, expected $want"
            sed 's/^/    /' "$t/out"
            fail=1
        else
            echo "self-test ok: $what"
        fi
    }
    expect 0 "clean tree passes history" history "$r"
    expect 0 "clean tree passes links" links "$r"
    expect 0 "clean tree passes shim" shim "$r"
    printf 'rank 1 runs 0.1.0\n' >>"$r/docs/guide.md"
    git -C "$r" add docs/guide.md
    expect 0 "a version number is not history" history "$r"
    for bad in 'measured in Session 4' 'run 9.' 'see issue #3' 'runs 6 and 7 agree' 'details in ../shared/x.md' \
        'as DESIGN.md says'; do
        printf '%s\n' "$bad" >"$r/docs/bad.md"
        git -C "$r" add docs/bad.md
        expect 1 "history catches '$bad'" history "$r"
    done
    echo docs/bad.md >"$t/hyg/history-allowlist.txt"
    expect 0 "an allowlisted file passes" history "$r"
    git -C "$r" rm -q -f docs/bad.md
    expect 1 "a stale allowlist entry fails" history "$r"
    : >"$t/hyg/history-allowlist.txt"
    printf '# Orphan\n' >"$r/docs/orphan.md"
    git -C "$r" add docs/orphan.md
    expect 1 "links catches a page the README does not link" links "$r"
    git -C "$r" rm -q -f docs/orphan.md
    cp "$r/README.md" "$t/README.md"
    printf 'see [x](docs/missing.md)\n' >>"$r/README.md"
    expect 1 "links catches a missing page" links "$r"
    cp "$t/README.md" "$r/README.md"
    printf 'see [x](docs/guide.md#no-such-heading)\n' >>"$r/README.md"
    expect 1 "links catches a missing anchor" links "$r"
    cp "$t/README.md" "$r/README.md"
    printf '# API\n' >"$r/docs/api.md"
    expect 1 "a pending page that exists fails" links "$r"
    rm "$r/docs/api.md"
    printf 'add_library(cchan_nccl SHARED shim.c)\nif(HAVE_COLL)\n  target_link_libraries(cchan_nccl PRIVATE cchan_coll)\nendif()\n' \
        >"$r/src/nccl/CMakeLists.txt"
    expect 1 "shim catches a conditional link" shim "$r"
    return "$fail"
}

case ${1:-} in
history) check_history "$2" ;;
links) check_links "$2" ;;
shim) check_shim "$2" "${3:-}" ;;
self-test) self_test ;;
*)
    echo "usage: $0 history|links SOURCE_DIR | shim SOURCE_DIR [LIBCCHAN_NCCL] | self-test" >&2
    exit 2
    ;;
esac
