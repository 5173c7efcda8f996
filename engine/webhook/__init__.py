"""``qosd webhook``: the validating admission webhook for QoSPolicy resources.

A bad QoSPolicy that reaches the API server is otherwise found only on the nodes, one Event and one
status condition at a time, after every node has tried and rejected it. The webhook runs the same
checks as ``qosd validate`` (engine.config.pipeline.validate and the lints) when the policy is
created or updated, and refuses it with the located problems (QoSPolicy/<name> and the JSON path
into the submitted object, and the hint) in the API server's answer to ``kubectl apply``.

Parts: check (what a policy is validated against, and which problems are the submission's),
review (AdmissionReview in, AdmissionReview out; pure), tls (the serving certificate, reloaded when
its Secret changes), server (HTTPS: /validate, /healthz, /readyz), command and options (the CLI).
"""
