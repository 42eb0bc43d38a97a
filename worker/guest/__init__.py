"""The guest agent: an HTTP server on the desktop it controls, speaking OSWorld's routes (so
OSWorld and ScienceBoard clients work against it unchanged) plus a token, readiness, fast
screenshots, typed actions and bounded command time. Install alone with ``pip install
coda[guest]``; run with ``coda guest serve`` (or ``python -m worker.guest``)."""
