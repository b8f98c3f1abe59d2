#!/usr/bin/env bash
# Checks commit messages against docs/contributing.md ("Commits"):
#   - the subject is under 72 characters and starts with `subsystem: `
#     (lower case, digits, and . _ / + -: `cpu/decode: `, `ci: `, `docs: `);
#   - a blank line, then a body that says why (at least one line).
# Merge, Revert, fixup! and squash! subjects that git writes are let through.
# Not run by CI: older history predates the rule.
#
# usage: tools/dev/check_commit_msg.sh FILE            a message file; as a
#            commit-msg hook: cp tools/dev/check_commit_msg.sh \
#                "$(git rev-parse --git-common-dir)/hooks/commit-msg"
#        tools/dev/check_commit_msg.sh --range REVS    each commit of REVS
#            (git rev-list syntax, e.g. main..HEAD)
# Exits 1 if a message breaks a rule, 2 on a usage error.
set -uo pipefail

# check NAME < message: prints each problem as "NAME: problem"; returns 1 if any.
check() {
    local name=$1 subject="" second="" body=0 n=0 line bad=0
    while IFS= read -r line || [ -n "$line" ]; do
        # what git strips: comments, and everything below the scissors line
        [[ $line == "# ------------------------ >8 ------------------------"* ]] && break
        [[ $line == "#"* ]] && continue
        n=$((n + 1))
        if [ $n = 1 ]; then subject=$line
        elif [ $n = 2 ]; then second=$line
        elif [[ $line =~ [^[:space:]] ]]; then body=1
        fi
    done
    case $subject in "Merge "* | "Revert "* | "fixup! "* | "squash! "*) return 0 ;; esac
    if [ ${#subject} -ge 72 ]; then
        echo "$name: the subject is ${#subject} characters; keep it under 72: $subject"
        bad=1
    fi
    if ! [[ $subject =~ ^[a-z0-9_./+-]+:\ [^[:space:]] ]]; then
        echo "$name: the subject does not start with 'subsystem: ' (e.g. 'cpu/decode: ...'): $subject"
        bad=1
    fi
    if [[ $second =~ [^[:space:]] ]]; then
        echo "$name: the second line must be blank (the subject is one line)"
        bad=1
    elif [ $body = 0 ]; then
        echo "$name: no body; say why the change is made (and what was measured)"
        bad=1
    fi
    return $bad
}

case ${1:-} in
--range)
    [ $# = 2 ] || { echo "usage: $0 --range REVS" >&2; exit 2; }
    commits=$(git rev-list --reverse "$2") || exit 2
    status=0
    for c in $commits; do
        git log -1 --format=%B "$c" | check "$(git log -1 --format=%h "$c")" || status=1
    done
    exit $status
    ;;
"" | -*)
    echo "usage: $0 FILE | --range REVS" >&2
    exit 2
    ;;
*)
    [ -r "$1" ] || { echo "$0: cannot read '$1'" >&2; exit 2; }
    check "commit message" <"$1"
    ;;
esac
