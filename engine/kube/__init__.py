"""Kubernetes API access shared by qosd's kube sources, adapters and status writers.

``client`` loads the official client's configuration (in-cluster or a kubeconfig) and names the API
groups and resources qosd uses; ``reflector`` keeps a local copy of a resource by list+watch.
"""
