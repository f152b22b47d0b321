# Sourced by scripts/test and scripts/demo, from the checkout's top directory.
#
# The harness runs code from the checkout as unprivileged users too: the job's user (the
# TaskProlog, job scripts) and SlurmUser (PrologSlurmctld). A clone they cannot reach,
# e.g. in root's home (mode 0700), runs from a copy they can: /var/tmp/imexctl-checkout/
# <hash of the clone's path>, refreshed from the clone at every run (its own .venv and
# .cache are kept between runs, so only the first run builds them).
run_where_reachable() {   # run_where_reachable SCRIPT ARGS...: exec SCRIPT from a reachable copy if needed
  local script=$1 here dest top=/var/tmp/imexctl-checkout
  shift
  here=$(pwd -P)
  [[ $(id -u) -eq 0 ]] || return 0           # not root: no harness, nothing to relocate
  if runuser -u nobody -- test -r "$here/pyproject.toml" 2>/dev/null; then
    return 0
  fi
  dest=$top/$(printf '%s' "$here" | sha256sum | cut -c1-16)
  echo "$script: $here is not reachable by unprivileged users (the job's user, SlurmUser);" \
       "running from a copy in $dest" >&2
  mkdir -p "$dest"
  chmod 0755 "$top" "$dest"
  find "$dest" -mindepth 1 -maxdepth 1 ! -name .venv ! -name .cache -exec rm -rf {} +
  tar -C "$here" --exclude=./.venv --exclude=./.cache -cf - . | tar -C "$dest" -xf -
  if [[ -d $here/.cache && ! -d $dest/.cache ]]; then
    cp -a "$here/.cache" "$dest/.cache"
  fi
  if [[ -z ${IMEXCTL_SHARED_DIR:-} && -d $here/../shared ]]; then   # vendored sources (pyslurm)
    IMEXCTL_SHARED_DIR=$(cd "$here/../shared" && pwd -P)
    export IMEXCTL_SHARED_DIR
  fi
  cd "$dest"
  exec "scripts/$script" "$@"
}
