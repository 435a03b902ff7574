"""NCCL's own corrections to its tuner's estimate, and NVLSTree's pipeline unit (NVIDIA/nccl, cited per constant).

The model's time for each algorithm x protocol stands in for NCCL's estimate when auto picks one; NCCL corrects
that estimate in ways its bandwidth and latency tables do not carry (the tree's per-size factor, the ring's
plateau), and NVLSTree's chunking sets how coarse its pipeline is, so these live beside the model, not in it.
"""

from __future__ import annotations

# NVLS channels on Hopper: src/transport/nvls.cc NVLS_NCHANNELS_SM90 (NCCL's log: "NVLS multicast support is
# available on dev N (NVLS_NCHANNELS 16)"); 32 on Blackwell across nodes, not modelled here.
NVLS_CHANNELS = 16
# NVLSTree moves far larger pipeline units: each of its nvlsChannels (16 on Hopper, src/transport/nvls.cc
# NVLS_NCHANNELS_SM90) works on nHeads (one per NIC) chunks at once, chunkSize from src/enqueue.cc calcCollChunking
# (NVIDIA/nccl 2.26.2 and 2.30.7 alike): NCCL_NVLS_CHUNKSIZE (128 KiB), at most 64 KiB from 4 nodes
# (nvlsTreeMaxChunkSize), halved towards 32 KiB as the message falls below 16, 4 and 1 x (channels x heads x chunk).
# A chunk passes the NVLS stage twice (scatter and reduce in, multicast and gather out, src/device/all_reduce.h) and
# every tree level twice (up, then down), so the pipeline's fill is those passes at one unit each: measured 2-node
# H100 runs carry about 130-200 us above NCCL's 67 us NVLSTree latency from 64 MB up, which this is.
NVLS_CHUNK_BYTES = 128 << 10
NVLS_TREE_MAX_CHUNK_4_NODES = 64 << 10


def nvls_tree_unit_bytes(size: float, nodes: int, heads: int) -> float:
    """NCCL's NVLSTree pipeline unit: chunkSize (calcCollChunking's rule) x nvlsChannels x nHeads."""
    ops = NVLS_CHANNELS * max(heads, 1)
    chunk = min(NVLS_CHUNK_BYTES, NVLS_TREE_MAX_CHUNK_4_NODES if nodes >= 4 else NVLS_CHUNK_BYTES)
    for times, limit in ((32, 262144), (16, 131072), (4, 65536), (1, 32768)):
        if size < times * ops * chunk and chunk > limit:
            chunk = limit
    return float(chunk * ops)


# NCCL's tuner does not pick by its bandwidth and latency tables alone (src/graph/tuning.cc ncclTopoGetAlgoTime,
# NVIDIA/nccl 2.21.5 to 2.30.7, unchanged): "Trees are not perfectly sticking to the model for medium sizes", so a
# tree all-reduce's bandwidth is multiplied by treeCorrectionFactor[protocol][log2(bytes / 64)] (powers of two from
# 64 B, the last applied 256 MB), and a multi-node Simple ring all-reduce's latency by 1.4 on Ampere and later
# ("Plateau effect of ring", once a rank's share per channel is 64 B or more). Both shape which algorithm NCCL
# runs, so the tuner's estimate (collectives._timed) carries them. The tree's factor is in the time too (since
# 2026-11-25): NCCL states it as how measured trees behave, and on the public multi-node runs the model's tree was
# 20-50% fast from 1 to 32 MB without it; the ring's plateau stays in the pick only.
TREE_CORRECTION = {  # LL, LL128, Simple rows of treeCorrectionFactor, index log2(bytes >> 6) from 0 to 22
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}
RING_PLATEAU = 1.4


# NCCL's per-channel bandwidth ceilings (src/graph/tuning.cc ncclTopoTuneModel, NVIDIA/nccl 2.26.2, the release
# of the validation's runs; the Volta/Ampere/Hopper rows unchanged from 2.20.3 to 2.30.7, Blackwell's 2 x Hopper
# in 2.26.2 and retuned since): GB/s per channel of the searched graph, by 1 node / 2 nodes / more. A ring
# under LL128 reaches at most graph channels x perChMaxRingLL128Bw of bus bandwidth, a tree all-reduce
# perChMaxTreeBw (and perChMaxTreeLL128Bw under LL128) x graph channels of bus bandwidth, half that of algorithm
# bandwidth ("Convert bus BW to algorithm BW": ratio .5 for the tree). NCCL sets them from its own measurements;
# until 2026-11-25 rltrace used only LL's ceiling (LL_MAX_BUSBW) and these not at all.
PER_CHANNEL_MAX_GBPS: dict[str, dict[str, tuple[float, float, float]]] = {
    "ring_ll128": {"volta": (20.0, 20.0, 20.0), "ampere": (20.0, 20.0, 20.0), "hopper": (36.7, 36.7, 36.7),
                   "blackwell": (73.4, 73.4, 73.4)},
    "tree_ll128": {"volta": (20.0, 20.0, 20.0), "ampere": (20.0, 20.0, 20.0), "hopper": (36.7, 36.7, 29.0),
                   "blackwell": (73.4, 73.4, 58.0)},
    "tree": {"volta": (26.5, 18.5, 10.0), "ampere": (24.0, 23.6, 17.8), "hopper": (38.7, 41.4, 36.0),
             "blackwell": (77.4, 82.8, 72.0)},
}
# The graph's channels: NCCL's search places one channel on each NIC (search.cc, up to MAXCHANNELS / 2 = 16 per
# graph); the doubling that runs 2 channels a NIC (connect.cc, CHANNELS_PER_NIC) leaves graphs[a]->nChannels as
# searched, and the ceilings multiply that count. A public 2 x 8 H100 NCCL 2.26.2 log (NVIDIA/nccl-tests issue
# #319) shows it: "16 coll channels", channels 8-15 repeating 0-7 of an 8-channel search on 8 NICs.
SEARCH_MAX_CHANNELS = 16


