"""The fast path: an instance's whole queue, planned at once.

When no scheduler needs to hear about each finished request (it waits for whole steps), and the KV cache
cannot fill up, an instance's future is fixed until someone touches it: FIFO admission into free slots,
each request finishing ``remaining`` iterations after its admission. One heap pass gives every admission
and finish iteration; between consecutive such iterations the batch and the context offset are constant,
so numpy computes every segment's time with the same closed form as the per-event path, all at once. The
simulator then needs one event per drained queue instead of one per finish.

If the scheduler does touch the instance before the drain ends (a submit, an abort, a regroup), ``state_at``
gives the exact state the per-event path would have had at that moment, and the instance goes on from it.
"""

from __future__ import annotations

import heapq
import operator
from dataclasses import dataclass

import numpy as np
from rltrace.replay.costmodels.generation import GenerationCost
from rltrace.replay.costmodels.iteration import IterationModel, seconds_array
from rltrace.replay.entities.requests import Requests

MIN_REQUESTS = 16  # below this the per-event path is as fast


@dataclass(slots=True)
class Drain:
    """A planned drain: per request (in ``rids`` order) its admission and finish iterations and times."""

    rids: np.ndarray
    admit_iter: np.ndarray
    finish_iter: np.ndarray
    start_s: np.ndarray
    """time of admission (the prefill follows)"""
    first_token_s: np.ndarray
    finish_s: np.ndarray
    fresh: np.ndarray
    """admitted in this drain (not already running when it was planned)"""
    iters: np.ndarray
    """event iterations, ascending (admissions and finishes)"""
    before_s: np.ndarray
    """time each event iteration is reached, before its admissions' prefill"""
    prefill_s: np.ndarray
    batch: np.ndarray
    """running sequences after each event iteration's finishes and admissions"""
    offset: np.ndarray
    prompts: np.ndarray
    """prompt plus recompute tokens per request"""
    end_s: float
    prior_start_s: np.ndarray | None = None
    prior_admitted_s: np.ndarray | None = None
    prior_first_token_s: np.ndarray | None = None
    """the requests' start, admission and first-token times before the drain wrote its own (restored for the ones
    a cut sends back to the queue)"""


