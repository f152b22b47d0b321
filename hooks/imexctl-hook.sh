# Shared by every hook in this directory (sourced, never run by Slurm): set a PATH (Slurm
# gives hooks none; imexctl calls scontrol and friends) and exec imexctl with the hook's
# subcommand. Everything else in the environment is Slurm's and is passed on untouched.
#
# Which imexctl: the checkout's .venv next to this directory, then the system installs
# /usr/local/bin/imexctl and /usr/bin/imexctl, each only when root alone can change it and
# what it runs (see trusted): otherwise that account would run code as root on every tray
# (audit S-09), or as every job's user in the TaskProlog.
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

# trusted EXE [PATH...]: EXE, with symlinks resolved, passes root_only, and so does what
# it runs from: for an executable in a venv (pyvenv.cfg above its bin/) the venv's lib/
# and a checkout's imexctl/ beside the venv. A system link into a checkout whose venv was
# refused is refused too. Shell built-ins but for readlink (links only) and root_only's stat.
trusted() {
    t=$1
    shift
    [ -L "$t" ] && t=$(readlink -f "$t")
    top=${t%/*}
    top=${top%/*}
    if [ -f "$top/pyvenv.cfg" ]; then
        set -- "$@" "$top/lib"
        [ -d "${top%/*}/imexctl" ] && set -- "$@" "${top%/*}/imexctl"
    fi
    root_only "$t" "$@"
}

SYSTEM_IMEXCTL="/usr/local/bin/imexctl /usr/bin/imexctl"

run_imexctl() {
    root=${here%/*}
    venv=$root/.venv/bin/imexctl
    for exe in "$venv" $SYSTEM_IMEXCTL; do
        [ -x "$exe" ] || continue
        if [ "$exe" = "$venv" ]; then    # also this hook directory and the checkout's package
            trusted "$exe" "$here" "$root/.venv/lib" "$root/imexctl" && exec "$exe" "$@"
        else
            trusted "$exe" && exec "$exe" "$@"
        fi
        echo "imexctl $1 hook: ignoring $exe: it, its target or what it runs from is" \
             "not root-only (see docs/install.md)" >&2
    done
    echo "imexctl $1 hook: no usable imexctl executable ($venv, /usr/local/bin, /usr/bin)" >&2
    exit 127
}
