"""Celestia (ScienceBoard ``sci/Celestia``) on the project's build of ScienceBoard's fork: the
adapter (:mod:`.adapter`: step ``launch``, checker ``info`` over the fork's state dump, and the
answers only ScienceBoard's VM data gives) and talking to Celestia through the guest agent
(:mod:`.app`: the dump, waiting on its state, its main window)."""
