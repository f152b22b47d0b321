# Shared by every hook in this directory (sourced, never run by Slurm): set a PATH (Slurm
# gives hooks none; imexctl calls scontrol and friends) and exec imexctl with the hook's
# subcommand. Everything else in the environment is Slurm's and is passed on untouched.
#
# Which imexctl: the checkout's .venv next to this directory only when root alone can
# change it (it and every parent directory owned by root, not writable by group or
# others: otherwise that account would run code as root on every tray, audit S-09);
# then the system installs /usr/local/bin/imexctl and /usr/bin/imexctl.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH

# root_only PATH...: every PATH and each of its parent directories is owned by root and
# not writable by group or others (a sticky directory such as /tmp is allowed).
root_only() {
    for p in "$@"; do    # parents in shell built-ins; stat is the one process
        d=$p
        while [ -n "$d" ] && [ "$d" != "/" ]; do d=${d%/*}; set -- "$@" "${d:-/}"; done
    done
    set -- $(stat -L -c '%u %a' "$@" 2>/dev/null)    # uid mode, uid mode, ...
    [ $# -gt 0 ] || return 1
    while [ $# -ge 2 ]; do
        [ "$1" = 0 ] || return 1
        [ $((0$2 & 022)) -eq 0 ] || [ $((0$2 & 01000)) -ne 0 ] || return 1
        shift 2
    done
}

run_imexctl() {
    root=${here%/*}
    root=${root:-/}
    venv=$root/.venv/bin/imexctl
    if [ -x "$venv" ]; then
        if root_only "$venv" "$root/.venv/lib" "$root/imexctl" "$here"; then
            exec "$venv" "$@"
        fi
        echo "imexctl $1 hook: ignoring $venv: it or a parent directory is not root-only" \
             "(see docs/install.md)" >&2
    fi
    for exe in /usr/local/bin/imexctl /usr/bin/imexctl; do
        [ -x "$exe" ] && exec "$exe" "$@"
    done
    echo "imexctl $1 hook: no usable imexctl executable ($venv, /usr/local/bin, /usr/bin)" >&2
    exit 127
}
