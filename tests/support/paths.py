"""Unsafe paths a test plants where imexctl expects its own directory."""

import os

UNSAFE = ["symlink", "world-writable", "foreign-owner"]


def plant_unsafe_dir(victim, where, how):
    """Make ``where`` an unsafe directory holding ``victim``'s entries (root planted it)."""
    if how == "symlink":
        where.symlink_to(victim)
    else:
        victim.rename(where)
        if how == "world-writable":
            os.chmod(where, 0o777)
        else:
            os.chown(where, 65534, 65534)
    return where
