import re
# Channel device permissions as created by a real prolog (sim daemon). For each probe a child
# process drops to (uid, gid, groups) and tries open(O_RDONLY): EACCES = refused by permissions;
# ENXIO/ENODEV = permission GRANTED (major 234 has no driver on this machine).
import errno, json, os, stat
from world import World

def try_open(path, uid, gid, groups):
    r, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.setgroups(groups); os.setgid(gid); os.setuid(uid)
            fd = os.open(path, os.O_RDONLY)
            res = "OPENED"
        except OSError as e:
            res = errno.errorcode[e.errno]
        os.write(wfd, res.encode()); os._exit(0)
    os.close(wfd); os.waitpid(pid, 0)
    res = os.read(r, 100).decode(); os.close(r)
    return res + (" (granted)" if res in ("ENXIO", "ENODEV", "OPENED") else " (refused)")

def scenario(name, mode, env_extra, uid="65534", probes=()):
    w = World(f"r11-{name}", jobs={4242: {"NodeList": "tray01"}}, sim=True,
              extra_cfg="")
    text = w.cfg.read_text().replace('[channels]\nmode = "imexctl"',
                                     f'[channels]\nmode = "imexctl"\nfile_mode = "{mode}"')
    w.cfg.write_text(text)
    p = w.run("prolog", env=w.env(4242, uid=uid, **env_extra))
    if not w.leftovers()["channels"]:   # updated: a group-readable mode is now refused
        print(f"[{name}] prolog rc={p.returncode}: no channel made | "
              f"{(p.stderr.strip().splitlines() or [''])[-1][:140]}")
        return
    ch = w.root / "dev/channels" / w.leftovers()["channels"][0]
    st = os.lstat(ch)
    print(f"[{name}] prolog rc={p.returncode} {ch.name}: uid={st.st_uid} gid={st.st_gid} "
          f"mode={stat.S_IMODE(st.st_mode):04o} char={stat.S_ISCHR(st.st_mode)}")
    for label, (u, g, gs) in probes:
        print(f"    {label:52} -> {try_open(str(ch), u, g, gs)}")
    w.run("epilog", env=w.env(4242, uid=uid, **env_extra))

scenario("default-0600", "0600", {}, probes=[
    ("job owner uid 65534", (65534, 65534, [65534])),
    ("other uid 5000", (5000, 5000, [5000])),
    ("other uid 5000 in group 65534", (5000, 5000, [65534]))])
scenario("0640-shared-primary-group", "0640", {"SLURM_JOB_GID": "100"}, probes=[
    ("job owner uid 65534", (65534, 100, [100])),
    ("OTHER user uid 5000, member of 'users' (100)", (5000, 100, [100])),
    ("other uid 5001 not in group 100", (5001, 5001, [5001]))])
scenario("0640-unknown-uid-gid-fallback", "0640", {}, uid="4711", probes=[
    ("job owner uid 4711", (4711, 4711, [4711])),
    ("OTHER user uid 5002 whose group is gid 4711", (5002, 4711, [4711]))])

# The validator's own advice: "use 0600 or 0660" -- but 0660 is refused by the same check.
w = World("r11-0660-advice", jobs={})
w.cfg.write_text(w.cfg.read_text().replace('[channels]\nmode = "imexctl"', '[channels]\nmode = "imexctl"\nfile_mode = "0660"'))
c = w.run("config", "check")
print("config check with file_mode 0660: rc", c.returncode, "|", c.stderr.strip())
for m in ("0000", "0200", "0400", "0440", "0640", "0700"):
    w.cfg.write_text(re.sub(r'file_mode = "\d+"', f'file_mode = "{m}"', w.cfg.read_text()))
    c = w.run("config", "check")
    print(f"file_mode {m}: rc {c.returncode}")
