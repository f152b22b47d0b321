"""The simulated ``persist.dat``: one file per host, as ``/var/run/nvidia-imex/persist.dat``.

It holds "a key generated from nodes_config and a list of Node #: ip address of the
imported nodes" (IMEX guide). Written at start with the current key, updated whenever a
peer connects (it may have imported memory), rewritten with the key only on a clean
shutdown (no outstanding importers). Found at start with the same key and importers =>
the previous instance died uncleanly; those importers must reconnect before the daemon is
READY (IMEX_WAIT_FOR_QUORUM=RECOVERY). A different key (the node list changed, e.g. an
intermediate job with other trays) => the file is discarded.

The host is the sim run dir (``IMEXCTL_SIM_RUN_DIR``): trays that share one run dir
share one persist.dat, exactly like daemons started one after another on one host.
"""

from __future__ import annotations

import json
import os

FILE_NAME = "persist.dat"


class PersistFile:
    def __init__(self, run_dir: str, digest: str, node_id: int):
        self.path = os.path.join(run_dir, FILE_NAME)
        self.digest = digest
        self.node_id = node_id
        self.importers: dict[int, str] = {}

    def read_previous(self) -> tuple[str, dict[int, str]]:
        """("missing" | "other-key" | "same-key", importers left by the last instance)."""
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.loads(f.read())
        except FileNotFoundError:
            return "missing", {}
        except (OSError, ValueError):
            return "other-key", {}
        if not isinstance(data, dict) or data.get("key") != self.digest:
            return "other-key", {}
        try:
            return "same-key", {int(k): str(v)
                                for k, v in (data.get("importers") or {}).items()}
        except (AttributeError, ValueError):
            return "other-key", {}

    def write(self) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(json.dumps({"key": self.digest, "node": self.node_id, "pid": os.getpid(),
                                "importers": {str(k): v for k, v in
                                              sorted(self.importers.items())}}) + "\n")
        os.replace(tmp, self.path)

    def add_importer(self, idx: int, host: str) -> None:
        if self.importers.get(idx) != host:
            self.importers[idx] = host
            self.write()

    def clean_shutdown(self) -> None:
        self.importers = {}
        self.write()
