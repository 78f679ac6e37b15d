"""A process pool for hang-prone, CPU-heavy scoring: one hand-off per group, deadlines in each item's own
time, and a fair share of the workers for every request.

Why not ``concurrent.futures.ProcessPoolExecutor``: it cannot cancel a running task, so one hung sympy call
holds a worker forever, and one crashed worker breaks the whole executor. Here every worker is a separate
process with its own socket pair, driven by its own thread in the server process, so that

* **nothing blocks the event loop.** Spawning a worker, handing it work and reading its results happen in
  that thread; the loop only queues jobs and receives one callback per finished job (a group of items, not
  an item). A stopped (``SIGSTOP``) worker or forkserver holds up its own thread and nothing else.
* **a deadline is the item's own time.** The worker arms a soft deadline per item on its *CPU time*
  (``ITIMER_PROF``; on wall time with ``soft_clock="wall"``, for handlers that run many threads or wait on a
  GPU): a slow sympy call becomes ``timeout``. The deadline arrives as an exception at whatever line the
  handler is on: inside an import, a cache update or a bare ``except:`` of sympy, antlr or mpmath (which
  swallows it, after which the handler goes on to a result of its own). Either way the process's state can
  no longer be trusted (a half-imported mpmath, a cached "no parse" served to every later item in
  microseconds as a wrong answer), so the item is ``timeout`` and the worker answers for what it finished
  and leaves; a fresh one from the forkserver takes its place. The hard deadline
  (``timeout_s + grace_s``) is kept by the driver thread from the worker's own clock: the wall time since
  the worker started the item, less the time it waited for a CPU (``/proc/PID/schedstat``). Only then is the
  worker killed and replaced. A late event loop, a loaded machine or a busy neighbour never turns a verdict
  into ``timeout``, and results a worker sent are never discarded for lateness.
* **a job is a group.** :meth:`WorkerPool.run` hands over many payloads at once (a group's completions,
  which share a reference the worker parses once); the worker sends results back in bulk, flushing every
  few milliseconds so that a worker killed mid-job loses little. When a worker dies or is killed, the item
  it was on gets ``crashed`` or ``timeout`` and the job's other unfinished items go back to the queue.
* **requests share the workers fairly.** Each request opens a :class:`Flow`; a free worker takes the next
  job of the flow that has had the least worker time (start-time fair queueing: a new flow starts level
  with the others, it gets no credit for the time before it came). A worker whose item has run longer than
  ``slow_item_s`` is *slow*: it is told to stop after that item (the rest of its job goes back to the
  queue), and an extra worker takes its place meanwhile, up to ``max_extra_workers``; the slow worker
  leaves when its item ends. A slow item thus shares the CPU with the others (the kernel time-slices
  them) instead of holding a worker that another request waits for, and its deadline, in its own time,
  does not shrink for the sharing. An item whose request has ended is not worth that CPU: once it has run
  a quarter of a second, its worker is killed.
* **a pool that cannot start says so.** A worker that dies before it is ready is started again with
  exponential backoff; :attr:`WorkerPool.health` turns false while no worker can start, so ``/healthz``
  fails and an orchestrator restarts the process.

Workers come from a ``forkserver`` that pre-imports the handler's module (and ``preload``), so a
replacement is ready in milliseconds instead of re-importing sympy.

Where the parts live:

* :mod:`.worker`: the worker process (load the handler, run a job's items under the soft deadline).
* :mod:`.fair_queue`: the pure fair-share queue (flows, pieces, which piece goes next), no processes and no
  clock of its own.
* :mod:`.supervisor`: the driver threads (start, watch, kill and replace workers, back-off, slow workers,
  health).
* :mod:`.facade`: :class:`WorkerPool`, the async interface that ties them.

Every public method is called from one asyncio event loop (the server's); the driver threads talk to it
with ``call_soon_threadsafe`` and share state under one lock.
"""

from reward_server.engine.pool.facade import WorkerPool
from reward_server.engine.pool.fair_queue import Flow, TaskOutcome, TaskStatus

__all__ = ["Flow", "TaskOutcome", "TaskStatus", "WorkerPool"]
