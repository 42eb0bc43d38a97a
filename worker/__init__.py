"""VM-host worker: environment providers, guest agent, episode runner, judge and group jobs.

Lands with the worker issue; it speaks to the master only over HTTP (coda.clients.master).
"""
