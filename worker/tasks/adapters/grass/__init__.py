"""GRASS GIS (ScienceBoard ``sci/GrassGIS``) on stock GRASS 8.2: steps ``launch``, ``map``,
``layer``, ``scale``; checkers ``info`` and ``db``, answered by the project's state reader
inside the GUI's process (:mod:`.wxgui_state`, reached through the guest agent's
``/coda/grass``), where ScienceBoard's images answer from their patched GUI's HTTP server.

The package: :mod:`.adapter` (the adapter), :mod:`.steps`, :mod:`.checkers` (with :mod:`.reads`:
what a predicate read, for its detail; :mod:`.errata`: the opt-in corrected checks), :mod:`.gui`
(the agent's ``/coda/grass`` and waiting on the GUI's state) and :mod:`.wxgui_state` (the
reader).
"""