def plan(running: list[tuple[int, int]], waiting: list[int], req: Requests, *, it0: int, t0: float, offset0: int,
         max_seqs: int, kv_limit: float, model: IterationModel, cost: GenerationCost, tp: int) -> Drain | None:
    """Plan the drain of ``running`` ((finish iteration, rid) pairs) and ``waiting`` (FIFO), or None when the
    fast path does not apply (too little work, or the KV cache could bind)."""
    run_ids = [rid for _, rid in running]
    rids = np.array(run_ids + waiting, dtype=np.int64)
    n, r = len(rids), len(run_ids)
    if n < MIN_REQUESTS:
        return None
    if req.touched:  # some preemption or abort happened: read the live lists
        take = operator.itemgetter(*rids.tolist())
        p = np.add(take(req.prompt), take(req.recompute), dtype=np.int64)
        rem = np.asarray(take(req.remaining), dtype=np.int64)
    else:
        p, rem = req.prompt_arr[rids], req.output_arr[rids]
    # Worst case, the max_seqs largest requests run together at their full length: if that fits, the
    # cache never binds, so neither admission checks nor preemption can differ from FIFO-into-free-slots.
    peak = p + rem
    top = np.partition(peak, n - max_seqs)[n - max_seqs:] if n > max_seqs else peak
    if top.sum() + max_seqs > kv_limit:
        return None

    # FIFO into free slots: each admission takes the slot that frees first (ties in request order).
    admit_l = [0] * n
    finish_l = [0] * n
    heap: list[tuple[int, int]] = []
    admit_of = req.admit_iter
    for i, (f, rid) in enumerate(running):
        admit_l[i] = admit_of[rid]
        heap.append((f, i))
    heapq.heapify(heap)
    remaining_l = rem.tolist()
    q = r
    while q < n and len(heap) < max_seqs:
        admit_l[q] = it0
        heapq.heappush(heap, (it0 + remaining_l[q], q))
        q += 1
    replace_top = heapq.heapreplace
    while q < n:
        f, i = heap[0]
        finish_l[i] = f
        admit_l[q] = f
        replace_top(heap, (f + remaining_l[q], q))
        q += 1
    for f, i in heap:
        finish_l[i] = f
    admit = np.array(admit_l, dtype=np.int64)
    finish = np.array(finish_l, dtype=np.int64)

    fresh = np.zeros(n, dtype=bool)
    fresh[r:] = True
    # Events: finishes (-1 sequence) then admissions (+1) at each iteration; it0 itself always starts one.
    ev_iter = np.concatenate([[it0], finish, admit[r:]])
    ev_kind = np.concatenate([[0], np.zeros(n, np.int64), np.ones(n - r, np.int64)])
    ev_db = np.concatenate([[0], -np.ones(n, np.int64), np.ones(n - r, np.int64)])
    ev_do = np.concatenate([[0], -(p - admit), (p - admit)[r:]])
    ev_tok = np.concatenate([[0], np.zeros(n, np.int64), p[r:]])
    order = np.lexsort((ev_kind, ev_iter))
    ev_iter, ev_db, ev_do, ev_tok = ev_iter[order], ev_db[order], ev_do[order], ev_tok[order]
    iters, first_idx = np.unique(ev_iter, return_index=True)
    batch = r + np.cumsum(ev_db)[np.r_[first_idx[1:] - 1, len(ev_iter) - 1]]
    offset = offset0 + np.cumsum(ev_do)[np.r_[first_idx[1:] - 1, len(ev_iter) - 1]]
    tokens = np.add.reduceat(ev_tok, first_idx)
    admitted = np.add.reduceat(ev_db > 0, first_idx)
    prefill = cost.prefill_seconds_array(tokens, admitted, tp)
    span = np.diff(iters)
    decode = seconds_array(model, batch[:-1], offset[:-1] + batch[:-1] * iters[:-1], span)
    step = prefill[:-1] + decode
    before = t0 + np.concatenate([[0.0], np.cumsum(step)])
    gi_admit = np.searchsorted(iters, admit)
    gi_finish = np.searchsorted(iters, finish)
    return Drain(rids=rids, admit_iter=admit, finish_iter=finish, start_s=before[gi_admit],
                 first_token_s=before[gi_admit] + prefill[gi_admit], finish_s=before[gi_finish], fresh=fresh,
                 iters=iters, before_s=before, prefill_s=prefill, batch=batch, offset=offset, prompts=p,
                 end_s=float(before[-1]))


@dataclass(slots=True)
class Cut:
    """The drain's state at an iteration boundary: what finished, what runs, what still waits."""

    it: int
    time_s: float
    finished: np.ndarray
    running: np.ndarray
    waiting: np.ndarray
    """boolean masks over ``Drain.rids``"""


def state_at(d: Drain, t_s: float, model: IterationModel) -> Cut:
    """Where the drain stands at the first iteration boundary at or after ``t_s`` (as the per-event path's
    ``advance_to`` would leave it: whole iterations, a pending finish left to its own event)."""
    k = int(np.searchsorted(d.before_s, t_s, side="right")) - 1  # last event iteration reached by t_s
    k = max(k, 0)
    start = d.before_s[k] + d.prefill_s[k]
    it, time_s = int(d.iters[k]), float(start)
    if k + 1 < len(d.iters) and t_s > start:
        n_max = int(d.iters[k + 1] - d.iters[k])
        batch, ctx = int(d.batch[k]), float(d.offset[k] + d.batch[k] * d.iters[k])
        n = model.iterations_within(batch, ctx, t_s - start, n_max)
        if n < n_max and start + model.seconds(batch, ctx, n) < t_s:
            n += 1
        if n >= n_max:
            n = 0  # the next boundary is the next event's own: the per-event path leaves it to that event
        it, time_s = int(d.iters[k]) + n, float(start + model.seconds(batch, ctx, n))
    # Groups up to k are processed (finishes and admissions at iters[k] included).
    processed = d.iters[k]
    finished = d.finish_iter <= processed
    admitted = (d.admit_iter <= processed) | ~d.fresh
    return Cut(it, time_s, finished, admitted & ~finished, ~admitted)
