"""KAlgebra (ScienceBoard ``sci/KAlgebra``): the adapter (:mod:`.adapter`: its steps and
checkers, each answered by one of two sources), ScienceBoard's patched KAlgebra's state API
(:mod:`.patched`), any other KAlgebra's accessibility tree and ``calgebra`` (:mod:`.desktop`,
with the tree helper uploaded to the desktop, :mod:`.atspi_kalgebra`), and the point checks
(:mod:`.points`)."""
