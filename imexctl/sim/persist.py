"""The simulated ``persist.dat``: detects an unclean stop and who must reconnect.

One JSON file per (node-list digest, node id) under the sim run dir. Written at start,
updated whenever a peer connects (it may have imported memory), removed on clean
shutdown. Found at start => the previous instance with the same node list died
uncleanly; its recorded importers must reconnect before the daemon is READY
(IMEX_WAIT_FOR_QUORUM=RECOVERY). A different node list has a different key, so its
file is simply not found ("persist.dat is discarded").
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path


class PersistFile:
    def __init__(self, run_dir: Path, digest: str, node_id: int):
        self.path = run_dir / f"persist-{digest}-node{node_id}.json"
        self.digest = digest
        self.node_id = node_id
        self.importers: dict[int, str] = {}
        self.lock = threading.Lock()

    def read_previous(self) -> dict[int, str] | None:
        """Importers left by an unclean stop, {} if none recorded, None if no file."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}
        if data.get("key") != self.digest:
            return None
        return {int(k): str(v) for k, v in (data.get("importers") or {}).items()}

    def write(self) -> None:
        with self.lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
            tmp.write_text(json.dumps({"key": self.digest, "node": self.node_id,
                                       "pid": os.getpid(),
                                       "importers": {str(k): v for k, v in
                                                     sorted(self.importers.items())}}) + "\n",
                           encoding="utf-8")
            os.replace(tmp, self.path)

    def add_importer(self, idx: int, host: str) -> None:
        if self.importers.get(idx) != host:
            self.importers[idx] = host
            self.write()

    def remove(self) -> None:
        with self.lock:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
