"""Data shared by several studies: generators and loaders of released formats (bAbI, MQuAKE, OAKS, the
synthetic record histories, PG-19 filler, the quantity task) and the field checks every loader shares."""
