"""The recognition study (spec partB sections 1-3): can cached K/V tell a replacement from a confirmation?

Its commands (``commands.py``: ``kvprobe extract`` and ``kvprobe readout``, registered in
``kvprobe.studies.registry.COMMAND_STUDIES``) encode the recognition datasets
(``kvprobe.studies.datasets.recognition``) into a feature store, with the signed leave-one-out score
(``loo.py``, ``questions.py``) and the cache edits (``edits.py``) the store can be read after, and read
it out; ``claims.py`` holds the paper's claims its readouts test.
"""
