"""The Spark side: the session (session), the replay run that plans one task per offsets
partition and commits their files (pipeline), Delta history and roll-back (delta)."""
