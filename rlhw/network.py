"""Network facts shared by the drivers, the hardware probe and the smoke test.

One place for libfranka's FCI port and for "does this TCP port accept a connection?", so that the
driver's diagnosis of a failed connect, the inventory probe and the smoke test agree on both.
Standard library only: `drivers/` imports it, and `rlhw.hardware` must stay light to import.
"""

from __future__ import annotations

import socket

#: libfranka's FCI command port (TCP; state comes back over UDP); franky-sim serves it too.
FCI_PORT = 1337


def tcp_connect_problem(host: str, port: int, timeout_s: float) -> str | None:
    """None when a TCP connection to ``host:port`` opens within ``timeout_s``, else why not.

    Why a reason rather than a bool: every caller reports the failure to an operator, and "no
    answer" (cable, address, box off) and "refused" (nothing listening) point at different fixes.
    Careful with franky-sim: it takes the probe for a client and refuses connections for a few
    seconds afterwards, so probe to explain a failed connect, not before one.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except TimeoutError:
        return f"no answer on TCP {host}:{port} within {timeout_s:g} s"
    except OSError as e:
        return f"cannot connect to TCP {host}:{port}: {e.strerror or e}"