def channel_ceilings_gbps(arch: str, nodes: int, nics: int) -> tuple[float, float, float]:
    """(ring LL128 bus bandwidth, tree bus bandwidth, tree LL128 bus bandwidth) ceilings in GB/s of a collective
    over ``nodes`` nodes of ``nics`` NICs each on an ``arch`` GPU (inf where the architecture has no row)."""
    if arch not in PER_CHANNEL_MAX_GBPS["tree"]:
        return (float("inf"),) * 3
    index = 0 if nodes <= 1 else 1 if nodes == 2 else 2
    channels = min(max(nics, 1), SEARCH_MAX_CHANNELS)
    ring_ll128, tree_ll128, tree = (PER_CHANNEL_MAX_GBPS[k][arch][index] for k in ("ring_ll128", "tree_ll128", "tree"))
    # NCCL caps the tree first and then scales LL128's bandwidth by 120/128 (capped again by its own ceiling)
    return channels * ring_ll128, channels * tree, channels * min(tree * 120 / 128, tree_ll128)


def tree_correction(protocol: str, size: float) -> float:
    """NCCL's treeCorrectionFactor for a tree all-reduce of ``size`` bytes under ``protocol`` (1 outside the table)."""
    log_size = int(size) >> 6
    index = log_size.bit_length() - 1 if log_size > 0 else -1
    row = TREE_CORRECTION[protocol]
    return row[index] if 0 <= index < len(row) else 1.0


# NCCL's tree all-reduce is pipelined per channel in chunks (src/device/all_reduce.h runTreeSplit: a chunk is reduced
# up the chain and the tree, then broadcast down), and a level that must hold a whole chunk before passing it on adds
# one chunk's time to the last chunk's way: a fill on top of the bandwidth term, which NCCL's tuner leaves out. Under
# Simple every level holds the whole chunk (src/device/prims_simple.h: the receiver waits for the slice's tail, and
# the tree's slice is its chunk, ProtoSimple<1, 1>); under LL and LL128 a GPU forwards each line as its flag lands
# (prims_ll.h, prims_ll128.h), so inside a node no level holds a chunk, but the network's proxy posts a step only
# once all of it is written (src/transport/net.cc sendProxyProgress), so every tree level between nodes, up and down,
# does. The chunk is one step of the protocol's buffer (src/enqueue.cc calcCollChunking, NVIDIA/nccl 2.21.5 to 2.26.6:
# chunkSteps 1 outside the Simple ring): NCCL_STEPS = 8 steps (src/include/device.h) of DEFAULT_BUFFSIZE 4 MiB for
# Simple (src/include/comm.h), of NCCL_LL_LINES_PER_THREAD x NCCL_LL_MAX_NTHREADS = 8 x 512 lines of 16 bytes for LL
# (half of it data), of NCCL_LL128_ELEMS_PER_THREAD x NCCL_LL128_MAX_NTHREADS = 120 x 640 words for LL128 (15 of every
# 16 words data); LL128's chunk is halved towards 128 KiB and then 32 KiB while a channel holds fewer chunks than
# (1 + log2(nodes) + ppn / 10) x 64 (then x 16) / ppn.
NCCL_STEPS = 8
# NCCL's search places one channel on each NIC, and src/graph/connect.cc ncclTopoPostset then doubles every channel
# ("Duplication should be complete now: nChannels = comm->nChannels = std::min(MAXCHANNELS,nChannels*2)").
CHANNELS_PER_NIC = 2
STEP_CHUNK_BYTES = {"Simple": (4 << 20) // NCCL_STEPS,
                    "LL": 8 * 512 * 16 // 2,
                    "LL128": 120 * 640 * 8 // 16 * 15}


def tree_unit_bytes(protocol: str, size: float, nodes: int, ppn: float, channels: int) -> float:
    """NCCL's tree all-reduce pipeline unit: calcCollChunking's chunk x ``channels`` (every channel moves one chunk
    at once)."""
    chunk = STEP_CHUNK_BYTES[protocol]
    if protocol == "LL128":
        steps = 1 + (max(nodes, 1).bit_length() - 1) + 0.1 * ppn  # log2i(nodes): log2 rounded down
        for times, limit in ((64, 131072), (16, 32768)):
            while int(size) // (channels * chunk) < steps * times / ppn and chunk > limit:
                chunk //= 2
    return float(chunk * channels)
