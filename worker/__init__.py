"""VM-host worker: environment providers, guest agent, task setup and checkers (the episode
runner, judge and group jobs come with the worker issue). It speaks to the master only over HTTP
(coda.clients.master).

- ``worker.guest``: the desktop side: the agent that runs on each desktop (OSWorld's routes and
  more) and the desktop container's session; the rest is the driver side, and the two import
  nothing of each other (they share ``coda/``);
- ``worker.providers``: create, reset and hand out desktops (local, vmware, vsphere, docker);
- ``worker.tasks``: ScienceBoard / OSWorld task setup steps, checkers and app adapters.
"""

__version__ = "0.1.0"
