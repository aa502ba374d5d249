"""What NVIDIA's XID codes mean, in the words a data scientist needs, and which ones are the
hardware's fault (the GPU time after them is not billed)."""

from __future__ import annotations

# Hardware faults: the GPU, not the program, failed. GPU time after one is credited.
HARDWARE_XIDS = frozenset({48, 63, 64, 74, 79, 92, 94, 95})

MEANINGS: dict[int, str] = {
    13: "graphics engine exception: usually the application's own fault (an illegal memory access, for instance)",
    31: "GPU memory page fault: usually the application's own fault (an illegal address)",
    43: "GPU stopped processing: usually the application's own fault, its context was killed",
    45: "preemptive cleanup after an earlier error (the driver ended the application's context)",
    48: "double-bit ECC error: the GPU's memory is faulty",
    61: "internal microcontroller breakpoint: a driver or firmware problem",
    62: "internal microcontroller halt: a driver or firmware problem",
    63: "ECC page retirement or row remapping recorded: the GPU's memory is degrading",
    64: "ECC page retirement or row remapping failed: the GPU's memory is faulty",
    68: "video processor exception",
    69: "graphics engine class error",
    74: "NVLink error: the link between GPUs failed",
    79: "the GPU fell off the bus: it no longer answers",
    92: "high single-bit ECC error rate: the GPU's memory is degrading",
    94: "contained ECC error: the GPU's memory is faulty (the application was stopped)",
    95: "uncontained ECC error: the GPU's memory is faulty and the GPU needs a reset",
    119: "GSP RPC timeout: the GPU's firmware stopped answering",
    120: "GSP error: the GPU's firmware failed",
}


def xid_meaning(code: int) -> str:
    return MEANINGS.get(code, "an XID the portal has no description of (see NVIDIA's XID catalog)")


def is_hardware_xid(code: int) -> bool:
    return code in HARDWARE_XIDS
