"""``qosd simulate``: replay a trace through the daemon's own tick, with a simulated clock.

Platform teams simulate a recorded or synthetic day before a rollout. The engine is not mocked: each
sample becomes a Snapshot, ``run_tick`` evaluates and plans it exactly as the daemon would, and the
engine state is carried from tick to tick. What differs from the daemon is the world around the
engine. For delta samples the simulator plays the node and the scheduler (closed loop):

- online pods use what the trace says; batch pods wait in a queue per template (the trace's demand);
- the scheduler starts waiting batch pods while their requests fit in the reclaimed capacity qosd
  published last (under whatever names the policy's ``publishAs`` gives; read from the plan);
- pods the plan evicts are gone by the next sample, and evicted batch pods rejoin the queue after
  their template's ``requeueAfter``;
- node usage = outside-pod usage + online + static pods + running batch. Batch CPU yields to online
  CPU when the node is full (cpu.shares 2 / SCHED_IDLE); memory does not yield;
- cgroup writes the plan makes become the observed cgroup values of the next snapshot.

So rules react to what qosd decided a minute earlier. Recorded snapshot samples are replayed as they
are (open loop). Nothing here reads a clock, a file system under /sys or the network.

The parts: ``result`` (what a run reports: Options, Simulation and its numbers), ``node`` (the
simulated node and scheduler), ``run`` (the loop: one ``run_tick`` per sample), ``recorder`` (per-tick
numbers, the timeline and the summary), ``report`` (the text output), ``plot`` (the PNG), ``command``
(``qosd simulate`` and ``qosd trace``) and ``options`` (their command line).
"""
