"""``qosd run``: the node daemon's tick loop, policy generations, state, audit log, metrics and health.

One tick is the same pure path as ``qosd eval`` (``engine.tick.run_tick``); the daemon only adds what a
long-running process needs around it:

- **Generations.** Rule files are re-read when their fingerprint (path, inode, size, mtime) or the
  node's labels and sizes change. A new generation that fails to load, render, validate or compile is
  rejected as a whole and the last good one keeps running; the failure is logged with its locations
  and counted. Nothing is re-parsed on a steady tick.
- **Write-ahead state.** The engine state after a tick (sustain timers, latches, cooldowns, pods being
  evicted) is written atomically *before* the tick's operations are executed. After a ``kill -9``
  anywhere in a tick the restarted daemon either never saw the decision (and makes it again, against
  freshly observed cgroups, so writes are not repeated) or already has the eviction on record (and
  counts the pod as released instead of evicting it twice).
- **When the state file cannot be saved** (full or read-only file system): operations that set a
  value (cgroup and resctrl writes, taints, node conditions, published resources) and Events are
  still applied, because repeating them after a restart is harmless (a value set again, a duplicate
  notice). Evictions are held back (``held`` in the audit record, with the reason) and their rule's
  firing is not recorded, so they are decided again on the first tick whose save succeeds: an
  eviction is never requested without its write-ahead record. Counted in
  ``qosd_state_write_failures_total``, reported on ``/readyz`` and logged at most every
  REPORT_SECONDS.
- **Signals.** SIGTERM and SIGINT only set a flag: the tick in progress finishes, its whole plan is
  applied, then the loop exits. A plan is never left half-applied by a signal. SIGQUIT stops the
  same way after logging every thread's stack (a daemon that seems stuck says where; no core dump,
  which a DaemonSet would only restart from). SIGHUP re-reads the rule files through the one reload
  path (the daemon convention; a save the file watcher missed, or ``--no-watch``). SIGUSR1 logs the
  generation, health, readiness and engine state and changes nothing. Each is logged.
- **Audit mode** (``--mode audit``, what the kustomize base installs): the plan is made as in enforce
  mode, then only its Events are sent (each eviction becomes a ``WouldEvict`` Event on the Node); every
  other operation is held with its reason, and the executor wired for it has no other adapter.
- **Audit log.** JSON Lines, one Evaluation document per tick in which something was decided (an
  operation, something held back, a skipped rule or a workload issue), each intent with its
  provenance, plus each operation's result. ``qosd explain`` reads it.
- **Metrics and health** on one HTTP port: ``/metrics`` (prometheus-client), ``/healthz`` (the loop is
  alive), ``/readyz`` (a policy is loaded and a tick completed).

The parts, one module each:

- ``loop``: the tick loop (``Daemon``); ``parts``: the protocols of what it drives;
- ``state_file``: the write-ahead state file (``--state-file``) and holding evictions back;
- ``audit``: the audit log (``--audit-log``);
- ``faults``: how a fault that repeats every tick is counted, reported and logged;
- ``metrics``: the Prometheus metrics; ``endpoints``: ``/metrics``, ``/healthz``, ``/readyz``;
- ``logs``: the JSON log lines;
- ``wiring``: start-up wiring, the one place that picks sources, adapters and services;
- ``options``: the ``qosd run`` command line.
"""
